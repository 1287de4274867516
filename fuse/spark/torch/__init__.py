"""``fuse.spark.torch``: train PyTorch models as a Spark ML stage (was ``horovod.spark.torch``)."""

from .estimator import TorchEstimator, TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
