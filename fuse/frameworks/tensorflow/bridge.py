"""How a fuse collective runs from TensorFlow without a compiled op.

``run_host(fn, inputs, ...)`` calls ``fn`` (numpy arrays in; numpy arrays or the tensors of
:func:`fuse.frameworks.tensorflow.tensors.host_output` out) on the host:

* eagerly, it is called at once on the inputs' values;
* while a ``tf.function`` is traced, it becomes a ``tf.py_function``.  py_function ops are
  stateful, so TensorFlow's automatic control dependencies run them in program order: every
  rank issues its collectives in the order the Python code wrote them.
* in a TensorFlow 1 graph (run by a session) the py_function runs inside a one-element
  ``tf.data`` pipeline, whose asynchronous kernels wait on threads of their own instead of the
  session's (:func:`_call_host_off_session_threads`); a session runs independent ops in any
  order, so unnamed collectives are named when the graph is built (:func:`build_time_name`)
  and the engine pairs them by name.

Errors take TensorFlow's types, as Horovod's ops raise them: ranks that disagree (shape, dtype,
root) give ``tf.errors.FailedPreconditionError``, bad arguments found when the collective runs
(alltoall splits) ``tf.errors.InvalidArgumentError``.  Eagerly fuse raises them itself.  A
py_function cannot: TensorFlow turns any exception it raises into UnknownError (ValueError into
InvalidArgumentError), so in a graph the host function returns the mismatch as a message and
:func:`_fail_on_message` makes TensorFlow raise FailedPreconditionError carrying it.

XLA cannot compile a py_function.  Rather than letting TensorFlow fail later with a message
about ``EagerPyFunc``, every entry point checks for an XLA context while tracing and raises
:class:`XlaNotSupportedError` naming what to switch off.
"""

from __future__ import annotations

import itertools
import time
import weakref
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import control_flow_util

from fuse.exceptions import MismatchError
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


def as_tf_error(err: BaseException) -> BaseException:
    """The TensorFlow error Horovod's op would raise for ``err`` (``err`` itself otherwise)."""
    if isinstance(err, MismatchError):
        return tf.errors.FailedPreconditionError(None, None, str(err))
    if isinstance(err, ValueError):
        return tf.errors.InvalidArgumentError(None, None, str(err))
    return err


# What surrounds fuse's message in the name of the missing variable (see _fail_on_message)
_GRAPH_NOTE = "fuse: a collective failed: "
_GRAPH_NOTE_END = (" [fuse.tensorflow raises this as FailedPreconditionError, as Horovod does, "
                   "by reading a variable that does not exist; TensorFlow's text around this "
                   "note is not about your variables]")


def _missing_variable(message):
    # Runs eagerly inside a py_function: a handle to a variable nobody created, named by the
    # message; reading it fails with FailedPreconditionError quoting the name.
    text = message.numpy().decode("utf-8", "replace")
    return tf.raw_ops.VarHandleOp(dtype=tf.int32, shape=[], container="fuse_errors",
                                  shared_name=_GRAPH_NOTE + text + _GRAPH_NOTE_END)


def _fail_on_message(message, outs: list) -> list:
    """``outs`` when ``message`` is empty; otherwise a FailedPreconditionError quoting it."""
    def passed():
        return [tf.identity(o) for o in outs]

    def failed():
        handle = tf.py_function(_missing_variable, [message], tf.resource,
                                name="fuse_collective_error")
        read = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int32)
        # the outputs take the read as data (grappler drops a side-effect-free op that is
        # only a control input)
        return [tf.reshape(o, tf.shape(o) + read * 0) for o in outs]

    checked = tf.cond(tf.equal(message, ""), passed, failed)
    return list(checked) if isinstance(checked, (list, tuple)) else [checked]


def in_tf1_graph() -> bool:
    """Building a TensorFlow 1 graph (run by a session), not tracing a tf.function."""
    return not tf.executing_eagerly() and not tf.compat.v1.executing_eagerly_outside_functions()


def _call_host(host, inputs: list, dtypes: list, name: str) -> list:
    """The op calling ``host`` (which waits for the peers), as a list of its outputs.

    Eagerly and in ``tf.function`` (which runs stateful ops in program order) that op is a
    py_function.  In a TensorFlow 1 graph it is not: a py_function would hold one of the
    session's inter-op threads while its collective waits, and a session starts independent
    ops in whatever order its threads reach them, differently on each rank, so a run fetching
    more independent collectives than the session has threads could leave every thread of
    each rank waiting on collectives the other rank had not started.  See
    :func:`_call_host_off_session_threads`."""
    if in_tf1_graph():
        return _call_host_off_session_threads(host, inputs, dtypes, name)
    outs = tf.py_function(host, inputs, dtypes, name=name)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


# Datasets whose map functions hold the graph's host functions: TensorFlow keeps a
# py_function's Python callable only while the graph that made it lives, so each graph keeps
# its datasets (and their function graphs) for as long as it lives itself.
_graph_datasets: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _plain_pipeline_options() -> tf.data.Options:
    # Every run makes a new iterator, which by default rewrites and tunes the pipeline first
    # (about 3 ms a collective here); a one-element pipeline has nothing to gain from that.
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    options.autotune.enabled = False
    return options


_PLAIN_PIPELINE = _plain_pipeline_options()


def _call_host_off_session_threads(host, inputs: list, dtypes: list, name: str) -> list:
    """``host`` run where waiting holds none of the session's threads (TensorFlow 1 graphs).

    The py_function becomes the map function of a one-element ``tf.data`` pipeline over the
    inputs, read through an iterator made afresh at every run.  ``MakeIterator`` and
    ``IteratorGetNext`` are asynchronous kernels: each runs on a background thread of its own
    (one per op in the graph, idle between runs) and releases the inter-op thread that started
    it.  ``use_inter_op_parallelism=False`` runs the map function on that background thread
    too, instead of handing the py_function back to the session's pool.  So every fetched
    collective gets submitted whatever the number of session threads, and the engine pairs
    them by their build-time names (Horovod's asynchronous kernels hold no thread either)."""
    from tensorflow.python.data.ops import map_op   # the only way to set the parallelism flag

    # from_tensors needs an element: a collective without inputs (join) gets a dummy one
    args = tuple(inputs) if inputs else (tf.constant(0),)

    def call(*tensors):
        outs = tf.py_function(host, list(tensors) if inputs else [], dtypes, name=name)
        return tuple(outs) if isinstance(outs, (list, tuple)) else (outs,)

    shapes = [tf.TensorShape(None)] * len(dtypes)
    with tf.name_scope(name):
        dataset = map_op._MapDataset(tf.data.Dataset.from_tensors(args), call,
                                     use_inter_op_parallelism=False)
        dataset = dataset.with_options(_PLAIN_PIPELINE)
        iterator = tf.raw_ops.AnonymousIteratorV3(output_types=dtypes, output_shapes=shapes)
        made = tf.raw_ops.MakeIterator(dataset=dataset._variant_tensor, iterator=iterator)
        with tf.control_dependencies([made]):
            outs = tf.raw_ops.IteratorGetNext(iterator=iterator, output_types=dtypes,
                                              output_shapes=shapes)
    graph = _outermost_graph(tf_ops.get_default_graph())
    _graph_datasets.setdefault(graph, []).append(dataset)
    return list(outs)


def run_host(fn: Callable[[list], list], inputs: Sequence, out_dtypes: Sequence,
             out_shapes: Sequence, what: str) -> list:
    """``fn`` on the host values of ``inputs``; returns tensors of ``out_dtypes`` (with the
    static ``out_shapes`` set when traced)."""
    check_not_xla(what)
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    if tf.executing_eagerly():
        try:
            outs = _timed(fn, [host_array(x) for x in inputs])
        except Exception as err:
            mapped = as_tf_error(err)
            if mapped is err:
                raise
            raise mapped from err
        return [o if isinstance(o, tf.Tensor) else tf.convert_to_tensor(np.asarray(o), dtype=d)
                for o, d in zip(outs, out_dtypes)]

    def host(*tensors):
        try:
            outs = _timed(fn, [host_array(t) for t in tensors])
        except MismatchError as err:
            # empty placeholders: _fail_on_message raises before anything reads them
            return ([np.zeros((0,), d.as_numpy_dtype) for d in out_dtypes]
                    + [np.bytes_(str(err).encode())])
        # a tensor (tensors.host_output) goes back as it is; TensorFlow copies an array
        return [o if isinstance(o, tf.Tensor) else np.asarray(o) for o in outs] + [np.bytes_(b"")]

    outs = _call_host(host, inputs, out_dtypes + [tf.string], f"fuse_{what}")
    outs, message = outs[:-1], outs[-1]
    if not outs:
        return []
    outs = _fail_on_message(message, outs)
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return outs


# ---------------------------------------------------------------- automatic names

_graph_counters: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _outermost_graph(graph):
    while getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


def build_time_name(kind: str, name, pset: int):
    """The name of an unnamed collective built into a TensorFlow 1 graph (``tf.Graph`` with a
    session), else ``name``.

    Such a graph runs independent ops in whatever order its threads reach them, so a name drawn
    when the collective runs could pair different tensors across ranks.  As Horovod names its
    op when the graph is built, fuse draws the name then: the n-th unnamed collective of that
    kind built into the graph, which every rank building the same graph agrees on.  Eagerly and
    inside ``tf.function`` (whose stateful ops run in program order) names are drawn when the
    collective is queued."""
    if name is not None or not in_tf1_graph():
        return name
    graph = _outermost_graph(tf_ops.get_default_graph())
    counters = _graph_counters.setdefault(graph, {})
    counter = counters.setdefault((kind, pset), itertools.count())
    return f"{kind}.noname.{pset}.graph.{next(counter)}"


def run_value(fn: Callable[[], int], what: str):
    """An int32 scalar read on the host when the graph runs (identity queries)."""
    check_not_xla(what)
    if tf.executing_eagerly():
        return tf.constant(fn(), dtype=tf.int32)
    out = tf.numpy_function(lambda: np.int32(fn()), [], tf.int32, stateful=False,
                            name=f"fuse_{what}")
    out.set_shape([])
    return out
