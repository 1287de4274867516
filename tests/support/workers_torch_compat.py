"""Worker side of test_compat.py: behaviours Horovod scripts and test suites rely on
(issue 24).  Every function runs on each of the 2 ranks."""

from __future__ import annotations

import logging

import torch

import fuse.torch as hvd


def reducescatter_gradient():
    """Horovod's reducescatter backward: allgather(grad), times the set size for Sum, times
    prescale_factor * postscale_factor."""
    hvd.init()
    n = hvd.size()
    got = {}
    for label, kwargs in (("sum", {"op": hvd.Sum}), ("average", {"op": hvd.Average}),
                          ("default", {}),
                          ("sum_scaled", {"op": hvd.Sum, "prescale_factor": 2.0,
                                          "postscale_factor": 3.0}),
                          ("average_scaled", {"op": hvd.Average, "prescale_factor": 0.5})):
        x = torch.ones(2 * n, 3, requires_grad=True)
        hvd.reducescatter(x, **kwargs).sum().backward()
        got[label] = x.grad.unique().tolist()
    # the gradient of rank k's block comes from rank k
    x = torch.ones(2 * n, requires_grad=True)
    (hvd.reducescatter(x, op=hvd.Sum) * (hvd.rank() + 1)).sum().backward()
    got["blocks"] = x.grad.tolist()
    return got


def grouped_gradients():
    """grouped_allgather / grouped_reducescatter outputs are differentiable, with the
    gradients of the single ops."""
    hvd.init()
    r = hvd.rank()
    out = {}

    def single_and_grouped(fn, grouped_fn, shapes, weight):
        singles = [torch.ones(*s, requires_grad=True) for s in shapes]
        for x, w in zip(singles, weight):
            (fn(x) * w).sum().backward()
        group = [torch.ones(*s, requires_grad=True) for s in shapes]
        ys = grouped_fn(group)
        assert all(y.requires_grad for y in ys), [y.requires_grad for y in ys]
        sum((y * w).sum() for y, w in zip(ys, weight)).backward()
        return [x.grad.tolist() for x in singles], [x.grad.tolist() for x in group]

    # allgather: different row counts per rank and per tensor
    ag_shapes = [(r + 1, 2), (2 - r, 1)]
    ag_weight = [torch.arange(6.0).reshape(3, 2) * (r + 1), torch.arange(3.0).reshape(3, 1) + r]
    out["allgather"] = single_and_grouped(hvd.allgather, hvd.grouped_allgather, ag_shapes,
                                          ag_weight)
    rs_shapes = [(4, 2), (2,)]
    rs_weight = [float(r + 1), float(2 * r + 3)]
    for label, op in (("reducescatter_sum", hvd.Sum), ("reducescatter_avg", hvd.Average)):
        out[label] = single_and_grouped(
            lambda x, op=op: hvd.reducescatter(x, op=op, postscale_factor=2.0),
            lambda xs, op=op: hvd.grouped_reducescatter(xs, op=op, postscale_factor=2.0),
            rs_shapes, rs_weight)
    return out


def scalar_reducescatter():
    """reducescatter of a 0-d tensor raises ValueError (every spelling); the job goes on."""
    hvd.init()
    raised = {}
    calls = {
        "reducescatter": lambda: hvd.reducescatter(torch.tensor(1.0)),
        "reducescatter_async": lambda: hvd.synchronize(hvd.reducescatter_async(
            torch.tensor(1.0))),
        "grouped_reducescatter": lambda: hvd.grouped_reducescatter(
            [torch.ones(2), torch.tensor(1.0)]),
        "grouped_reducescatter_async": lambda: hvd.synchronize(
            hvd.grouped_reducescatter_async([torch.tensor(1.0)])),
    }
    for label, call in calls.items():
        try:
            call()
            raised[label] = None
        except ValueError as err:
            raised[label] = type(err).__name__
    # nothing half-submitted: the next collectives line up
    ok = hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [2.0, 2.0]
    ok = ok and hvd.reducescatter(torch.ones(2, 1), op=hvd.Sum).tolist() == [[2.0]]
    return raised, ok


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))


def optimizer_state_grads():
    """After broadcast_optimizer_state every parameter that requires grad has a .grad, so
    broadcasting the gradients works; the optimizer state exists on every rank."""
    hvd.init()
    res = {}
    for wrapped in (False, True):
        model = _model()
        model[2].bias.requires_grad_(False)
        opt = torch.optim.Adam(model.parameters(), lr=0.1 * (hvd.rank() + 1))
        if wrapped:
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        grads = {}
        for name, p in model.named_parameters():
            grads[name] = None if p.grad is None else hvd.broadcast(p.grad, 0,
                                                                    name=f"g.{wrapped}.{name}")
        res[wrapped] = {
            "with_grad": sorted(n for n, g in grads.items() if g is not None),
            "lr": opt.param_groups[0]["lr"],
            "state": len(opt.state_dict()["state"]),
        }
        if wrapped:      # and training goes on as usual
            opt.zero_grad()
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
    return res


def parameter_names():
    """DistributedOptimizer exposes _parameter_names: Horovod's generated names without
    named_parameters, the given names with them."""
    hvd.init()
    model = _model()
    groups = [{"params": [model[0].weight, model[0].bias]},
              {"params": [model[2].weight, model[2].bias], "lr": 0.01}]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(groups, lr=0.1))
    generated = sorted(opt._parameter_names.values())
    by_param = opt._parameter_names[model[2].weight]
    named = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
    # a step still works with the generated names
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    return generated, by_param, sorted(named._parameter_names.values())


def sparse_gradients():
    """An Embedding(sparse=True)'s gradient reaches the optimizer sparse and averaged over
    the ranks, so torch.optim.SparseAdam works: with sparse_as_dense=False (allgathered
    indices and values) and, as Horovod, with sparse_as_dense=True (reduced dense, handed
    back sparse).  Several steps, with and without named_parameters."""
    hvd.init()
    r = hvd.rank()
    out = {}
    for sparse_as_dense in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(6, 2, sparse=True))
        kwargs = {"named_parameters": model.named_parameters()} if sparse_as_dense else {}
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(model.parameters()),
                                                              lr=0.1),
                                       sparse_as_dense=sparse_as_dense, **kwargs)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        before = model[0].weight.detach().clone()
        steps = []
        for step in range(3):
            ids = torch.tensor([[1, 2], [2, 2]] if r == 0 else [[3, 2]]) + step
            opt.zero_grad()
            model(ids).sum().backward()
            opt.synchronize()
            grad = model[0].weight.grad
            steps.append((grad.is_sparse, grad.to_dense()[:, 0].tolist()))
            with opt.skip_synchronize():
                opt.step()
        moved = (model[0].weight.detach() != before).any(dim=1).tolist()
        same = hvd.allgather(model[0].weight.detach()[None])
        out[sparse_as_dense] = (steps, moved, torch.equal(same[0], same[1]))
    # Sum keeps the summed values
    emb = torch.nn.Embedding(4, 1, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters()), op=hvd.Sum)
    emb(torch.tensor([0])).sum().backward()
    opt.synchronize()
    out["sum"] = emb.weight.grad.to_dense()[:, 0].tolist()
    return out


def help_before_init():
    """help() on the API (signatures whose default is global_process_set) works before
    init(), and the process set still works after it."""
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        help(hvd.DistributedOptimizer)
        help(hvd.allreduce)
        help(hvd.broadcast_parameters)
    text = buf.getvalue()
    hvd.init()
    return ("process_set=" in text, str(hvd.global_process_set),
            hvd.allreduce(torch.ones(1), process_set=hvd.global_process_set).tolist())


def submodules():
    """The module layout of horovod.torch / horovod.common that scripts import from."""
    from fuse.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
    from fuse.common.util import get_average_backwards_compatibility_fun, split_list
    from fuse.torch import mpi_ops
    from fuse.torch.compression import Compression, Compressor, FP16Compressor, NoneCompressor
    from fuse.torch.elastic.sampler import ElasticSampler
    from fuse.torch.elastic.state import TorchState, get_handler_registry
    mpi_ops.init()
    out = mpi_ops.allreduce(torch.ones(2), op=mpi_ops.Sum).tolist()
    h = mpi_ops.allreduce_async(torch.ones(1), name="sub", op=mpi_ops.Sum)
    out2 = mpi_ops.synchronize(h).tolist()
    wire, ctx = Compression.fp16.compress(torch.ones(2))
    back = Compression.fp16.decompress(wire, ctx)
    checks = {
        "allreduce": out == [2.0, 2.0] and out2 == [2.0],
        "size": mpi_ops.size() == hvd.size() and mpi_ops.rank() == hvd.rank(),
        "compression": (wire.dtype == torch.float16 and back.dtype == torch.float32
                        and issubclass(Compression.fp16, Compressor)
                        and issubclass(NoneCompressor, Compressor)
                        and issubclass(Compression.fp16, FP16Compressor)
                        and Compression.none is NoneCompressor),
        "same_compression": Compression is hvd.Compression,
        "exceptions": (issubclass(HorovodInternalError, RuntimeError)
                       and issubclass(HostsUpdatedInterrupt, RuntimeError)
                       and HorovodInternalError is hvd.HorovodInternalError),
        "elastic": (ElasticSampler is hvd.elastic.ElasticSampler
                    and TorchState is hvd.elastic.TorchState
                    and get_handler_registry is hvd.elastic.get_handler_registry),
        "util": (split_list([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]
                 and get_average_backwards_compatibility_fun({"Average": hvd.Average,
                                                             "Sum": hvd.Sum})(None, True)
                 == hvd.Average),
    }
    return checks


def ignored_knobs():
    """One warning at init() naming the Horovod knobs fuse accepts but ignores."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger("fuse").addHandler(Keep())
    hvd.init()
    hvd.barrier()
    return [m for m in records if "HOROVOD_" in m]
