"""``horovod.common.elastic``: the framework-neutral elastic State, ObjectState and run_fn, for
scripts that import them from there (the implementation is :mod:`fuse.worker.elastic`)."""

from fuse.worker.elastic import ObjectState, State, run_fn  # noqa: F401

__all__ = ["State", "ObjectState", "run_fn"]
