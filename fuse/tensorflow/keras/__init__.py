"""``import fuse.tensorflow.keras as hvd``: the ``horovod.tensorflow.keras`` API for Keras 3.

The same code as :mod:`fuse.keras` (Keras 3 is TensorFlow's Keras); a thin module over the
``tensorflow`` adapter's Keras namespace.
"""

from fuse.frameworks import export_api as _export_api

__all__ = _export_api("tensorflow", globals(), keras=True)

del _export_api
