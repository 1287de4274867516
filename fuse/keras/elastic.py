"""``horovod.keras.elastic``: a thin module over
:mod:`fuse.frameworks.tensorflow.keras.elastic`."""

from fuse.frameworks import load_framework as _load

_load("tensorflow")         # names the reason when TensorFlow is missing or too old

from fuse.frameworks.tensorflow.keras.elastic import *  # noqa: E402,F401,F403
from fuse.frameworks.tensorflow.keras.elastic import __all__  # noqa: E402,F401
