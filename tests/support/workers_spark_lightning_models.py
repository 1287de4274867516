"""A LightningModule for fuse.spark.lightning's test (a module the ranks import by name)."""

import lightning
import torch


class LinearRegression(lightning.LightningModule):
    """y = w . x + b, trained with the module's own steps and optimizer."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.linear(x)

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self(batch["features"]), batch["label"])

    def validation_step(self, batch, batch_idx):
        return {"loss": torch.nn.functional.mse_loss(self(batch["features"]), batch["label"])}

    def configure_optimizers(self):
        return {"optimizer": torch.optim.SGD(self.parameters(), lr=0.2)}


class WithLightning1Hooks(lightning.LightningModule):
    """A module as written for Horovod's estimator on Lightning 1.x: scalar labels of shape
    (batch,) unsqueezed by the module, ``self.log``, and ``validation_epoch_end(outputs)``
    (which Lightning 2 refuses; the estimator still calls it)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.linear(x)

    def _loss(self, batch):
        assert batch["label"].dim() == 1, f"label batch of shape {tuple(batch['label'].shape)}"
        return torch.nn.functional.mse_loss(self(batch["features"]), batch["label"].unsqueeze(1))

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_epoch_end(self, outputs):
        self.log("avg_val_loss", torch.stack(outputs).mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]


class EpochsToFile(lightning.Callback):
    """Appends ``rank epoch training-batches`` to ``path`` at the end of each training epoch:
    what the ranks' Trainers did, for the test to read."""

    def __init__(self, path):
        self.path = path

    def on_train_epoch_end(self, trainer, module):
        with open(self.path, "a") as f:
            f.write(f"{trainer.global_rank} {trainer.current_epoch} "
                    f"{trainer.num_training_batches}\n")
