"""``fuse.spark.lightning``: train a PyTorch Lightning ``LightningModule`` as a Spark ML stage
(was ``horovod.spark.lightning``)."""

from .estimator import TorchEstimator, TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
