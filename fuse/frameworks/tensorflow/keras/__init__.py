"""Keras 3 support, written once for ``fuse.keras`` and ``fuse.tensorflow.keras``."""
