"""The MXNet adapter plugin (entry point ``mxnet`` in group ``fuse.frameworks``).

Importing this package does not import mxnet; the public module :mod:`fuse.mxnet` loads the
adapter through the registry and re-exports :mod:`fuse.frameworks.mxnet.api`.

MXNet 1.9.1 is the last release and needs NumPy < 1.24, so it lives in an environment of its
own (``pip install fuse[mxnet]`` pins NumPy; ``scripts/test_mxnet.sh`` makes ``.venv-mxnet``).
"""

from __future__ import annotations

from fuse.frameworks.base import FrameworkAdapter


class MxnetAdapter(FrameworkAdapter):
    name = "mxnet"
    module = "mxnet"
    distributions = ("mxnet", "mxnet-mkl", "mxnet-native")
    min_version = (1, 9)
    extra = "mxnet"

    @staticmethod
    def api():
        """The module holding the public ``fuse.mxnet`` names (imports mxnet)."""
        from fuse.frameworks.mxnet import api
        return api

    @staticmethod
    def ops():
        """The ArrayOps of mxnet tensors (imports mxnet)."""
        from fuse.frameworks.mxnet.mpi_ops import _ops
        return _ops
