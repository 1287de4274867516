"""How a fuse collective runs from TensorFlow without a compiled op.

``run_host(fn, inputs, ...)`` calls ``fn`` (numpy arrays in, numpy arrays out) on the host:

* eagerly, it is called at once on the inputs' values;
* while a ``tf.function`` is traced, it becomes a ``tf.py_function``.  py_function ops are
  stateful, so TensorFlow's automatic control dependencies run them in program order: every
  rank issues its collectives in the order the Python code wrote them, as the engine requires.

XLA cannot compile a py_function.  Rather than letting TensorFlow fail later with a message
about ``EagerPyFunc``, every entry point checks for an XLA context while tracing and raises
:class:`XlaNotSupportedError` naming what to switch off.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import control_flow_util

from fuse.frameworks.tensorflow.tensors import host_array


# Seconds spent inside fuse's host functions (conversion, submission, waiting for the
# collective) and how many ran: two clock reads per collective, read by bench/.
_host_seconds = 0.0
_host_calls = 0


def host_time() -> tuple[float, int]:
    """(seconds spent in fuse's host functions so far, number of calls)."""
    return _host_seconds, _host_calls


def _timed(fn, arrays):
    global _host_seconds, _host_calls
    start = time.perf_counter()
    try:
        return fn(arrays)
    finally:
        _host_seconds += time.perf_counter() - start
        _host_calls += 1


class XlaNotSupportedError(RuntimeError):
    """A fuse collective was traced inside an XLA-compiled function."""

    # raised as it is through tf.function's tracing (autograph would re-wrap it otherwise)
    ag_pass_through = True


def in_xla_context() -> bool:
    if tf.executing_eagerly():
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph())


def check_not_xla(what: str) -> None:
    if in_xla_context():
        raise XlaNotSupportedError(
            f"fuse.tensorflow: {what} cannot run inside an XLA-compiled function (fuse's "
            "collectives are tf.py_function calls, which XLA cannot compile). Switch XLA off "
            "for the function that calls it: tf.function(..., jit_compile=False), "
            "model.compile(..., jit_compile=False) for Keras (Keras 3's jit_compile='auto' "
            "turns XLA on when a GPU is present).")


def run_host(fn: Callable[[list], list], inputs: Sequence, out_dtypes: Sequence,
             out_shapes: Sequence, what: str) -> list:
    """``fn`` on the host values of ``inputs``; returns tensors of ``out_dtypes`` (with the
    static ``out_shapes`` set when traced)."""
    check_not_xla(what)
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    if tf.executing_eagerly():
        outs = _timed(fn, [host_array(x) for x in inputs])
        return [tf.convert_to_tensor(np.asarray(o), dtype=d) for o, d in zip(outs, out_dtypes)]

    def host(*tensors):
        outs = _timed(fn, [host_array(t) for t in tensors])
        return [np.asarray(o) for o in outs]

    outs = tf.py_function(host, inputs, out_dtypes, name=f"fuse_{what}")
    if not out_dtypes:
        return []
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return outs


def run_value(fn: Callable[[], int], what: str):
    """An int32 scalar read on the host when the graph runs (identity queries)."""
    check_not_xla(what)
    if tf.executing_eagerly():
        return tf.constant(fn(), dtype=tf.int32)
    out = tf.numpy_function(lambda: np.int32(fn()), [], tf.int32, stateful=False,
                            name=f"fuse_{what}")
    out.set_shape([])
    return out
