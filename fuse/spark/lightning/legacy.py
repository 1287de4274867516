"""Horovod's legacy form of the Lightning estimator: a plain ``torch.nn.Module`` with an
``optimizer`` and a ``loss`` (as the torch estimator takes them), trained as a
``LightningModule`` that :func:`to_lightning_module` makes around it."""

from __future__ import annotations

__all__ = ["to_lightning_module"]


def to_lightning_module(model, optimizer, loss_fns, loss_weights, feature_cols, label_cols,
                        sample_weights_col=None, metrics=None, base=None):
    """A LightningModule (a subclass of ``base``, default ``lightning.pytorch``'s) that
    trains ``model`` with ``optimizer`` (rebuilt on the module's parameters) and the sum of
    ``loss_fns`` weighted by ``loss_weights``, one per label column; batches are dicts
    column -> tensor, as the estimator gives them."""
    import torch

    from fuse.spark.torch.remote import compute_loss, optimizer_for

    if base is None:
        from lightning.pytorch import LightningModule as base
    weights = list(loss_weights or [1.0] * len(label_cols))

    class LegacyModule(base):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args, **kwargs):
            return self.model(*args, **kwargs)

        def configure_optimizers(self):
            return optimizer_for(self.model, optimizer)

        def _loss(self, batch):
            inputs = [batch[c] for c in feature_cols]
            outputs = self.model(*inputs)
            outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            labels = [batch[c] for c in label_cols]
            sample_weights = batch[sample_weights_col] if sample_weights_col else None
            loss = compute_loss(outputs, labels, loss_fns, weights, sample_weights)
            return loss, outputs, labels

        def training_step(self, batch, batch_idx):
            loss, outputs, labels = self._loss(batch)
            self.log("train_loss", loss)
            self._log_metrics("train_", outputs, labels)
            return loss

        def validation_step(self, batch, batch_idx):
            loss, outputs, labels = self._loss(batch)
            self.log("val_loss", loss)
            self._log_metrics("val_", outputs, labels)
            return loss

        def _log_metrics(self, prefix, outputs, labels):
            for metric in metrics or []:
                for output, label, col in zip(outputs, labels, label_cols):
                    name = metric.__name__ if len(label_cols) == 1 else f"{metric.__name__}_{col}"
                    with torch.no_grad():
                        value = metric(output, label.reshape(output.shape).to(output.dtype)
                                       if label.numel() == output.numel() else label)
                    self.log(prefix + name, value)

    return LegacyModule()
