"""``fuse.spark.keras``: train Keras models as a Spark ML stage (was ``horovod.spark.keras``)."""

from .estimator import KerasEstimator, KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
