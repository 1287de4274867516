"""``fuse.tensorflow.keras.callbacks``: Horovod's Keras callbacks (one implementation)."""

from fuse.frameworks import load_framework as _load_framework

_load_framework("tensorflow")   # a clear error when TensorFlow is missing
from fuse.frameworks.tensorflow.keras.callbacks import *  # noqa: E402,F401,F403
from fuse.frameworks.tensorflow.keras.callbacks import __all__  # noqa: E402,F401
