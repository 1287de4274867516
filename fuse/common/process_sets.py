"""``horovod.common.process_sets``: ProcessSet and the global set, for scripts that import them
from there (the implementation is :mod:`fuse.worker.process_sets`)."""

from fuse.worker.process_sets import ProcessSet, global_process_set  # noqa: F401

__all__ = ["ProcessSet", "global_process_set"]
