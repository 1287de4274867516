"""Worker side of test_collectives.py: every check runs on each of the 2 ranks."""

from __future__ import annotations

import warnings

import time

import torch

import fuse.torch as hvd
from fuse.frameworks.torch.tensors import supported_dtypes


def _data(dtype, shape, rank, salt=0):
    n = 1
    for d in shape:
        n *= d
    base = (torch.arange(n, dtype=torch.float64) * 3 + 7 * rank + salt) % 11
    if dtype == torch.bool:
        return (base.reshape(shape) % 2 == rank % 2)
    return base.reshape(shape).to(dtype)


def _ref(values, op):
    acc = torch.stack([v.double() for v in values])
    if op == hvd.Sum:
        return acc.sum(0)
    if op == hvd.Average:
        return acc.mean(0)
    if op == hvd.Min:
        return acc.min(0).values
    if op == hvd.Max:
        return acc.max(0).values
    return acc.prod(0)


def _close(a, b, dtype, what):
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-6)
    a, b = a.double(), b.double()
    if not torch.allclose(a, b, rtol=tol, atol=tol):
        raise AssertionError(f"{what}: got {a.flatten()[:8].tolist()} expected "
                             f"{b.flatten()[:8].tolist()}")


def dtype_matrix():
    """allreduce (every op, out of place, in place, async) and broadcast/allgather/alltoall/
    reducescatter for every dtype fuse supports on CPU.  Returns the dtypes covered."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    covered = []
    for dt in supported_dtypes():
        name = str(dt).replace("torch.", "")
        for shape in ((3, 5), (40000,)):
            ins = [_data(dt, shape, k) for k in range(n)]
            ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
            if dt.is_floating_point:
                ops.append(hvd.Average)
            if dt == torch.bool:
                ops = [hvd.Min, hvd.Max]
            for op in ops:
                tag = f"{name}.{shape}.{op}"
                out = hvd.allreduce(ins[r], op=op, name=f"ar.{tag}")
                assert out.dtype == dt and out.shape == ins[r].shape, tag
                expected = _ref(ins, op)
                if dt == torch.bool:
                    _close(out, expected.bool(), dt, tag)
                elif dt.is_floating_point:
                    _close(out, expected, dt, tag)
                else:
                    assert torch.equal(out, expected.to(dt)), (tag, out[:5], expected[:5])
                t = ins[r].clone()
                res = hvd.allreduce_(t, op=op, name=f"ar_.{tag}")
                assert res is t and torch.equal(t, out), f"in place {tag}"
                h = hvd.allreduce_async(ins[r], op=op, name=f"ara.{tag}")
                assert torch.equal(hvd.synchronize(h), out), f"async {tag}"
            b = hvd.broadcast(ins[r], 1, name=f"bc.{name}.{shape}")
            assert torch.equal(b, ins[1]), f"broadcast {name}"
            g = hvd.allgather(ins[r], name=f"ag.{name}.{shape}")
            assert torch.equal(g, torch.cat(ins)), f"allgather {name}"
        x = _data(dt, (4, 3), r, salt=1)
        y = hvd.alltoall(x, name=f"a2a.{name}")
        parts = [_data(dt, (4, 3), k, salt=1)[2 * r:2 * r + 2] for k in range(n)]
        assert torch.equal(y, torch.cat(parts)), f"alltoall {name}"
        if dt != torch.bool:
            rs = hvd.reducescatter(_data(dt, (4, 3), r, salt=2), op=hvd.Sum,
                                   name=f"rs.{name}")
            full = sum(_data(dt, (4, 3), k, salt=2).double() for k in range(n))
            _close(rs, full[2 * r:2 * r + 2].to(dt), dt, f"reducescatter {name}")
        covered.append(name)
    return covered


def api_surface():
    """Everything but the dtype matrix: async handles, grouped calls, scale factors, average=,
    process sets, objects, barrier/join, identity queries, errors, autograd."""
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    results = {}

    # identity and built/enabled queries
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (r, 2, r, 2)
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1 and hvd.is_homogeneous()
    assert hvd.is_initialized() and hvd.gloo_enabled() and hvd.gloo_built()
    assert not hvd.mpi_enabled()
    # NCCL is "built" when CuPy's NCCL binding loads (a GPU is not needed for that)
    try:
        from cupy.cuda import nccl
        version = nccl.get_version()
    except Exception:
        version = 0
    assert hvd.nccl_built() == version and hvd.cuda_built() == (version > 0)
    assert not hvd.rocm_built() and not hvd.ddl_built() and not hvd.ccl_built()
    # Intel's Horovod distribution's name, which its test suite calls before every GPU test
    assert hvd.sycl_built() is False
    assert isinstance(hvd.mpi_built(), bool)
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3,
                                                                                4, 5)
    assert hvd.HorovodInternalError is hvd.FuseInternalError
    assert issubclass(hvd.HorovodInternalError, RuntimeError)

    # default op is Average; average= compatibility
    x = torch.tensor([1.0, 2.0]) * (r + 1)
    assert torch.equal(hvd.allreduce(x), torch.tensor([1.5, 3.0]))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s = hvd.allreduce(x, average=False)
        a = hvd.allreduce(x, average=True)
    assert torch.equal(s, torch.tensor([3.0, 6.0])) and torch.equal(a, torch.tensor([1.5, 3.0]))
    assert any(issubclass(i.category, DeprecationWarning) for i in w), "average= warns"
    try:
        hvd.allreduce(x, average=True, op=hvd.Sum)
        raise AssertionError("op and average together must fail")
    except ValueError:
        pass
    # Adasum of parallel vectors is their average
    assert torch.allclose(hvd.allreduce(x, op=hvd.Adasum), torch.tensor([1.5, 3.0]))

    # scale factors
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
    assert torch.equal(got, torch.tensor([6.0, 12.0])), got

    # async + poll
    h = hvd.allreduce_async(torch.full((1000,), float(r)), op=hvd.Sum, name="poll.me")
    import time
    deadline = time.time() + 30
    while not hvd.poll(h):
        assert time.time() < deadline, "poll never became true"
        time.sleep(0.001)
    assert torch.equal(hvd.synchronize(h), torch.full((1000,), 1.0))
    assert hvd.synchronize(123456789) is None, "unknown handles return None"

    # grouped allreduce: out of place, in place, async variants
    ts = [torch.full((3,), float(r + 1)), torch.arange(4, dtype=torch.float64) * (r + 1)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    assert torch.equal(outs[0], torch.full((3,), 3.0))
    assert torch.equal(outs[1], torch.arange(4, dtype=torch.float64) * 3)
    outs = hvd.synchronize(hvd.grouped_allreduce_async(ts))
    assert torch.equal(outs[0], torch.full((3,), 1.5))
    cl = [t.clone() for t in ts]
    hvd.grouped_allreduce_(cl, op=hvd.Max)
    assert torch.equal(cl[0], torch.full((3,), 2.0))
    cl = [t.clone() for t in ts]
    res = hvd.synchronize(hvd.grouped_allreduce_async_(cl, op=hvd.Min))
    assert res[0] is cl[0] and torch.equal(cl[0], torch.full((3,), 1.0))

    # allgather with different dim 0, grouped allgather
    g = hvd.allgather(torch.full((r + 1, 2), float(r)))
    assert torch.equal(g, torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]))
    g = hvd.synchronize(hvd.allgather_async(torch.tensor([r])))
    assert torch.equal(g, torch.tensor([0, 1]))
    gg = hvd.grouped_allgather([torch.tensor([r]), torch.full((r + 1,), 5.0)])
    assert torch.equal(gg[0], torch.tensor([0, 1])) and gg[1].shape == (3,)

    # broadcast variants
    b = torch.full((5,), float(r))
    assert torch.equal(hvd.broadcast(b, 1), torch.full((5,), 1.0))
    assert torch.equal(b, torch.full((5,), float(r))), "broadcast is out of place"
    hvd.broadcast_(b, 0)
    assert torch.equal(b, torch.zeros(5))
    b = torch.full((5,), float(r))
    assert torch.equal(hvd.synchronize(hvd.broadcast_async(b, 1)), torch.ones(5))
    hvd.synchronize(hvd.broadcast_async_(b, 1))
    assert torch.equal(b, torch.ones(5))

    # alltoall with splits (list and tensor), async returns the tuple
    x = torch.arange(3, dtype=torch.float32) + 10 * r
    splits = [1, 2] if r == 0 else [2, 1]
    out, recv = hvd.alltoall(x, splits=splits)
    if r == 0:
        assert torch.equal(out, torch.tensor([0.0, 10.0, 11.0])), out
        assert recv.tolist() == [1, 2]
    else:
        assert torch.equal(out, torch.tensor([1.0, 2.0, 12.0])), out
        assert recv.tolist() == [2, 1]
    out2, recv2 = hvd.synchronize(hvd.alltoall_async(x, torch.tensor(splits,
                                                                        dtype=torch.int32)))
    assert torch.equal(out2, out) and recv2.tolist() == recv.tolist()
    assert isinstance(hvd.alltoall(torch.arange(4.0)), torch.Tensor)

    # reducescatter: Average default, uneven rows, grouped
    rs = hvd.reducescatter(torch.arange(6, dtype=torch.float32).reshape(3, 2) * (r + 1))
    full = torch.arange(6, dtype=torch.float32).reshape(3, 2) * 1.5
    assert torch.equal(rs, full[:2] if r == 0 else full[2:]), rs
    grs = hvd.grouped_reducescatter([torch.ones(2, 2) * (r + 1), torch.ones(4) * r],
                                    op=hvd.Sum)
    assert torch.equal(grs[0], torch.full((1, 2), 3.0)) and torch.equal(grs[1],
                                                                     torch.ones(2))
    grs = hvd.synchronize(hvd.grouped_reducescatter_async([torch.ones(2) * r]))
    assert torch.equal(grs[0], torch.full((1,), 0.5))
    # Horovod's callers catch RuntimeError (torch.FatalError) for an op reducescatter cannot
    # do, and earlier fuse callers ValueError: both catch it, before anything is submitted
    for call in (lambda: hvd.reducescatter(torch.ones(2), op=hvd.Adasum),
                 lambda: hvd.grouped_reducescatter([torch.ones(2)], op=hvd.Adasum)):
        for caught in (RuntimeError, ValueError):
            try:
                call()
                raise AssertionError("reducescatter with Adasum must be refused")
            except caught as err:
                assert "only Average and Sum" in str(err), err
    for call in (lambda: hvd.reducescatter(torch.tensor(1.0)),
                 lambda: hvd.grouped_reducescatter([torch.ones(2), torch.tensor(1.0)])):
        try:
            call()
            raise AssertionError("reducescatter of a scalar must be refused")
        except ValueError as err:
            assert "got a scalar" in str(err), err

    # objects, barrier, join
    assert hvd.broadcast_object({"from": r}, root_rank=1) == {"from": 1}
    assert hvd.allgather_object(("r", r)) == [("r", 0), ("r", 1)]
    hvd.barrier()
    if r == 1:   # rank 1 runs out of data first: rank 0's allreduce sees its zeros
        last = hvd.join()
    else:
        got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="joined.sum")
        assert torch.equal(got, torch.ones(3)), got
        last = hvd.join()
    assert last == 0, last

    # process sets: a set of rank 0 only, then removal
    ps = hvd.add_process_set([0])
    assert ps.ranks == [0] and ps.included() == (r == 0)
    if r == 0:
        y = hvd.allreduce(torch.tensor([7.0]), op=hvd.Sum, process_set=ps)
        assert torch.equal(y, torch.tensor([7.0]))
    else:
        try:
            hvd.allreduce(torch.tensor([7.0]), process_set=ps)
            raise AssertionError("a non-member must be refused")
        except ValueError as err:
            assert "not a member" in str(err), err
    assert hvd.remove_process_set(ps)
    try:
        hvd.allreduce(torch.ones(1), process_set=ps)
        raise AssertionError("a removed set must be refused")
    except ValueError:
        pass

    # local errors
    for bad, what in ((torch.ones(3, 4).t(), "contiguous"),):
        try:
            hvd.allreduce_(bad)
            raise AssertionError("non-contiguous in-place must fail")
        except ValueError as err:
            assert what in str(err), err
    assert torch.equal(hvd.allreduce(torch.ones(3, 4).t() * (r + 1), op=hvd.Sum),
                       torch.full((4, 3), 3.0)), "out of place takes any layout"
    try:
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
        raise AssertionError("complex must be refused")
    except ValueError as err:
        assert "not supported" in str(err), err
    # Rank 1 holds back its half, so rank 0's first "dup.name" is surely still in flight when
    # rank 0 submits the name again (small allreduces otherwise finish in microseconds).
    if r == 1:
        time.sleep(0.5)
    h = hvd.allreduce_async(torch.ones(2), name="dup.name")
    if r == 0:
        try:
            hvd.allreduce_async(torch.ones(2), name="dup.name")
            raise AssertionError("a duplicate in-flight name must fail")
        except ValueError as err:
            assert "dup.name" in str(err)
    hvd.synchronize(h)

    # cross-rank mismatches reach both ranks as HorovodInternalError
    mismatches = {
        "shape": lambda: hvd.allreduce(torch.ones(2 + r), name="mm.shape"),
        "dtype": lambda: hvd.allreduce(torch.ones(2, dtype=torch.float32 if r else
                                                  torch.float64), name="mm.dtype"),
        "op": lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum if r else hvd.Max,
                                    name="mm.op"),
        "root": lambda: hvd.broadcast(torch.ones(2), r, name="mm.root"),
        "kind": lambda: (hvd.allreduce(torch.ones(2), name="mm.kind") if r else
                         hvd.allgather(torch.ones(2), name="mm.kind")),
    }
    for label, call in mismatches.items():
        try:
            call()
            raise AssertionError(f"mismatched {label} must fail")
        except hvd.HorovodInternalError as err:
            results[label] = str(err)
    # after errors the engine still works
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), 2.0))
    return results


def autograd_rules():
    """Gradients of the differentiable collectives, checked against hand-derived values."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()

    x = torch.ones(3, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 3.0)), x.grad          # sum of (r+1)
    x = torch.ones(3, requires_grad=True)
    (hvd.allreduce(x) * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 1.5)), x.grad          # mean of (r+1)
    x = torch.ones(3, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0) * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 6.0)), x.grad

    xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    (ys[0].sum() * (r + 1) + ys[1].sum() * 2).backward()
    assert torch.equal(xs[0].grad, torch.full((2,), 3.0)) and torch.equal(
        xs[1].grad, torch.full((3,), 4.0)), (xs[0].grad, xs[1].grad)

    # allgather: grad = mean over ranks of d(loss_r)/dy, rows of this rank
    x = torch.ones(r + 1, 2, requires_grad=True)
    y = hvd.allgather(x)
    w = torch.arange(6, dtype=torch.float32).reshape(3, 2) * (r + 1)
    (y * w).sum().backward()
    mean_w = torch.arange(6, dtype=torch.float32).reshape(3, 2) * 1.5
    assert torch.equal(x.grad, mean_w[:1] if r == 0 else mean_w[1:]), x.grad

    # broadcast: root gets the mean of grads, others zero
    x = torch.ones(2, requires_grad=True)
    (hvd.broadcast(x, 0) * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 1.5) if r == 0 else torch.zeros(2)), x.grad

    # alltoall: rows sent to rank j get rank j's gradient
    x = torch.ones(4, 1, requires_grad=True)
    y = hvd.alltoall(x)
    (y * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.tensor([[1.0], [1.0], [2.0], [2.0]])), x.grad
    x = torch.ones(3, requires_grad=True)
    y, _ = hvd.alltoall(x, splits=[1, 2] if r == 0 else [2, 1])
    (y * (r + 1)).sum().backward()
    want = torch.tensor([1.0, 2.0, 2.0]) if r == 0 else torch.tensor([1.0, 1.0, 2.0])
    assert torch.equal(x.grad, want), x.grad

    # reducescatter, Horovod's convention: the allgathered gradient (Average), times the set
    # size for Sum
    x = torch.ones(4, requires_grad=True)
    (hvd.reducescatter(x) * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.tensor([1.0, 1.0, 2.0, 2.0])), x.grad
    x = torch.ones(4, requires_grad=True)
    (hvd.reducescatter(x, op=hvd.Sum) * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.tensor([2.0, 2.0, 4.0, 4.0])), x.grad

    # compression: fp16/bf16 on the wire, result back in float32, gradient flows
    x = torch.full((4,), 1.0 / 3, requires_grad=True)
    for comp, wire_tol in ((hvd.Compression.fp16, 1e-3), (hvd.Compression.bf16, 4e-3)):
        y = hvd.allreduce(x, op=hvd.Sum, compression=comp)
        assert y.dtype == torch.float32
        assert torch.allclose(y, torch.full((4,), 2.0 / 3), atol=wire_tol), y
        assert not torch.equal(y, torch.full((4,), 2.0 / 3)), "the wire was not compressed"
    ints = torch.arange(3)
    assert hvd.Compression.fp16.compress(ints)[0] is ints, "integers are not compressed"
    return True
