"""Worker side of test_collectives.py: each function runs on both ranks and returns what it
checked plus a list of failures (empty when everything matched).  Every rank issues the same
collectives whatever its results, so one wrong value cannot hang the job."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import fuse.tensorflow as hvd

DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
          tf.bfloat16, tf.float32, tf.float64, tf.bool]


class Checks:
    def __init__(self):
        self.failures: list[str] = []
        self.done: list[str] = []

    def close(self, what, got, expected, tol=1e-6):
        self.done.append(what)
        got = np.asarray(got, np.float64)
        expected = np.asarray(expected, np.float64)
        if got.shape != expected.shape or not np.allclose(got, expected, rtol=tol, atol=tol):
            self.failures.append(f"{what}: got {got.reshape(-1)[:8].tolist()} "
                                 f"{got.shape}, expected {expected.reshape(-1)[:8].tolist()} "
                                 f"{expected.shape}")

    def true(self, what, cond, detail=""):
        self.done.append(what)
        if not cond:
            self.failures.append(f"{what}: {detail}")

    def result(self):
        return {"done": self.done, "failures": self.failures}


def _data(rank, shape, dtype=tf.float32, salt=0):
    n = int(np.prod(shape))
    base = (np.arange(n) * 3 + 7 * rank + salt) % 11
    if dtype == tf.bool:
        return tf.constant((base % 2 == rank % 2).reshape(shape))
    return tf.cast(tf.constant(base.reshape(shape), tf.float64), dtype)


def _np(t):
    return np.asarray(tf.cast(t, tf.float64) if t.dtype != tf.bool else tf.cast(t, tf.int32))


def _run_both(fn, *args):
    """``fn(*args)`` eagerly and inside a (fresh) tf.function: [(mode, result), ...]."""
    return [("eager", fn(*args)), ("function", tf.function(fn)(*args))]


def collectives():
    """Every collective, every supported dtype for allreduce, eager and tf.function."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checks()

    for dt in DTYPES:
        x = _data(r, (3, 4), dt)
        ins = [_np(_data(k, (3, 4), dt)) for k in range(n)]
        ops = {"Min": (hvd.Min, np.min), "Max": (hvd.Max, np.max)}
        if dt != tf.bool:
            ops.update({"Sum": (hvd.Sum, np.sum), "Product": (hvd.Product, np.prod)})
        if dt.is_floating:
            ops["Average"] = (hvd.Average, np.mean)
        for opname, (op, ref) in ops.items():
            for mode, out in _run_both(lambda t, op=op: hvd.allreduce(t, op=op), x):
                tol = 2e-2 if dt in (tf.float16, tf.bfloat16) else 1e-6
                c.true(f"allreduce {dt.name} {opname} {mode} dtype", out.dtype == dt,
                       str(out.dtype))
                c.close(f"allreduce {dt.name} {opname} {mode}", _np(out),
                        ref(np.stack(ins), axis=0), tol)

    x = _data(r, (4, 3))
    ins = [_np(_data(k, (4, 3))) for k in range(n)]
    total = np.sum(ins, axis=0)
    for mode, out in _run_both(lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0,
                                                       postscale_factor=0.5, name="scaled"), x):
        c.close(f"allreduce scale factors {mode}", out, total)
    var = tf.Variable(x)
    c.close("allreduce of a tf.Variable", hvd.allreduce(var), np.mean(ins, axis=0))
    with_avg = hvd.allreduce(x, average=False)
    c.close("allreduce average=False", with_avg, total)

    for mode, outs in _run_both(lambda a, b: hvd.grouped_allreduce([a, b], op=hvd.Sum),
                                x, x * 2):
        c.close(f"grouped_allreduce[0] {mode}", outs[0], total)
        c.close(f"grouped_allreduce[1] {mode}", outs[1], total * 2)

    for comp in ("fp16", "bf16"):
        compression = getattr(hvd.Compression, comp)
        for mode, out in _run_both(lambda t: hvd.allreduce(t, compression=compression), x):
            c.true(f"allreduce {comp} keeps float32 {mode}", out.dtype == tf.float32,
                   str(out.dtype))
            c.close(f"allreduce compression {comp} {mode}", out, np.mean(ins, axis=0), 2e-2)

    # allgather with a different first dimension per rank
    g = _data(r, (r + 1, 2))
    expected = np.concatenate([_np(_data(k, (k + 1, 2))) for k in range(n)])
    for mode, out in _run_both(hvd.allgather, g):
        c.close(f"allgather {mode}", out, expected)
    for mode, outs in _run_both(lambda a, b: hvd.grouped_allgather([a, b]), g, g + 1):
        c.close(f"grouped_allgather[0] {mode}", outs[0], expected)
        c.close(f"grouped_allgather[1] {mode}", outs[1], expected + 1)

    for root in range(n):
        for mode, out in _run_both(lambda t, root=root: hvd.broadcast(t, root), x):
            c.close(f"broadcast root {root} {mode}", out, ins[root])
    v = tf.Variable(x)
    hvd.broadcast_(v, 1)
    c.close("broadcast_ variable in place", v, ins[1])
    vs = [tf.Variable(x), tf.Variable(x * 3)]
    hvd.broadcast_variables(vs, root_rank=0)
    c.close("broadcast_variables[0]", vs[0], ins[0])
    c.close("broadcast_variables[1]", vs[1], ins[0] * 3)
    vs2 = [tf.Variable(x)]
    tf.function(lambda: hvd.broadcast_variables(vs2, root_rank=1))()
    c.close("broadcast_variables in tf.function", vs2[0], ins[1])

    # alltoall: even split, and explicit splits (rank r sends k+1 rows to rank k)
    a = tf.reshape(tf.range(4 * 2, dtype=tf.float32) + 100 * r, (4, 2))
    for mode, out in _run_both(hvd.alltoall, a):
        exp = np.concatenate([np.arange(8, dtype=np.float64).reshape(4, 2)[2 * r:2 * r + 2]
                              + 100 * k for k in range(n)])
        c.close(f"alltoall even {mode}", out, exp)
    rows = sum(k + 1 for k in range(n))
    a = tf.reshape(tf.range(rows * 2, dtype=tf.float32) + 100 * r, (rows, 2))
    splits = tf.constant([k + 1 for k in range(n)], tf.int32)
    for mode, (out, received) in _run_both(lambda t, s: hvd.alltoall(t, splits=s), a, splits):
        start = sum(k + 1 for k in range(r))
        exp = np.concatenate([np.arange(rows * 2, dtype=np.float64).reshape(rows, 2)
                              [start:start + r + 1] + 100 * k for k in range(n)])
        c.close(f"alltoall splits {mode}", out, exp)
        c.close(f"alltoall received_splits {mode}", received, [r + 1] * n)
        c.true(f"alltoall received_splits int32 {mode}", received.dtype == tf.int32)

    rs = _data(r, (5, 2))
    full = np.sum([_np(_data(k, (5, 2))) for k in range(n)], axis=0)
    mine = full[:3] if r == 0 else full[3:]
    for mode, out in _run_both(lambda t: hvd.reducescatter(t, op=hvd.Sum), rs):
        c.close(f"reducescatter Sum {mode}", out, mine)
    for mode, out in _run_both(hvd.reducescatter, rs):
        c.close(f"reducescatter Average {mode}", out, mine / n)
    for mode, outs in _run_both(lambda a, b: hvd.grouped_reducescatter([a, b], op=hvd.Sum),
                                rs, rs * 2):
        c.close(f"grouped_reducescatter[0] {mode}", outs[0], mine)
        c.close(f"grouped_reducescatter[1] {mode}", outs[1], mine * 2)

    # sparse: IndexedSlices are gathered
    sl = tf.IndexedSlices(tf.constant([[1.0, 2.0]]) * (r + 1), tf.constant([r]),
                          tf.constant([n, 2]))
    red = hvd.allreduce(sl, op=hvd.Sum)
    c.close("allreduce IndexedSlices", tf.convert_to_tensor(red),
            [[1.0, 2.0], [2.0, 4.0]])

    # objects, control, identity
    c.true("broadcast_object", hvd.broadcast_object({"r": r, "l": [r]}, root_rank=1)
           == {"r": 1, "l": [1]})
    c.true("allgather_object", hvd.allgather_object(("x", r)) == [("x", k) for k in range(n)])
    c.true("broadcast_object_fn", hvd.broadcast_object_fn(root_rank=0)(r) == 0)
    hvd.barrier()
    tf.function(lambda: hvd.barrier())()
    c.true("barrier", True)

    for mode, vals in _run_both(lambda: (hvd.size_op(), hvd.rank_op(), hvd.local_rank_op(),
                                         hvd.local_size_op(), hvd.process_set_included_op())):
        c.true(f"identity ops {mode}", [int(v) for v in vals] == [n, r, r, n, 1],
               str([int(v) for v in vals]))
    c.true("identity queries", (hvd.size(), hvd.rank(), hvd.local_rank(), hvd.local_size(),
                                hvd.cross_rank(), hvd.cross_size(), hvd.is_initialized())
           == (n, r, r, n, 0, 1, True))

    # join: rank 1 runs one more allreduce than rank 0; rank 0 joins and serves it
    if r == 0:
        last = hvd.join()
    else:
        extra = hvd.allreduce(tf.constant([4.0, 4.0]), op=hvd.Sum, name="after_join")
        c.close("allreduce while a rank has joined", extra, [4.0, 4.0])
        last = hvd.join()
    c.true("join returns the last rank", int(last) in (0, 1), str(last))

    @tf.function
    def join_in_function():
        return hvd.join()
    c.true("join in tf.function", int(join_in_function()) in (0, 1))
    return c.result()


def ordering_in_function():
    """Inside one tf.function, independent collectives run in program order on every rank:
    the ranks write them in opposite variable order but the same program order, and a
    collective with a name shows the engine matched them by order, not by luck."""
    hvd.init()
    r = hvd.rank()
    c = Checks()

    @tf.function
    def many(x):
        outs = []
        for i in range(12):
            outs.append(hvd.allreduce(x + i, op=hvd.Sum, name=f"ordered.{i}"))
        return outs
    outs = many(tf.constant([float(r)]))
    for i, o in enumerate(outs):
        c.close(f"ordered allreduce {i}", o, [1.0 + 2 * i])
    for _ in range(3):   # the function runs again: same names, one after another
        outs = many(tf.constant([float(r)]))
    c.close("ordered allreduce, 4th run", outs[11], [23.0])
    return c.result()


def gradients():
    """Horovod's gradients of every collective, checked against hand-derived values, eager
    and inside tf.function."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checks()

    def grad_of(fn, x):
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(x)
            return tape.gradient(y, x)
        return [("eager", run(x)), ("function", tf.function(run)(x))]

    x = tf.constant([[1.0, 2.0], [3.0, 4.0]]) * (r + 1)
    w = tf.constant([[1.0, -1.0], [0.5, 2.0]])
    # d/dx sum(w * allreduce_sum(x)) = allreduce_sum(w) = n * w
    for mode, g in grad_of(lambda t: tf.reduce_sum(w * hvd.allreduce(t, op=hvd.Sum)), x):
        c.close(f"grad allreduce Sum {mode}", g, n * w.numpy())
    for mode, g in grad_of(lambda t: tf.reduce_sum(w * hvd.allreduce(t)), x):
        c.close(f"grad allreduce Average {mode}", g, w.numpy())
    for mode, g in grad_of(lambda t: tf.reduce_sum(
            w * hvd.grouped_allreduce([t, 2 * t], op=hvd.Sum)[1]), x):
        c.close(f"grad grouped_allreduce {mode}", g, 2 * n * w.numpy())

    # allgather: upstream gradient differs per rank (rank+1); averaged, then own rows
    rows = r + 1
    xg = tf.ones((rows, 2)) * (r + 1)
    total_rows = sum(k + 1 for k in range(n))
    offset = sum(k + 1 for k in range(r))
    for mode, g in grad_of(lambda t: tf.reduce_sum(
            hvd.allgather(t) * tf.reshape(tf.range(total_rows * 2, dtype=tf.float32),
                                          (total_rows, 2)) * (r + 1)), xg):
        coef = np.arange(total_rows * 2, dtype=np.float64).reshape(total_rows, 2)
        avg_scale = np.mean([k + 1 for k in range(n)])
        c.close(f"grad allgather {mode}", g, coef[offset:offset + rows] * avg_scale)

    # grouped_allgather: each member's gradient as allgather's (before: None)
    for mode, g in grad_of(lambda t: tf.reduce_sum(
            hvd.grouped_allgather([t, 2 * t])[1] * tf.reshape(
                tf.range(total_rows * 2, dtype=tf.float32), (total_rows, 2)) * (r + 1)), xg):
        coef = np.arange(total_rows * 2, dtype=np.float64).reshape(total_rows, 2)
        avg_scale = np.mean([k + 1 for k in range(n)])
        c.close(f"grad grouped_allgather {mode}", g, 2 * coef[offset:offset + rows] * avg_scale)

    # broadcast: average of the upstream gradients on the root, zero elsewhere
    for mode, g in grad_of(lambda t: tf.reduce_sum(hvd.broadcast(t, 0) * (r + 1)), x):
        avg = np.mean([k + 1 for k in range(n)])
        c.close(f"grad broadcast {mode}", g, np.full((2, 2), avg if r == 0 else 0.0))

    # alltoall: the gradient goes back to its sender
    a = tf.ones((4, 2))
    for mode, g in grad_of(lambda t: tf.reduce_sum(hvd.alltoall(t) * (r + 1)), a):
        # the first 2 rows went to rank 0 (scaled by 1 there), the last 2 to rank 1 (by 2)
        c.close(f"grad alltoall {mode}", g, [[1, 1], [1, 1], [2, 2], [2, 2]])

    # reducescatter (Horovod's convention): allgather of the gradient, times n for Sum, times
    # prescale_factor * postscale_factor
    rs = tf.ones((4, 2))
    for mode, g in grad_of(lambda t: tf.reduce_sum(hvd.reducescatter(t, op=hvd.Sum)
                                                   * (r + 1)), rs):
        c.close(f"grad reducescatter Sum {mode}", g,
                np.array([[1, 1], [1, 1], [2, 2], [2, 2]]) * n)
    for mode, g in grad_of(lambda t: tf.reduce_sum(hvd.reducescatter(t) * (r + 1)), rs):
        c.close(f"grad reducescatter Average {mode}", g,
                np.array([[1, 1], [1, 1], [2, 2], [2, 2]]))
    for mode, g in grad_of(lambda t: tf.reduce_sum(
            hvd.grouped_reducescatter([t], op=hvd.Sum)[0] * (r + 1)), rs):
        c.close(f"grad grouped_reducescatter {mode}", g,
                np.array([[1, 1], [1, 1], [2, 2], [2, 2]]) * n)
    for mode, g in grad_of(lambda t: tf.reduce_sum(hvd.reducescatter(
            t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0) * (r + 1)), rs):
        c.close(f"grad reducescatter Sum with scale factors {mode}", g,
                np.array([[1, 1], [1, 1], [2, 2], [2, 2]]) * n * 1.5)
    return c.result()


def errors():
    """Mismatched calls raise errors naming the tensor and what differed, on every rank; XLA
    raises XlaNotSupportedError; nothing hangs.  Returns {case: message}."""
    hvd.init()
    r = hvd.rank()
    out = {}

    def capture(key, fn):
        try:
            fn()
            out[key] = None
        except Exception as err:   # noqa: BLE001 - the message is what is checked
            out[key] = f"{type(err).__name__}: {err}"

    capture("shape", lambda: hvd.allreduce(tf.zeros((2 + r,)), name="bad_shape"))
    capture("dtype", lambda: hvd.allreduce(tf.zeros((2,), tf.float32 if r else tf.float64),
                                           name="bad_dtype"))
    capture("op", lambda: hvd.allreduce(tf.zeros((2,)), op=hvd.Sum if r else hvd.Max,
                                        name="bad_op"))
    capture("root", lambda: hvd.broadcast(tf.zeros((2,)), root_rank=r, name="bad_root"))
    capture("shape_in_function",
            lambda: tf.function(lambda: hvd.allreduce(tf.zeros((3 + r,)),
                                                      name="bad_shape_fn"))())
    capture("xla", lambda: tf.function(lambda x: hvd.allreduce(x), jit_compile=True)(
        tf.zeros((2,))))
    capture("unsupported_dtype", lambda: hvd.allreduce(tf.constant(["a"])))
    capture("scalar_reducescatter", lambda: hvd.reducescatter(tf.constant(1.0)))
    capture("scalar_grouped_reducescatter",
            lambda: hvd.grouped_reducescatter([tf.ones((2,)), tf.constant(1.0)]))
    capture("scalar_reducescatter_in_function",
            lambda: tf.function(lambda: hvd.reducescatter(tf.constant(1.0)))())
    capture("after_errors", lambda: hvd.allreduce(tf.ones((2,)), op=hvd.Sum))
    out["after_value"] = hvd.allreduce(tf.ones((2,)), op=hvd.Sum).numpy().tolist()
    return out


def process_sets():
    """Collectives on process sets of one rank each, and on the global set beside them."""
    hvd.init(process_sets="dynamic")
    r = hvd.rank()
    c = Checks()
    sets = [hvd.add_process_set([0]), hvd.add_process_set([1])]
    mine = sets[r]
    x = tf.constant([3.0, 4.0]) * (r + 1)
    for mode, out in _run_both(lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=mine), x):
        c.close(f"allreduce on a set of one {mode}", out, x)
    c.close("allgather on a set of one", hvd.allgather(x, process_set=mine), x)
    c.close("broadcast on a set of one", hvd.broadcast(x, r, process_set=mine), x)
    for mode, out in _run_both(lambda t: hvd.allreduce(t, op=hvd.Sum), x):
        c.close(f"allreduce on the global set beside them {mode}", out, [9.0, 12.0])
    c.true("ProcessSet.rank/size", mine.rank() == 0 and mine.size() == 1)
    for mode, vals in _run_both(lambda: (hvd.size_op(process_set_id=sets[0].process_set_id),
                                         hvd.process_set_included_op(sets[1].process_set_id))):
        c.true(f"size_op/process_set_included_op of an added set {mode}",
               [int(v) for v in vals] == [1, int(r == 1)], str([int(v) for v in vals]))
    c.true("included", sets[r].included() and not sets[1 - r].included())
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * (r + 1))
    c.close("DistributedGradientTape on a set of one",
            hvd.DistributedGradientTape(tape, process_set=mine).gradient(loss, [v])[0],
            [r + 1.0, r + 1.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * (r + 1))
    c.close("DistributedGradientTape on the global set",
            hvd.DistributedGradientTape(tape, process_set=hvd.global_process_set).gradient(
                loss, [v])[0], [1.5, 1.5])
    try:
        hvd.broadcast(x, 1 - r, process_set=mine)
        c.true("broadcast from a non-member root raises", False)
    except ValueError as err:
        c.true("broadcast from a non-member root raises", "root_rank" in str(err), str(err))
    for ps in sets:
        hvd.remove_process_set(ps)
    return c.result()
