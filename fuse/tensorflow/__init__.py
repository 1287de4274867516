"""``import fuse.tensorflow as hvd``: the ``horovod.tensorflow`` API on fuse (TF2, Keras 3).

A thin module: it loads the ``tensorflow`` framework adapter through the plugin registry
(which names the reason when TensorFlow is missing or too old) and re-exports its public
names.  ``fuse.tensorflow.keras`` is the Keras API.
"""

from fuse.frameworks import load_framework as _load_framework

_adapter = _load_framework("tensorflow")
_api = _adapter.api()

globals().update({_n: getattr(_api, _n) for _n in _api.__all__})
__all__ = list(_api.__all__)

del _load_framework
