"""The MXNet adapter plugin (entry point ``mxnet`` in group ``fuse.frameworks``).

Importing this package does not import mxnet; the public module :mod:`fuse.mxnet` loads the
adapter through the registry and re-exports :mod:`fuse.frameworks.mxnet.api`.

MXNet 1.9.1 is the last release and needs NumPy < 1.24, so it lives in an environment of its
own (``pip install fuse-dl[mxnet]`` pins NumPy; ``scripts/test_mxnet.sh`` makes ``.venv-mxnet``).
"""

from __future__ import annotations

from fuse.frameworks.base import FrameworkAdapter


class MxnetAdapter(FrameworkAdapter):
    name = "mxnet"
    module = "mxnet"
    distributions = ("mxnet", "mxnet-mkl", "mxnet-native")
    min_version = (1, 9)
    extra = "mxnet"

    api_module = "fuse.frameworks.mxnet.api"
    ops_object = "fuse.frameworks.mxnet.mpi_ops:ops"
