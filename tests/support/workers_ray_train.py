"""The training function of test_ray_train.py, in the shape of Ray's HorovodTrainer examples:
``hvd.init()``, a DistributedOptimizer, one step per epoch on this rank's own data, rank 0's
checkpoint through ``ray.train.report``, and a resume from ``ray.train.get_checkpoint()``.

With ``config["kill_at"]`` set, rank 1 kills its own process (SIGKILL) once, in that epoch
after the checkpoint before it was reported; ``config["marker"]`` remembers that it did."""

import os
import signal
import tempfile

import torch

EPOCHS, LR = 4, 0.1


def rank_data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(8, 4, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])


def fresh_model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def train_loop(config):
    import ray.train
    import fuse.torch as hvd

    hvd.init()
    model = fresh_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters())
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as path:
            state = torch.load(os.path.join(path, "state.pt"))
        model.load_state_dict(state["model"])
        start = state["epoch"] + 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = rank_data(hvd.rank())
    for epoch in range(start, config.get("epochs", EPOCHS)):
        if (epoch == config.get("kill_at") and hvd.rank() == 1
                and not os.path.exists(config["marker"])):
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        metrics = {"epoch": epoch, "started_at": start, "rank": hvd.rank(), "size": hvd.size(),
                   "loss": hvd.allreduce(loss.detach(), name="loss").item(),
                   "weights": [p.detach().flatten().tolist() for p in model.parameters()]}
        with tempfile.TemporaryDirectory() as tmp:
            saved = None
            if hvd.rank() == 0:
                torch.save({"model": model.state_dict(), "epoch": epoch},
                           os.path.join(tmp, "state.pt"))
                saved = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=saved)


def reference_weights(epochs=EPOCHS):
    """The weights of one process taking both ranks' data as one batch (the average of the
    ranks' gradients is the gradient of the mean loss over both, the batches being equal)."""
    model = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    xs, ys = zip(*(rank_data(r) for r in range(2)))
    x, y = torch.cat(xs), torch.cat(ys)
    for _ in range(epochs):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


def tune_loop(config):
    """A Tune trial's training function: the loss after a few epochs at ``config["lr"]``,
    reported by rank 0 as Horovod's Tune examples did."""
    import ray.train
    import fuse.torch as hvd

    hvd.init()
    model = fresh_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=config["lr"]),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = rank_data(hvd.rank())
    for epoch in range(3):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        mean = hvd.allreduce(loss.detach(), name="loss").item()
        ray.train.report({"loss": mean, "size": hvd.size(), "epoch": epoch})
