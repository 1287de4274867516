"""How fuse.tensorflow hands tensors to the engine without copying them: inputs are read through
a view of the tensor's memory, allreduce outputs are written into a TensorFlow tensor that the
host function returns as it is.  In one process: no collective runs here (the tests on 2 workers
check the reduced values)."""

import needs

needs.module("tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from fuse.frameworks.tensorflow.tensors import host_array, host_output  # noqa: E402


def test_an_eager_tensor_is_read_through_a_view_not_a_copy():
    t = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    a, b = host_array(t), host_array(t)
    assert np.shares_memory(a, b)      # the tensor's own memory both times
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.flags.c_contiguous
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))
    scalar = host_array(tf.constant(2.5))   # TensorFlow gives no view of a scalar
    assert scalar.shape == () and scalar == 2.5


def test_host_output_is_a_tensor_whose_memory_the_view_writes():
    like = np.zeros((2, 3), np.float16)
    tensor, view = host_output(like)
    assert isinstance(tensor, tf.Tensor) and tensor.dtype == tf.float16
    assert view.shape == (2, 3) and view.flags.writeable
    view[...] = 7
    np.testing.assert_array_equal(tensor.numpy(), np.full((2, 3), 7, np.float16))
    other, _ = host_output(like)         # a new tensor each time
    assert not np.shares_memory(host_array(other), view)
    out, out_view = host_output(np.float32(1.0).reshape(()))
    assert isinstance(out, np.ndarray) and out is out_view and out.shape == ()


def test_a_py_function_returns_the_output_tensor_with_the_values_written():
    x = tf.constant(np.arange(6, dtype=np.float32))

    def host(t):
        tensor, view = host_output(host_array(t))
        np.multiply(host_array(t), 2, out=view)
        return tensor

    @tf.function
    def run():
        return tf.py_function(host, [x], tf.float32)

    np.testing.assert_array_equal(run().numpy(), np.arange(6) * 2)
    np.testing.assert_array_equal(x.numpy(), np.arange(6))   # the input is untouched
