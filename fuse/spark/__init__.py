"""fuse on Spark: ``import fuse.spark`` where a script had ``import horovod.spark``, then
``fuse.spark.run(fn, num_proc=...)`` (``pip install fuse[spark]``)."""

try:
    import pyspark as _pyspark  # noqa: F401  (the integration is nothing without it)
except ImportError as err:
    raise ImportError(f"fuse.spark needs PySpark: pip install 'fuse[spark]' ({err})") from err

from .runner import run

__all__ = ["run", "run_elastic"]


def run_elastic(*args, **kwargs):
    """Horovod's elastic Spark run: not supported yet (fuse has no elastic mode)."""
    raise NotImplementedError("fuse.spark.run_elastic: elastic training is not supported yet; "
                              "use fuse.spark.run")
