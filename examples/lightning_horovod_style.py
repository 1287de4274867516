"""A Lightning script written for HorovodStrategy (synthetic classification data, a small MLP).

Written as for Lightning 1.x's HorovodStrategy; only the strategy and the launcher differ:
    from pytorch_lightning.strategies import HorovodStrategy
        ->  from fuse.lightning.pytorch_lightning import FuseStrategy as HorovodStrategy
    horovodrun -np 2 python train.py  ->  fuserun -np 2 python train.py

Run:  fuserun -np 2 python examples/lightning_horovod_style.py
"""

import torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset

from fuse.lightning.pytorch_lightning import FuseStrategy as HorovodStrategy


class Classifier(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, sync_dist=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        acc = (self.net(x).argmax(1) == y).float().mean()
        self.log("val_acc", acc, sync_dist=True)

    def configure_optimizers(self):
        # HorovodStrategy multiplied this rate by the number of workers; so does fuse's
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)]


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g)
    y = (x[:, :3] * torch.tensor([1.0, -1.0, 0.5])).argmax(1)
    return TensorDataset(x, y)


if __name__ == "__main__":
    pl.seed_everything(0)
    trainer = pl.Trainer(strategy=HorovodStrategy(), accelerator="cpu", max_epochs=4,
                         enable_progress_bar=False, logger=False)
    trainer.fit(Classifier(), DataLoader(data(1024, 0), batch_size=32, shuffle=True),
                DataLoader(data(256, 1), batch_size=64))
    if trainer.is_global_zero:
        print(f"workers: {trainer.world_size}, val_acc: {trainer.callback_metrics['val_acc']:.3f}")
