"""The numpy adapter: fuse's core API works on numpy arrays, so it is always available."""

from __future__ import annotations

from importlib import metadata

from fuse.frameworks.base import FrameworkAdapter


class NumpyAdapter(FrameworkAdapter):
    name = "numpy"
    module = "numpy"

    api_module = "fuse._api"
    ops_object = "fuse._api:ops"

    @classmethod
    def version(cls) -> str | None:
        try:
            return metadata.version("numpy")
        except metadata.PackageNotFoundError:  # numpy vendored or installed without metadata
            import numpy

            return numpy.__version__
