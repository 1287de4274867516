"""Worker side of test_graph_mode.py (issue 24, items 9-11): what Horovod's own TensorFlow
suite expects, in TensorFlow 1 graphs run by a session, eagerly and inside tf.function.

Each function runs on both ranks and returns ``{"done": [...], "failures": [...]}``; every
rank issues the same collectives whatever its results, so one wrong value cannot hang the job.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import fuse.tensorflow as hvd
from workers_tf_collectives import Checks

MODES = ("eager", "function", "graph")


def _in_mode(mode, build):
    """``build()``'s result computed eagerly, inside a tf.function, or in a tf.Graph run by a
    session (values as numpy)."""
    if mode == "eager":
        return tf.nest.map_structure(lambda t: t.numpy(), build())
    if mode == "function":
        return tf.nest.map_structure(lambda t: t.numpy(), tf.function(build)())
    with tf.Graph().as_default():
        fetches = build()
        with tf.compat.v1.Session() as sess:
            return sess.run(fetches)


def _raised(mode, build):
    """The exception ``build()`` raises in ``mode`` (None if it does not)."""
    try:
        _in_mode(mode, build)
    except Exception as err:   # noqa: BLE001 - the type is what is checked
        return err
    return None


def graph_names():
    """Unnamed collectives of every kind built into one graph, fetched a few at a time (the
    session starts the ops of one fetch in whatever order its threads pick, differently on
    each rank), again and again, and after a caught mismatch in the same graph."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checks()
    dtypes = [tf.float64, tf.uint8, tf.int32, tf.float32, tf.int64, tf.float16]
    with tf.Graph().as_default():
        fetches, expected = [], []
        for i, dt in enumerate(dtypes):
            x = tf.cast(tf.fill([3 + i], r + i), dt)
            fetches.append({f"allreduce {dt.name}": hvd.allreduce(x, op=hvd.Sum),
                            f"allgather {dt.name}": hvd.allgather(
                                tf.cast(tf.fill([r + 1, 2], i), dt))})
            expected.append({f"allreduce {dt.name}": np.full([3 + i], sum(k + i for k in
                                                                         range(n))),
                             f"allgather {dt.name}": np.full([n * (n + 1) // 2, 2], i)})
        slices = tf.IndexedSlices(tf.ones([2, 3]) * (r + 1), tf.constant([r, 2]),
                                  tf.constant([4, 3]))
        fetches.append({"reducescatter": hvd.reducescatter(tf.ones([4, 3]) * (r + 1),
                                                           op=hvd.Sum),
                        "grouped_allreduce": hvd.grouped_allreduce(
                            [tf.ones([2]), tf.ones([5])], op=hvd.Sum)[1],
                        "IndexedSlices": hvd.allreduce(slices, op=hvd.Sum).values})
        expected.append({"reducescatter": np.full([4 // n, 3], n * (n + 1) / 2),
                         "grouped_allreduce": np.full([5], n),
                         "IndexedSlices": np.concatenate([np.full([2, 3], k + 1.0)
                                                          for k in range(n)])})
        bad = hvd.allreduce(tf.ones([2 + r]))
        with tf.compat.v1.Session() as sess:
            for attempt in range(3):
                for group, want in zip(fetches, expected):
                    got = sess.run(group)
                    for key in group:
                        c.close(f"graph {key} run {attempt}", got[key], want[key])
                if attempt == 1:
                    try:
                        sess.run(bad)
                        c.true("graph mismatch raises", False)
                    except tf.errors.FailedPreconditionError:
                        c.true("graph mismatch raises", True)
    return c.result()


def error_types():
    """Horovod's error types, in each mode, and a working collective after each error."""
    hvd.init()
    r = hvd.rank()
    c = Checks()
    FP = tf.errors.FailedPreconditionError
    IA = tf.errors.InvalidArgumentError
    cases = {
        "allreduce shape": (FP, lambda: hvd.allreduce(tf.ones([17 + r] * 3))),
        "allreduce rank": (FP, lambda: hvd.allreduce(
            tf.ones([17, 23 * 57] if r == 0 else [17, 23, 57]))),
        "allreduce dtype": (FP, lambda: hvd.allreduce(tf.ones([3], tf.int32 if r else
                                                              tf.float32))),
        "allgather shape": (FP, lambda: hvd.allgather(tf.ones([2, 10 * (r + 1)]))),
        "allgather dtype": (FP, lambda: hvd.allgather(tf.ones([2], tf.int32 if r else
                                                              tf.float32))),
        "broadcast shape": (FP, lambda: hvd.broadcast(tf.ones([2, 10 * (r + 1)]), 0)),
        "broadcast root": (FP, lambda: hvd.broadcast(tf.ones([3]), r)),
        "alltoall dtype": (FP, lambda: hvd.alltoall(tf.ones([2], tf.int32 if r else
                                                            tf.float32))),
        "alltoall shape": (FP, lambda: hvd.alltoall(tf.ones([4, 10 * (r + 1)]))),
        "alltoall uneven rows": (IA, lambda: hvd.alltoall(tf.ones([3]))),
        "alltoall splits sum": (IA, lambda: hvd.alltoall(tf.ones([3]), splits=[1, 1])),
        "reducescatter shape": (FP, lambda: hvd.reducescatter(tf.ones([4, 2 + r]))),
    }
    for mode in MODES:
        for what, (expected, build) in cases.items():
            err = _raised(mode, build)
            c.true(f"{what} {mode} raises {expected.__name__}", isinstance(err, expected),
                   f"{type(err).__name__}: {err}")
        after = _in_mode(mode, lambda: hvd.allreduce(tf.ones([2]), op=hvd.Sum))
        c.close(f"allreduce after the errors {mode}", after, [2.0, 2.0])
    shape_err = _raised("graph", cases["allreduce shape"][1])
    c.true("graph mismatch message names the ranks and shapes",
           "rank" in str(shape_err) and "17" in str(shape_err), str(shape_err))
    slices = tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 1]), tf.constant([4, 3]))
    for what, kwargs in {"op Max": {"op": hvd.Max}, "op Product": {"op": hvd.Product},
                         "prescale": {"prescale_factor": 2.0},
                         "postscale": {"postscale_factor": 2.0}}.items():
        try:
            hvd.allreduce(slices, **kwargs)
            c.true(f"IndexedSlices {what} raises NotImplementedError", False)
        except NotImplementedError:
            c.true(f"IndexedSlices {what} raises NotImplementedError", True)
    return c.result()


def one_rank_error_names():
    """A call that fails on one rank only, caught there, leaves the automatic names of later
    unnamed calls in step with the other rank (eagerly and inside tf.function)."""
    hvd.init()
    r = hvd.rank()
    c = Checks()
    if r == 0:
        for bad in (lambda: hvd.alltoall(tf.ones([3]), splits=[3, 1]),
                    lambda: hvd.allreduce(tf.constant([1j, 2j])),
                    lambda: tf.function(lambda: hvd.alltoall(tf.ones([3])))()):
            try:
                bad()
                c.true("the one-rank error raises", False)
            except Exception:   # noqa: BLE001 - any error: it is caught and the job goes on
                c.true("the one-rank error raises", True)
    for i in range(3):
        c.close(f"unnamed allreduce {i} after rank 0's caught error",
                hvd.allreduce(tf.fill([2 + i], float(i)), op=hvd.Sum), np.full([2 + i], 2.0 * i))
        c.close(f"unnamed alltoall {i} after rank 0's caught error",
                hvd.alltoall(tf.fill([2], float(r))), [0.0, 1.0])
    return c.result()


def variables_in_graph():
    """broadcast_, broadcast_variables and broadcast_global_variables in a TensorFlow 1
    graph, and broadcast_global_variables refused eagerly (item 11)."""
    hvd.init()
    r = hvd.rank()
    c = Checks()
    with tf.Graph().as_default():
        a = tf.compat.v1.Variable([float(r), 10.0 * r], use_resource=True)
        b = tf.compat.v1.Variable([[float(r)] * 3], use_resource=True)
        g = tf.compat.v1.Variable(float(r) + 5.0, use_resource=True)
        inplace = hvd.broadcast_([a, b], root_rank=1)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got = sess.run(inplace)
            c.close("broadcast_ returns root's values (graph)", got[0], [1.0, 10.0])
            c.close("broadcast_ assigned the variable (graph)", sess.run(a), [1.0, 10.0])
            c.close("broadcast_ second variable (graph)", sess.run(b), [[1.0] * 3])
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(hvd.broadcast_global_variables(0))
            c.close("broadcast_global_variables (graph)", sess.run(a), [0.0, 0.0])
            c.close("broadcast_global_variables, a scalar (graph)", sess.run(g), 5.0)
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(hvd.broadcast_variables([a], root_rank=1))
            c.close("broadcast_variables (graph)", sess.run(a), [1.0, 10.0])
    try:
        hvd.broadcast_global_variables(0)
        c.true("broadcast_global_variables refused eagerly", False)
    except RuntimeError:
        c.true("broadcast_global_variables refused eagerly", True)
    v = tf.Variable([float(r), 1.0 + r])
    c.close("broadcast_ eager", hvd.broadcast_(v, 1), [1.0, 2.0])
    return c.result()


def many_collectives_few_threads():
    """One session run fetching far more independent collectives than the session has
    inter-op threads (one): each rank's single thread starts them in its own order, so a
    collective that held the thread while waiting for its peer would never let the peer's
    turn come (Horovod's fused tests fetch 15-30 at once)."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checks()
    with tf.Graph().as_default():
        fetches, expected = [], []
        for i in range(12):
            fetches.append(hvd.allreduce(tf.fill([3 + i], float(r + i)), op=hvd.Sum))
            expected.append(np.full([3 + i], float(sum(k + i for k in range(n)))))
            fetches.append(hvd.allgather(tf.fill([r + 1], float(i))))
            expected.append(np.full([n * (n + 1) // 2], float(i)))
            fetches.append(hvd.broadcast(tf.fill([2], float(r * 10 + i)), i % n))
            expected.append(np.full([2], float((i % n) * 10 + i)))
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1)
        with tf.compat.v1.Session(config=config) as sess:
            for attempt in range(3):
                for k, (got, want) in enumerate(zip(sess.run(fetches), expected)):
                    c.close(f"collective {k} run {attempt}", got, want)
    return c.result()
