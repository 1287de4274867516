"""The PyTorch adapter plugin (entry point ``torch`` in group ``fuse.frameworks``).

Importing this package does not import torch; the public module :mod:`fuse.torch` loads the
adapter through the registry and re-exports :mod:`fuse.frameworks.torch.api`.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

from fuse.frameworks.base import FrameworkAdapter


class TorchAdapter(FrameworkAdapter):
    name = "torch"
    min_version = (2, 0)

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        if importlib.util.find_spec("torch") is None:
            return False, "torch is not installed (pip install fuse[torch])"
        version = cls.version()
        if version is not None:
            try:
                major_minor = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
            except ValueError:
                return True, ""
            if major_minor < cls.min_version:
                return False, f"torch {version} is too old; fuse.torch needs torch >= 2.0"
        return True, ""

    @classmethod
    def version(cls) -> str | None:
        try:
            return metadata.version("torch")
        except metadata.PackageNotFoundError:
            return None

    @staticmethod
    def api():
        """The module holding the public ``fuse.torch`` names (imports torch)."""
        from fuse.frameworks.torch import api
        return api
