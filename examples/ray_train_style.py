"""A Ray Train script in the shape of Ray's HorovodTrainer examples (a small regression MLP on a
Ray Dataset, a checkpoint per epoch).

Written as for HorovodTrainer; only these lines differ:
    import horovod.torch as hvd                       ->  import fuse.torch as hvd
    from ray.train.horovod import HorovodTrainer      ->  from fuse.ray.train import FuseTrainer
    HorovodTrainer(..., horovod_config=...)           ->  FuseTrainer(..., fuse_config=...)

Run:  python examples/ray_train_style.py --num-workers 2          (starts a local Ray)
"""

import argparse
import os
import tempfile

import ray
import ray.train
import torch

import fuse.torch as hvd
from fuse.ray.train import FuseTrainer


class NeuralNetwork(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(1, 15)
        self.relu = torch.nn.ReLU()
        self.layer2 = torch.nn.Linear(15, 1)

    def forward(self, x):
        return self.layer2(self.relu(self.layer1(x)))


def train_loop_per_worker(config):
    hvd.init()
    dataset_shard = ray.train.get_dataset_shard("train")
    model = NeuralNetwork()
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for epoch in range(config["num_epochs"]):
        model.train()
        for batch in dataset_shard.iter_torch_batches(batch_size=32, dtypes=torch.float):
            inputs, labels = batch["x"].unsqueeze(1), batch["y"].unsqueeze(1)
            loss = loss_fn(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        loss = hvd.allreduce(loss.detach(), name="epoch_loss").item()
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if hvd.rank() == 0:
                torch.save(model.state_dict(), os.path.join(tmp, "model.pt"))
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report({"epoch": epoch, "loss": loss, "workers": hvd.size()},
                             checkpoint=checkpoint)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    ray.init(num_cpus=args.num_workers + 1, include_dashboard=False)
    train_dataset = ray.data.from_items([{"x": x / 256, "y": 2 * x / 256 + 1} for x in range(256)])
    trainer = FuseTrainer(train_loop_per_worker,
                          train_loop_config={"lr": 0.1, "num_epochs": args.epochs},
                          scaling_config=ray.train.ScalingConfig(num_workers=args.num_workers),
                          run_config=ray.train.RunConfig(
                              storage_path=tempfile.mkdtemp(prefix="fuse-ray-train-")),
                          datasets={"train": train_dataset})
    result = trainer.fit()
    print(f"workers: {result.metrics['workers']}, final loss: {result.metrics['loss']:.4f}, "
          f"checkpoint: {result.checkpoint is not None}")
    ray.shutdown()
