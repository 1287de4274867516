"""TensorFlow tensors for the collective layer.

The collectives run on host memory through numpy: inside ``tf.py_function`` every input is an
eager tensor, and fuse reads it through a numpy view of the tensor's CPU memory
(``EagerTensor._numpy()``; the public ``numpy()`` copies the whole tensor first, and TensorFlow
tensors are immutable, so fuse only ever reads the view).  Where a collective's output has a
shape known before it runs (allreduce), :func:`host_output` allocates it as a TensorFlow tensor
and the engine writes into a view of that tensor's memory: the py_function returns the tensor
itself.  A numpy array returned instead is copied by TensorFlow into a tensor of its own (it
copies even an aligned array), 100 MB of gradients a step for a ResNet-50.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.ops import EagerTensor

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
    elif isinstance(tensor, EagerTensor):
        array = tensor._numpy()   # a view; a 0-d tensor gives a numpy scalar (np.asarray below)
    elif hasattr(tensor, "numpy"):
        array = tensor.numpy()
    else:
        array = np.asarray(tensor)
    array = np.asarray(array)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array


def host_output(like: np.ndarray):
    """``(tensor, view)``: a new TensorFlow tensor shaped and typed like ``like`` (its contents
    undefined) and a writable numpy view of its memory, for a collective to write its output
    into; return the tensor from the host function.  Must run eagerly (a host function body
    does).  A 0-d output is a plain numpy array (``(array, array)``): TensorFlow gives no view
    of a scalar."""
    if like.ndim == 0:
        out = np.empty_like(like)
        return out, out
    tensor = tf.raw_ops.Empty(shape=like.shape, dtype=tf.as_dtype(like.dtype))
    return tensor, tensor._numpy()


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
