"""``horovod.tensorflow.util``: the helper Horovod's scripts and its own test suite import.

``_executing_eagerly()`` says whether TensorFlow runs eagerly where it is called (False while
a TensorFlow 1 graph or a ``tf.function`` is being built).  Horovod also exposes it as
``hvd._executing_eagerly``, and so does ``fuse.tensorflow``.
"""

import tensorflow as _tf


def _executing_eagerly() -> bool:
    return _tf.executing_eagerly()
