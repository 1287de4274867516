"""``import fuse.tensorflow.keras as hvd``: the ``horovod.tensorflow.keras`` API for Keras 3.

The same code as :mod:`fuse.keras` (Keras 3 is TensorFlow's Keras); a thin module over the
``tensorflow`` adapter's Keras namespace.
"""

from fuse.frameworks import load_framework as _load_framework

_api = _load_framework("tensorflow").keras_api()

globals().update({_n: getattr(_api, _n) for _n in _api.__all__})
__all__ = list(_api.__all__)

del _load_framework
