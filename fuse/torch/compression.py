"""``horovod.torch.compression``: ``Compression``, ``Compressor`` and the compressors.

A thin module: the objects of ``fuse.torch.Compression`` (see :mod:`fuse.frameworks.reexport`).
"""

from fuse.frameworks.reexport import compression_names as _names
from fuse.torch import Compression as _compression

_exported = _names(_compression)
globals().update(_exported)
__all__ = sorted(_exported)

del _names, _exported
