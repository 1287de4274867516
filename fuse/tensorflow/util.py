"""``horovod.tensorflow.util``: the helper Horovod's scripts and its own test suite import.

``executing_eagerly()`` says whether TensorFlow runs eagerly where it is called (False while
a TensorFlow 1 graph or a ``tf.function`` is being built).  Horovod names it
``_executing_eagerly`` here and also exposes it as ``hvd._executing_eagerly``; so does
``fuse.tensorflow``.
"""

import tensorflow as _tf


def executing_eagerly() -> bool:
    return _tf.executing_eagerly()


_executing_eagerly = executing_eagerly   # Horovod's name for it
