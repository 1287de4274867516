"""The PyTorch adapter plugin (entry point ``torch`` in group ``fuse.frameworks``).

Importing this package does not import torch; the public module :mod:`fuse.torch` loads the
adapter through the registry and re-exports :mod:`fuse.frameworks.torch.api`.
"""

from __future__ import annotations

from fuse.frameworks.base import FrameworkAdapter


class TorchAdapter(FrameworkAdapter):
    name = "torch"
    module = "torch"
    min_version = (2, 0)
    extra = "torch"

    api_module = "fuse.frameworks.torch.api"
    ops_object = "fuse.frameworks.torch.mpi_ops:ops"
