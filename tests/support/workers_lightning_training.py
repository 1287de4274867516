"""A small Lightning fit, run either on fuse's workers (``fuserun -np 2 python
workers_lightning_training.py fuse OUT DIR``) or as one plain process with the workers' combined batch
(``python workers_lightning_training.py single OUT DIR``); writes what the test compares to OUT[.rank].

The fuse run uses what a HorovodStrategy script leaned on: ``strategy="fuse"``, gradient
accumulation, gradient clipping (which must see the averaged gradients), SGD with momentum (the
optimizer state), a metric logged with ``sync_dist``, a checkpoint, ``all_gather`` and
``broadcast``.  Horovod scaled the learning rate by the number of workers, so the single run
uses the scaled rate; Lightning shuffles each worker's shard with a seeded permutation per
epoch, so the single run takes the same permutations in batches twice as large.
"""

import json
import os
import sys

import torch
import lightning.pytorch as pl
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_only

BATCH, LR, WORKERS = 4, 0.05, 2


class Regression(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        torch.manual_seed(1)
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                         torch.nn.Linear(8, 1))
        self.lr = lr
        self.extra = {}

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, sync_dist=True, on_epoch=True, on_step=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    def on_train_end(self):
        self.extra["gathered"] = self.all_gather(torch.tensor([self.global_rank, 7])).tolist()
        self.extra["broadcast"] = self.trainer.strategy.broadcast(
            f"from rank {self.global_rank}", src=1)
        self.extra["lr"] = self.trainer.optimizers[0].param_groups[0]["lr"]


class RecordingCheckpointIO(TorchCheckpointIO):
    """Writes checkpoints as usual and notes which rank wrote each one."""

    def __init__(self, record):
        super().__init__()
        self.record = record

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        with open(self.record, "a") as f:
            f.write(f"{os.environ.get('FUSE_RANK', 'single')} {path}\n")
        super().save_checkpoint(checkpoint, path, storage_options)


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(64, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def main(mode, out, workdir):
    distributed = mode == "fuse"
    if distributed:
        import fuse.lightning  # noqa: F401  (registers strategy="fuse")
    model = Regression(LR if distributed else LR * WORKERS)
    dataset = data()
    if distributed:     # Lightning gives each worker its shard (a shuffled DistributedSampler)
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH)
    else:               # the same epoch permutations (seed 0), the workers' batches combined
        order = torch.utils.data.DistributedSampler(dataset, num_replicas=1, rank=0, seed=0)
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH * WORKERS, sampler=order)
    trainer = pl.Trainer(strategy="fuse" if distributed else "auto", accelerator="cpu",
                         devices=1, max_epochs=2, accumulate_grad_batches=2,
                         gradient_clip_val=0.5, default_root_dir=workdir, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         plugins=[RecordingCheckpointIO(os.path.join(workdir, "saves"))])
    trainer.fit(model, loader)
    result = {"strategy": type(trainer.strategy).__name__, "rank": trainer.global_rank,
              "world_size": trainer.world_size, "rank_zero_only": rank_zero_only.rank,
              "steps": trainer.global_step,
              "loss": float(trainer.callback_metrics["train_loss"]),
              "weights": [p.detach().flatten().tolist() for p in model.parameters()],
              **model.extra}
    if distributed:     # the older package's Trainer takes strategy="fuse" too
        import pytorch_lightning
        classic = pytorch_lightning.Trainer(strategy="fuse", accelerator="cpu", devices=1,
                                            logger=False, enable_progress_bar=False)
        result["pytorch_lightning"] = [type(classic.strategy).__module__, classic.global_rank,
                                       classic.world_size]
    path = f"{out}.{trainer.global_rank}" if distributed else out
    with open(path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
