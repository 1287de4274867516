"""The TensorFlow adapter plugin (entry point ``tensorflow`` in group ``fuse.frameworks``).

Importing this package does not import TensorFlow; the public modules :mod:`fuse.tensorflow`,
:mod:`fuse.tensorflow.keras` and :mod:`fuse.keras` load the adapter through the registry and
re-export :mod:`fuse.frameworks.tensorflow.api` or :mod:`fuse.frameworks.tensorflow.keras.api`.

No compiled TensorFlow op is involved: the collectives run as ``tf.py_function`` calls (see
:mod:`fuse.frameworks.tensorflow.bridge`), so nothing has to be rebuilt when TensorFlow changes.
"""

from __future__ import annotations

from fuse.frameworks.base import FrameworkAdapter


class TensorflowAdapter(FrameworkAdapter):
    name = "tensorflow"
    module = "tensorflow"
    distributions = ("tensorflow", "tensorflow-cpu", "tf-nightly")
    min_version = (2, 16)   # the first release whose tf.keras is Keras 3
    extra = "tensorflow"

    api_module = "fuse.frameworks.tensorflow.api"
    ops_object = "fuse.frameworks.tensorflow.mpi_ops:ops"

    @staticmethod
    def keras_api():
        """The module holding the public ``fuse.keras`` / ``fuse.tensorflow.keras`` names."""
        from fuse.frameworks.tensorflow.keras import api
        return api
