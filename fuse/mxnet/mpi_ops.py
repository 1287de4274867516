"""``horovod.mxnet.mpi_ops``: the basics and the collectives, as scripts import them.

A thin module: the same objects as ``fuse.mxnet`` (see :mod:`fuse.common.reexport`).
"""

from fuse.common.reexport import mpi_ops_names as _names
from fuse.frameworks import load_framework as _load

_api = _load("mxnet").api()

_exported = _names(_api, "fuse.frameworks.mxnet.mpi_ops")
globals().update(_exported)
__all__ = sorted(_exported)

del _names, _exported, _load, _api
