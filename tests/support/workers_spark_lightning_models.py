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
