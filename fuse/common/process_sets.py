"""``horovod.common.process_sets``: ProcessSet and the global set, for scripts that import them
from there (the implementation is :mod:`fuse.job.process_sets`)."""

from fuse.job.process_sets import ProcessSet, global_process_set  # noqa: F401

__all__ = ["ProcessSet", "global_process_set"]
