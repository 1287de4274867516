"""The TensorFlow adapter plugin (entry point ``tensorflow`` in group ``fuse.frameworks``).

Importing this package does not import TensorFlow; the public modules :mod:`fuse.tensorflow`,
:mod:`fuse.tensorflow.keras` and :mod:`fuse.keras` load the adapter through the registry and
re-export :mod:`fuse.frameworks.tensorflow.api` or :mod:`fuse.frameworks.tensorflow.keras.api`.

No compiled TensorFlow op is involved: the collectives run as ``tf.py_function`` calls (see
:mod:`fuse.frameworks.tensorflow.bridge`), so nothing has to be rebuilt when TensorFlow changes.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

from fuse.frameworks.base import FrameworkAdapter


class TensorflowAdapter(FrameworkAdapter):
    name = "tensorflow"
    min_version = (2, 16)   # the first release whose tf.keras is Keras 3

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        if importlib.util.find_spec("tensorflow") is None:
            return False, "tensorflow is not installed (pip install fuse[tensorflow])"
        version = cls.version()
        if version is not None:
            try:
                major_minor = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
            except ValueError:
                return True, ""
            if major_minor < cls.min_version:
                return False, (f"tensorflow {version} is too old; fuse.tensorflow needs "
                               "tensorflow >= 2.16 (Keras 3)")
        return True, ""

    @classmethod
    def version(cls) -> str | None:
        for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None

    @staticmethod
    def api():
        """The module holding the public ``fuse.tensorflow`` names (imports TensorFlow)."""
        from fuse.frameworks.tensorflow import api
        return api

    @staticmethod
    def keras_api():
        """The module holding the public ``fuse.keras`` / ``fuse.tensorflow.keras`` names."""
        from fuse.frameworks.tensorflow.keras import api
        return api
