"""Worker side of test_mx_collectives.py: every check runs on each of the 2 ranks, on real
NDArrays and the real engine.  Each function returns what the test asserts on."""

from __future__ import annotations

import warnings

import mxnet as mx
import numpy as np

import fuse.mxnet as hvd
from fuse.frameworks.mxnet.tensors import (MxnetOps, data_address, ready_for_write,
                                           supported_dtypes)


def _data(dtype, shape, rank, salt=0) -> np.ndarray:
    """Rank ``rank``'s input: small integers, exact in every dtype after a 2-rank reduction."""
    n = int(np.prod(shape))
    base = (np.arange(n, dtype=np.float64) * 3 + 7 * rank + salt) % 11
    if dtype == "bool":
        return (base.reshape(shape) % 2 == rank % 2)
    return base.reshape(shape).astype(dtype)


def _nd(arr: np.ndarray) -> mx.nd.NDArray:
    return mx.nd.array(arr, dtype=arr.dtype)


def _ref(values, op):
    stack = np.stack([v.astype(np.float64) for v in values])
    return {hvd.Sum: stack.sum(0), hvd.Average: stack.mean(0), hvd.Min: stack.min(0),
            hvd.Max: stack.max(0), hvd.Product: stack.prod(0)}[op]


def _same(got, expected, dtype, what):
    assert isinstance(got, mx.nd.NDArray), f"{what}: got a {type(got).__name__}"
    assert np.dtype(got.dtype) == np.dtype(dtype), f"{what}: dtype {got.dtype} != {dtype}"
    a = got.asnumpy()
    e = np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    tol = 2e-3 if dtype == "float16" else 1e-6
    if dtype == "bool":
        ok = np.array_equal(a, e.astype(bool))
    else:
        ok = np.allclose(a.astype(np.float64), e.astype(np.float64), rtol=tol, atol=tol)
    assert ok, f"{what}: got {a.reshape(-1)[:8]} expected {e.reshape(-1)[:8]}"


def dtype_matrix():
    """Every collective (out of place and in place) for every dtype fuse.mxnet supports, small
    and large (a large allreduce goes through the ring, a small one rides the negotiation)."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    covered = []
    for dt in supported_dtypes():
        for shape in ((3, 5), (40000,)):
            ins = [_data(dt, shape, k) for k in range(n)]
            ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
            if dt.startswith("float"):
                ops.append(hvd.Average)
            if dt == "bool":
                ops = [hvd.Min, hvd.Max]
            for op in ops:
                tag = f"{dt}.{shape}.{op}"
                expected = _ref(ins, op)
                if dt == "bool":
                    expected = expected.astype(bool)
                out = hvd.allreduce(_nd(ins[r]), op=op, name=f"ar.{tag}")
                _same(out, expected, dt, f"allreduce {tag}")
                t = _nd(ins[r])
                assert hvd.allreduce_(t, op=op, name=f"ar_.{tag}") is t
                _same(t, expected, dt, f"allreduce_ {tag}")
            src = _nd(ins[r])
            _same(hvd.broadcast(src, 1, name=f"bc.{dt}.{shape}"), ins[1], dt, f"broadcast {dt}")
            _same(src, ins[r], dt, f"broadcast leaves its input alone {dt}")
            assert hvd.broadcast_(src, 0, name=f"bc_.{dt}.{shape}") is src
            _same(src, ins[0], dt, f"broadcast_ {dt}")
            _same(hvd.allgather(_nd(ins[r]), name=f"ag.{dt}.{shape}"), np.concatenate(ins), dt,
                  f"allgather {dt}")
        x = _data(dt, (4, 3), r, salt=1)
        parts = [_data(dt, (4, 3), k, salt=1)[2 * r:2 * r + 2] for k in range(n)]
        _same(hvd.alltoall(_nd(x), name=f"a2a.{dt}"), np.concatenate(parts), dt,
              f"alltoall {dt}")
        if dt != "bool":
            full = sum(_data(dt, (4, 3), k, salt=2).astype(np.float64) for k in range(n))
            rs = hvd.reducescatter(_nd(_data(dt, (4, 3), r, salt=2)), op=hvd.Sum,
                                   name=f"rs.{dt}")
            _same(rs, full[2 * r:2 * r + 2], dt, f"reducescatter {dt}")
        covered.append(dt)
    hvd.shutdown()
    return covered


def api_surface():
    """Everything but the dtype matrix: identity queries, default op, average=, scale factors,
    grouped calls, uneven allgather, alltoall splits, reducescatter, objects, process sets."""
    hvd.init(process_sets="dynamic")
    r = hvd.rank()

    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (r, 2, r, 2)
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1 and hvd.is_homogeneous()
    assert hvd.is_initialized() and hvd.gloo_enabled() and hvd.gloo_built()
    assert not hvd.mpi_enabled() and hvd.nccl_built() == 0 and not hvd.cuda_built()
    assert not hvd.rocm_built() and not hvd.ddl_built() and not hvd.ccl_built()
    # Intel's Horovod distribution's name, which its test suite calls before every GPU test
    assert hvd.sycl_built() is False
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3,
                                                                                4, 5)
    assert issubclass(hvd.HorovodInternalError, RuntimeError)

    # default op Average; average= compatibility
    x = mx.nd.array([1.0, 2.0]) * (r + 1)
    _same(hvd.allreduce(x), [1.5, 3.0], "float32", "default op")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _same(hvd.allreduce(x, average=False), [3.0, 6.0], "float32", "average=False")
        _same(hvd.allreduce(x, average=True), [1.5, 3.0], "float32", "average=True")
    assert any(issubclass(c.category, DeprecationWarning) for c in caught)
    # Adasum of parallel vectors is their average
    _same(hvd.allreduce(x, op=hvd.Adasum), [1.5, 3.0], "float32", "Adasum")
    for bad, exc in ((dict(average=True, op=hvd.Sum), ValueError),):
        try:
            hvd.allreduce(x, **bad)
            raise AssertionError(f"{bad} must fail")
        except exc:
            pass

    # scale factors and priority (accepted)
    _same(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0, priority=3),
          [6.0, 12.0], "float32", "scale factors")

    # grouped allreduce, out of place and in place
    ts = [mx.nd.full((3,), r + 1), mx.nd.arange(4, dtype="float64") * (r + 1)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="grouped")
    _same(outs[0], [3.0] * 3, "float32", "grouped 0")
    _same(outs[1], np.arange(4) * 3, "float64", "grouped 1")
    _same(ts[0], [r + 1.0] * 3, "float32", "grouped is out of place")
    res = hvd.grouped_allreduce_(ts, op=hvd.Max)
    assert res[0] is ts[0] and res[1] is ts[1]
    _same(ts[0], [2.0] * 3, "float32", "grouped_ 0")
    _same(ts[1], np.arange(4) * 2, "float64", "grouped_ 1")

    # allgather with different first dimensions; grouped allgather
    _same(hvd.allgather(mx.nd.full((r + 1, 2), r)), [[0, 0], [1, 1], [1, 1]], "float32",
          "uneven allgather")
    gg = hvd.grouped_allgather([mx.nd.array([r], dtype="int32"), mx.nd.full((r + 1,), 5.0)])
    _same(gg[0], [0, 1], "int32", "grouped allgather 0")
    _same(gg[1], [5.0] * 3, "float32", "grouped allgather 1")

    # alltoall with splits (list and NDArray); without splits only the rows come back
    x = mx.nd.arange(3) + 10 * r
    splits = [1, 2] if r == 0 else [2, 1]
    out, recv = hvd.alltoall(x, splits=splits)
    _same(out, [0.0, 10.0, 11.0] if r == 0 else [1.0, 2.0, 12.0], "float32", "alltoall")
    assert recv.asnumpy().tolist() == ([1, 2] if r == 0 else [2, 1])
    out2, recv2 = hvd.alltoall(x, splits=mx.nd.array(splits, dtype="int32"))
    _same(out2, out.asnumpy(), "float32", "alltoall NDArray splits")
    assert isinstance(hvd.alltoall(mx.nd.arange(4)), mx.nd.NDArray)

    # reducescatter: Average by default, uneven rows (remainder to the first rank), grouped
    full = np.arange(6, dtype=np.float32).reshape(3, 2)
    rs = hvd.reducescatter(mx.nd.array(full * (r + 1)))
    _same(rs, (full * 1.5)[:2] if r == 0 else (full * 1.5)[2:], "float32", "reducescatter")
    grs = hvd.grouped_reducescatter([mx.nd.ones((2, 2)) * (r + 1), mx.nd.ones((4,)) * r],
                                    op=hvd.Sum)
    _same(grs[0], [[3.0, 3.0]], "float32", "grouped reducescatter 0")
    _same(grs[1], [1.0, 1.0], "float32", "grouped reducescatter 1")
    _same(hvd.reducescatter(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum, prescale_factor=2.0),
          [6.0], "float32", "reducescatter prescale")

    # Python objects
    assert hvd.broadcast_object({"from": r, "list": [r] * 3}, root_rank=1) == {
        "from": 1, "list": [1, 1, 1]}
    assert hvd.allgather_object(("rank", r)) == [("rank", 0), ("rank", 1)]

    # process sets: one set per rank (each reduces only with itself), then the global set
    sets = [hvd.add_process_set([0]), hvd.add_process_set(hvd.ProcessSet([1]))]
    mine = sets[r]
    assert mine.included() and mine.size() == 1 and mine.ranks == [r]
    _same(hvd.allreduce(mx.nd.array([5.0 + r]), op=hvd.Sum, process_set=mine), [5.0 + r],
          "float32", "allreduce in a one-rank set")
    _same(hvd.allgather(mx.nd.array([r]), process_set=mine), [r], "float32",
          "allgather in a one-rank set")
    _same(hvd.broadcast(mx.nd.array([7.0]), r, process_set=mine), [7.0], "float32",
          "broadcast in a one-rank set")
    try:
        hvd.broadcast(mx.nd.array([7.0]), 1 - r, process_set=mine)
        raise AssertionError("a root outside the set must fail")
    except ValueError as err:
        assert "root_rank" in str(err)
    _same(hvd.allreduce(mx.nd.array([r + 1.0]), op=hvd.Sum,
                        process_set=hvd.global_process_set), [3.0], "float32",
          "allreduce in the global set")
    assert all(hvd.remove_process_set(ps) for ps in sets)
    hvd.shutdown()
    return True


def engine_and_memory():
    """Zero copy and MXNet's asynchronous engine.

    * The engine reads and writes the NDArray's own memory: the buffer handed to the engine
      starts at the NDArray's data address, and an in-place allreduce of a slice changes the
      parent's rows and nothing else (a copy would leave the parent alone).
    * Inputs still being computed by MXNet are waited for (the allreduce sees the final value).
    * An in-place output still being read by a pending MXNet operator is not overwritten
      before that operator has read it."""
    hvd.init()
    r = hvd.rank()
    ops = MxnetOps()
    report = {}

    t = mx.nd.ones((64, 64)) * (r + 1)
    ready_for_write(t)
    view, code, shape = ops.describe(t)
    report["same_address"] = view.ctypes.data == data_address(t) and view.base.ndarray is t
    before = data_address(t)
    hvd.allreduce_(t, op=hvd.Sum, name="zero.copy")
    report["address_kept"] = data_address(t) == before
    report["written"] = bool((t.asnumpy() == 3).all())

    parent = mx.nd.zeros((4, 3))
    part = parent[1:3]            # a view into rows 1..2 of parent
    part[:] = r + 1
    hvd.allreduce_(part, op=hvd.Sum, name="slice")
    expected = np.zeros((4, 3), np.float32)
    expected[1:3] = 3
    report["slice_in_parent"] = bool(np.array_equal(parent.asnumpy(), expected))

    # a slow chain of pending operators makes the input; the engine must wait for its end
    w = mx.nd.ones((300, 300)) / 300
    x = mx.nd.ones((300, 300)) * (r + 1)
    for _ in range(30):
        x = mx.nd.dot(x, w)
    out = hvd.allreduce(x, op=hvd.Sum, name="pending.input")
    report["pending_input"] = bool(np.allclose(out.asnumpy(), 3.0, rtol=1e-4))

    # a pending operator reads y (behind the slow chain); allreduce_ must not overwrite y first
    y = mx.nd.full((300, 300), r + 1.0)
    slow = mx.nd.ones((300, 300))
    for _ in range(30):
        slow = mx.nd.dot(slow, w)
    snapshot = slow * 0 + y       # runs after the chain, reads y
    hvd.allreduce_(y, op=hvd.Sum, name="pending.reader")
    report["reader_saw_old"] = bool(np.allclose(snapshot.asnumpy(), r + 1.0))
    report["y_reduced"] = bool(np.allclose(y.asnumpy(), 3.0))

    # the result is usable by MXNet operators at once
    z = hvd.allreduce(mx.nd.full((5,), r + 1.0), op=hvd.Sum, name="then.compute") * 2
    report["downstream"] = z.asnumpy().tolist() == [6.0] * 5
    hvd.shutdown()
    return report


def _error_text(fn) -> str:
    try:
        fn()
    except Exception as err:   # the text is what the test compares
        return f"{type(err).__name__}: {err}"
    return "no error"


def errors():
    """Mismatches between the ranks raise on both ranks with the tensor, the ranks and both
    values; bad input raises at once, naming the problem."""
    hvd.init()
    r = hvd.rank()
    out = {}
    out["shape"] = _error_text(lambda: hvd.allreduce(mx.nd.ones((2 + r,)), name="bad.shape"))
    out["dtype"] = _error_text(lambda: hvd.allreduce(
        mx.nd.ones((2,), dtype="float32" if r == 0 else "float64"), name="bad.dtype"))
    out["op"] = _error_text(lambda: hvd.allreduce(
        mx.nd.ones((2,)), op=hvd.Sum if r == 0 else hvd.Max, name="bad.op"))
    out["root"] = _error_text(lambda: hvd.broadcast(mx.nd.ones((2,)), root_rank=r,
                                                    name="bad.root"))
    # after the errors the job still works
    ok = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="after.errors")
    out["after"] = ok.asnumpy().tolist()
    out["not_ndarray"] = _error_text(lambda: hvd.allreduce(np.ones(2)))
    out["sparse"] = _error_text(lambda: hvd.allreduce_(
        mx.nd.sparse.zeros("row_sparse", (3, 2))))
    out["splits"] = _error_text(lambda: hvd.alltoall(mx.nd.arange(3), splits=[1, 1]))
    out["predivide"] = _error_text(lambda: hvd.DistributedOptimizer(
        mx.optimizer.SGD(), gradient_predivide_factor=0.0))
    hvd.shutdown()
    return out
