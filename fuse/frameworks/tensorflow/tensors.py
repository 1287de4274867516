"""TensorFlow tensors for the collective layer.

The collectives run on host memory through numpy: inside ``tf.py_function`` every input is an
eager tensor, and ``EagerTensor.numpy()`` gives a numpy array over the tensor's CPU memory
(TensorFlow tensors are immutable, so fuse only ever reads it).  Outputs are new numpy arrays
that TensorFlow copies into its own tensor when the py_function returns: TensorFlow offers no
writable view of a tensor it owns, so that one copy at the boundary is the price of using no
compiled op.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from fuse.collectives import compression as _compression
from fuse.collectives.array_ops import NumpyOps, dtype_code

# TensorFlow dtypes fuse can reduce (as numpy sees them; bfloat16 is ml_dtypes' type)
SUPPORTED = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
             tf.bfloat16, tf.float32, tf.float64, tf.bool)


def check_dtype(dtype, what: str) -> None:
    dtype = tf.as_dtype(dtype)
    if dtype not in SUPPORTED:
        raise ValueError(f"{what}: dtype {dtype.name} is not supported; use one of "
                         f"{', '.join(d.name for d in SUPPORTED)}")


def host_array(tensor) -> np.ndarray:
    """A C-contiguous numpy array with ``tensor``'s values (a view of an eager tensor's memory
    where TensorFlow allows it)."""
    if isinstance(tensor, np.ndarray):
        array = tensor
    elif hasattr(tensor, "numpy"):
        array = tensor.numpy()
    else:
        array = np.asarray(tensor)
    array = np.asarray(array)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array


class TensorflowOps(NumpyOps):
    """The collective layer's view of TensorFlow tensors: numpy arrays at the py_function
    boundary (see the module docstring for where the copies are)."""

    name = "tensorflow"

    def describe(self, tensor):
        array = host_array(tensor)
        return array, dtype_code(array.dtype), array.shape

    def empty_like(self, tensor):
        return np.empty_like(host_array(tensor))

    def allocator(self, like):
        dtype = host_array(like).dtype

        def allocate(shape):
            out = np.empty(shape, dtype=dtype)
            return out, out
        return allocate

    def dtype_name(self, tensor) -> str:
        return tensor.dtype.name

    def is_floating(self, tensor) -> bool:
        return tensor.dtype.is_floating

    def cast(self, tensor, name: str):
        return tf.cast(tensor, tf.as_dtype(name))


Compression = _compression.compression_for(TensorflowOps())
