"""The MXNet adapter plugin (entry point ``mxnet`` in group ``fuse.frameworks``).

Importing this package does not import mxnet; the public module :mod:`fuse.mxnet` loads the
adapter through the registry and re-exports :mod:`fuse.frameworks.mxnet.api`.

MXNet 1.9.1 is the last release and needs NumPy < 1.24, so it lives in an environment of its
own (``pip install fuse[mxnet]`` pins NumPy; ``scripts/test_mxnet.sh`` makes ``.venv-mxnet``).
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

from fuse.frameworks.base import FrameworkAdapter


class MxnetAdapter(FrameworkAdapter):
    name = "mxnet"
    min_version = (1, 9)

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        if importlib.util.find_spec("mxnet") is None:
            return False, "mxnet is not installed (pip install fuse[mxnet])"
        version = cls.version()
        if version is not None:
            try:
                major_minor = tuple(int(p) for p in version.split(".")[:2])
            except ValueError:
                return True, ""
            if major_minor < cls.min_version:
                return False, f"mxnet {version} is too old; fuse.mxnet needs mxnet >= 1.9"
        return True, ""

    @classmethod
    def version(cls) -> str | None:
        for dist in ("mxnet", "mxnet-mkl", "mxnet-native"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None

    @staticmethod
    def api():
        """The module holding the public ``fuse.mxnet`` names (imports mxnet)."""
        from fuse.frameworks.mxnet import api
        return api
