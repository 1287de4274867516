"""fuse on Spark: ``import fuse.spark`` where a script had ``import horovod.spark``, then
``fuse.spark.run(fn, num_proc=...)`` (``pip install fuse-dl[spark]``)."""

try:
    import pyspark as _pyspark  # noqa: F401  (the integration is nothing without it)
except ImportError as err:
    raise ImportError(f"fuse.spark needs PySpark: pip install 'fuse-dl[spark]' ({err})") from err

from .elastic import run_elastic
from .preflight import WorkersCannotImportFuse, check_workers_import_fuse
from .runner import run

__all__ = ["run", "run_elastic", "check_workers_import_fuse", "WorkersCannotImportFuse"]
