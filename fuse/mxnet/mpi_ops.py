"""``horovod.mxnet.mpi_ops``: the basics and the collectives, as scripts import them.

A thin module: the same objects as ``fuse.mxnet`` (see :mod:`fuse.frameworks.reexport`).
"""

from fuse.frameworks.reexport import export_mpi_ops as _export

__all__ = _export("mxnet", globals())

del _export
