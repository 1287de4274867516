"""Horovod's module layout on top of fuse's: what ``horovod.<framework>.mpi_ops`` and
``horovod.<framework>.compression`` hold, picked from a framework's public namespace.

Scripts import from those submodules (``from horovod.torch.mpi_ops import allreduce_async``,
``from horovod.torch.compression import Compression``); the thin modules
``fuse.<framework>.mpi_ops`` and ``.compression`` are built with these two functions, so the
objects are the very ones ``fuse.<framework>`` exports.
"""

from __future__ import annotations

from fuse.collectives import compression as _compression
from fuse.common import surface as _surface


def mpi_ops_names(api, ops_module: str) -> dict:
    """The names of ``api`` (a framework's public namespace) that Horovod keeps in its
    ``mpi_ops`` module: the common basics (init, size, ops, process sets, errors) and the
    collectives defined in ``ops_module``."""
    common = set(_surface.__all__)
    return {n: getattr(api, n) for n in api.__all__
            if n in common or getattr(getattr(api, n), "__module__", None) == ops_module}


def compression_names(compression: type) -> dict:
    """What Horovod's ``compression`` module holds, for a framework's ``Compression``."""
    names = {"Compression": compression, "Compressor": _compression.Compressor,
             "NoneCompressor": compression.none, "FP16Compressor": compression.fp16}
    if hasattr(compression, "bf16"):
        names["BF16Compressor"] = compression.bf16
    return names


def export_mpi_ops(framework: str, namespace: dict) -> list[str]:
    """Fill ``fuse.<framework>.mpi_ops`` (``namespace``) with what Horovod keeps there; returns
    the names, for ``__all__``."""
    from fuse.frameworks import load_framework

    exported = mpi_ops_names(load_framework(framework).api(),
                             f"fuse.frameworks.{framework}.mpi_ops")
    namespace.update(exported)
    return sorted(exported)
