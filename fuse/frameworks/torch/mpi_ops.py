"""The collectives on torch tensors, with Horovod's signatures and autograd rules.

The work is done by :mod:`fuse.collectives.calls`; this module adds the torch intake (CPU
tensors as zero-copy views; CUDA tensors to the GPU backend through :mod:`.device`, or staged
through host memory when no GPU backend serves them), compression, and
``torch.autograd.Function``s for the out-of-place calls:

==============  =============================================================
forward         backward
==============  =============================================================
allreduce       allreduce of the gradient with the same op and scale factors
allgather       allreduce (Average) of the gradient, then this rank's rows
broadcast       allreduce (Average) of the gradient; zero on non-root ranks
alltoall        alltoall of the gradient back with the received splits
reducescatter   allgather of the gradient, times the set size for Sum and times
                prescale_factor * postscale_factor (Horovod's convention)
==============  =============================================================

The grouped allgather and reducescatter are differentiable too, with the rules of the single
ops applied to each tensor of the group.
"""

from __future__ import annotations

import torch

from fuse.worker import lifecycle
from fuse.collectives import calls as _c
from fuse.collectives.ops import Adasum, Average, Sum, resolve_op
from fuse.job.process_sets import global_process_set
from fuse.frameworks.torch import device as _dev
from fuse.frameworks.torch.tensors import Compression, TorchOps

ops = TorchOps()


# ------------------------------------------------------------------ handles and devices

class _Staged:
    """Handle of a collective on device tensors that went through host copies.  On
    synchronize the results go back to the device (into the originals for in-place calls)."""

    def __init__(self, inner, device, originals=None):
        self.inner = inner
        self.device = device
        self.originals = originals

    def finish(self, result):
        if self.originals is not None:
            for orig, host in zip(self.originals, result if isinstance(result, list)
                                  else [result]):
                orig.copy_(host)
            return self.originals if isinstance(result, list) else self.originals[0]
        return _to_device(result, self.device)


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_to_device(v, device) for v in value)
    if isinstance(value, list):
        return [_to_device(v, device) for v in value]
    return value


def _device_of(tensors):
    for t in tensors:
        if t.device.type != "cpu":
            return t.device
    return None


def _check_tensor(tensor):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    return tensor


def _intake(tensors, inplace):
    """(host tensors, device or None).  In-place calls need contiguous tensors; out-of-place
    calls take any layout (a contiguous copy is made when needed)."""
    for t in tensors:
        _check_tensor(t)
        if inplace and not t.is_contiguous():
            raise ValueError("Tensor is required to be contiguous.")
    device = _device_of(tensors)
    if device is not None:      # no GPU backend serves it (see _dev.routes): stage
        return [t.detach().to("cpu").contiguous() for t in tensors], device
    if inplace:
        return list(tensors), None
    return [t.contiguous() for t in tensors], None


def _wrap(handle, device, originals=None):
    return handle if device is None else _Staged(handle, device, originals)


def poll(handle) -> bool:
    """True once the collective behind ``handle`` has finished (never blocks)."""
    if isinstance(handle, _Staged):
        handle = handle.inner
    if _dev.is_handle(handle):
        return handle.poll()
    return _c.poll(handle)


def synchronize(handle):
    """Wait for ``handle`` and return its output (a list for grouped calls, a tuple
    ``(output, received_splits)`` for alltoall).  Errors raise ``HorovodInternalError``
    (:class:`fuse.exceptions.FuseInternalError`) subclasses."""
    if isinstance(handle, _Staged):
        return handle.finish(_c.synchronize(handle.inner))
    if _dev.is_handle(handle):
        return _dev.wait(handle)
    return _c.synchronize(handle)


# ------------------------------------------------------------------ allreduce

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Start an out-of-place allreduce; returns a handle for :func:`synchronize`."""
    op = resolve_op(op, average)
    if op != Adasum and _dev.routes([_check_tensor(tensor)]):
        return _dev.submit("allreduce", [tensor], name=name, process_set=process_set, op=op,
                           prescale=prescale_factor, postscale=postscale_factor)
    (host,), device = _intake([tensor], inplace=False)
    h = _c.allreduce_async(ops, host, name=name, op=op, prescale_factor=prescale_factor,
                           postscale_factor=postscale_factor, process_set=process_set)
    return _wrap(h, device)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Start an in-place allreduce of ``tensor``."""
    op = resolve_op(op, average)
    if op != Adasum and _dev.routes([_check_tensor(tensor)]):
        return _dev.submit("allreduce", [tensor], name=name, process_set=process_set, op=op,
                           prescale=prescale_factor, postscale=postscale_factor, inplace=True)
    (host,), device = _intake([tensor], inplace=True)
    h = _c.allreduce_async(ops, host, output=host, name=name, op=op,
                           prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                           process_set=process_set)
    return _wrap(h, device, [tensor] if device is not None else None)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale,
                                           postscale_factor=postscale,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps = ctx.args
        out = synchronize(allreduce_async(grad, op=op, prescale_factor=pre,
                                          postscale_factor=post, process_set=ps))
        return out, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A new tensor with the reduction of ``tensor`` over the process set (default op:
    Average).  Differentiable: the gradient is allreduced the same way."""
    op = resolve_op(op, average)
    wire, ctx = compression.compress(tensor)
    out = _Allreduce.apply(wire, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns ``tensor``."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Start one allreduce for a list of tensors (negotiated and fused together)."""
    op = resolve_op(op, average)
    if op != Adasum and tensors and _dev.routes([_check_tensor(t) for t in tensors]):
        return _dev.submit("allreduce", list(tensors), name=name, process_set=process_set,
                           op=op, prescale=prescale_factor, postscale=postscale_factor,
                           grouped=True)
    hosts, device = _intake(list(tensors), inplace=False)
    h = _c.grouped_allreduce_async(ops, hosts, name=name, op=op,
                                   prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, process_set=process_set)
    return _wrap(h, device)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = resolve_op(op, average)
    tensors = list(tensors)
    if op != Adasum and tensors and _dev.routes([_check_tensor(t) for t in tensors]):
        return _dev.submit("allreduce", tensors, name=name, process_set=process_set, op=op,
                           prescale=prescale_factor, postscale=postscale_factor,
                           grouped=True, inplace=True)
    hosts, device = _intake(tensors, inplace=True)
    h = _c.grouped_allreduce_async(ops, hosts, inplace=True, name=name, op=op,
                                   prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, process_set=process_set)
    return _wrap(h, device, tensors if device is not None else None)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(synchronize(grouped_allreduce_async(
            tensors, name=name, op=op, prescale_factor=prescale, postscale_factor=postscale,
            process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        out = synchronize(grouped_allreduce_async(grads, op=op, prescale_factor=pre,
                                                  postscale_factor=post, process_set=ps))
        return (None, None, None, None, None, *out)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """New tensors with the reductions of ``tensors`` (one grouped collective).
    Differentiable."""
    op = resolve_op(op, average)
    wires, ctxs = zip(*(compression.compress(t) for t in tensors)) if tensors else ((), ())
    if not wires:
        raise ValueError("grouped_allreduce needs at least one tensor")
    outs = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                   *wires)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduce a ``torch.sparse`` COO tensor by allgathering its indices and values.  Returns a
    function that waits and gives the (uncoalesced) sparse result; Average divides the values
    by the set size.  Only Average and Sum are meaningful here."""
    op = resolve_op(op, None)
    if op not in (Average, Sum):
        raise ValueError("sparse allreduce supports only Average and Sum")
    t = tensor.coalesce()
    indices = t.indices().t().contiguous()
    values = t.values().contiguous()
    hi = allgather_async(indices, name=f"{name}.indices" if name else None,
                         process_set=process_set)
    hv = allgather_async(values, name=f"{name}.values" if name else None,
                         process_set=process_set)
    size = len(process_set.ranks)

    def wait():
        idx = synchronize(hi)
        vals = synchronize(hv)
        if op == Average:
            vals = vals / size
        # checked: indices from a rank with another shape must not reach the optimizer
        return torch.sparse_coo_tensor(idx.t(), vals, t.shape, check_invariants=True)
    return wait


# ------------------------------------------------------------------ allgather

def allgather_async(tensor, name=None, process_set=global_process_set):
    if _dev.routes([_check_tensor(tensor)]):
        _check_not_scalar([tensor], "allgather")
        return _dev.submit("allgather", [tensor], name=name, process_set=process_set)
    (host,), device = _intake([tensor], inplace=False)
    return _wrap(_c.allgather_async(ops, host, name=name, process_set=process_set), device)


def _rows_of(tensor) -> int:
    return tensor.shape[0] if tensor.dim() else 0


def _allgather_backward(grads, rows, process_set):
    """Gradients of allgathered tensors: each gradient averaged over the set (one grouped
    allreduce), then the rows that came from this rank (``rows[j]`` of tensor j)."""
    grads = [g.contiguous() for g in grads]
    reduced = synchronize(grouped_allreduce_async(grads, op=Average, process_set=process_set))
    counts = synchronize(allgather_async(torch.tensor([rows], dtype=torch.int64),
                                         process_set=process_set))      # (set size, tensors)
    before = counts[:process_set.rank()].sum(0) if process_set.rank() else None
    return [r.narrow(0, int(before[j]) if before is not None else 0, rows[j])
            for j, r in enumerate(reduced)]


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = _rows_of(tensor)
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        (out,) = _allgather_backward([grad], [ctx.rows], ctx.process_set)
        return out, None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every member's tensor concatenated along dim 0 (dim 0 may differ between ranks).
    Differentiable."""
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    tensors = list(tensors)
    if tensors and _dev.routes([_check_tensor(t) for t in tensors]):
        _check_not_scalar(tensors, "allgather")
        return _dev.submit("allgather", tensors, name=name, process_set=process_set,
                           grouped=True)
    hosts, device = _intake(list(tensors), inplace=False)
    return _wrap(_c.grouped_allgather_async(ops, hosts, name=name, process_set=process_set),
                 device)


def grouped_allgather_into_async(tensors, outputs, name=None, process_set=global_process_set):
    """fuse's own (Horovod has none): :func:`grouped_allgather_async` of contiguous CPU
    tensors into ``outputs``, contiguous CPU tensors of the gathered shapes, in place of new
    ones, so that a caller holding that memory already (the sharded optimizer's gradient
    buffers) allocates none.  A tensor may be its rank's place in its output (a view of it):
    an allgather in place.  Not differentiable; ``synchronize`` returns ``outputs``."""
    tensors, outputs = list(tensors), list(outputs)
    for t in tensors + outputs:
        if _check_tensor(t).device.type != "cpu":
            raise ValueError(f"grouped_allgather_into_async takes CPU tensors, got one on "
                             f"{t.device}; use grouped_allgather_async")
    _check_not_scalar(tensors, "allgather")
    hosts, _ = _intake(tensors, inplace=True)
    return _c.grouped_allgather_async(ops, hosts, name=name, process_set=process_set,
                                      outputs=_intake(outputs, inplace=True)[0])


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [_rows_of(t) for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name=name,
                                                         process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, *_allgather_backward(grads, ctx.rows, ctx.process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """:func:`allgather` of each tensor, as one grouped collective.  Differentiable."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather needs at least one tensor")
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


# ------------------------------------------------------------------ broadcast

def _check_root(root_rank, process_set):
    if root_rank not in process_set.ranks:
        raise ValueError(f"broadcast root_rank {root_rank} is not a member of {process_set}")


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    if _dev.routes([_check_tensor(tensor)]):
        _check_root(root_rank, process_set)
        return _dev.submit("broadcast", [tensor], name=name, process_set=process_set,
                           root=root_rank)
    (host,), device = _intake([tensor], inplace=False)
    return _wrap(_c.broadcast_async(ops, host, root_rank, name=name,
                                    process_set=process_set), device)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    if _dev.routes([_check_tensor(tensor)]):
        if not tensor.is_contiguous():
            raise ValueError("Tensor is required to be contiguous.")
        _check_root(root_rank, process_set)
        return _dev.submit("broadcast", [tensor], name=name, process_set=process_set,
                           root=root_rank, inplace=True)
    (host,), device = _intake([tensor], inplace=True)
    h = _c.broadcast_async(ops, host, root_rank, output=host, name=name,
                           process_set=process_set)
    return _wrap(h, device, [tensor] if device is not None else None)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name=name,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = synchronize(allreduce_async(grad, op=Average, process_set=ctx.process_set))
        if lifecycle.rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """``root_rank``'s tensor on every member (``root_rank`` is a global rank).
    Differentiable."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ------------------------------------------------------------------ alltoall

def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64):
            raise ValueError("alltoall splits must be an int32 (or int64) tensor or a list")
        return [int(s) for s in splits.reshape(-1).tolist()]
    return [int(s) for s in splits]


def _device_splits(tensor, splits, process_set):
    """The rows sent to each member, checked as the CPU path checks them."""
    _check_not_scalar([tensor], "alltoall")
    n, rows = len(process_set.ranks), tensor.shape[0]
    if splits is None:
        if rows % n:
            raise ValueError(f"alltoall without splits needs the first dimension ({rows}) to "
                             f"be divisible by the number of ranks ({n})")
        return [rows // n] * n
    if len(splits) != n or any(s < 0 for s in splits) or sum(splits) != rows:
        raise ValueError(f"alltoall splits {splits} must have {n} non-negative entries "
                         f"summing to the first dimension ({rows})")
    return splits


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Handle whose result is ``(output, received_splits)``."""
    if _dev.routes([_check_tensor(tensor)]):
        return _dev.submit("alltoall", [tensor], name=name, process_set=process_set,
                           splits=_device_splits(tensor, _splits_list(splits), process_set))
    (host,), device = _intake([tensor], inplace=False)
    h = _c.alltoall_async(ops, host, _splits_list(splits), name=name, process_set=process_set)
    return _wrap(h, device)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        output, received = synchronize(alltoall_async(tensor, splits, name=name,
                                                      process_set=process_set))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, _grad_splits):
        back, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received.tolist(),
                                             process_set=ctx.process_set))
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Send ``splits[i]`` rows of dim 0 to member i (even split without ``splits``).  Returns
    the received rows, or ``(rows, received_splits)`` when ``splits`` is given.
    Differentiable."""
    output, received = _Alltoall.apply(tensor, _splits_list(splits), name, process_set)
    return output if splits is None else (output, received)


# ------------------------------------------------------------------ reducescatter

def _check_not_scalar(tensors, what):
    _c.check_not_scalar([_check_tensor(t).shape for t in tensors], what)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _check_not_scalar([tensor], "reducescatter")
    if _dev.routes([tensor]):
        return _dev.submit("reducescatter", [tensor], name=name, process_set=process_set,
                           op=_c.reducescatter_op(op), prescale=prescale_factor,
                           postscale=postscale_factor)
    (host,), device = _intake([tensor], inplace=False)
    h = _c.reducescatter_async(ops, host, name=name, op=op, process_set=process_set,
                               prescale_factor=prescale_factor,
                               postscale_factor=postscale_factor)
    return _wrap(h, device)


def reducescatter_scratch_async(tensor, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """fuse's own (Horovod has none): :func:`reducescatter_async` that may overwrite
    ``tensor``, a contiguous buffer the caller no longer needs (the sharded optimizer's
    gradient buffers): on CPU the engine reduces in its memory instead of copying it into
    the fusion buffer first.  The result is a new tensor all the same."""
    if _check_tensor(tensor).device.type != "cpu" or not tensor.is_contiguous():
        return reducescatter_async(tensor, name=name, op=op, process_set=process_set,
                                   prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor)
    _check_not_scalar([tensor], "reducescatter")
    return _c.reducescatter_async(ops, tensor, name=name, op=op, process_set=process_set,
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, scratch=True)


def _reducescatter_backward(grads, op, process_set, scale):
    """Horovod's gradient of reducescatter: the allgathered gradient, times the set size for
    Sum, times ``prescale_factor * postscale_factor`` (``scale``)."""
    gathered = synchronize(grouped_allgather_async([g.contiguous() for g in grads],
                                                   process_set=process_set))
    if op == Sum:
        scale = scale * len(process_set.ranks)
    return [g * scale if scale != 1.0 else g for g in gathered]


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.args = (op, process_set, prescale * postscale)
        return synchronize(reducescatter_async(tensor, name=name, op=op,
                                               process_set=process_set,
                                               prescale_factor=prescale,
                                               postscale_factor=postscale))

    @staticmethod
    def backward(ctx, grad):
        (out,) = _reducescatter_backward([grad], *ctx.args)
        return out, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce over the set, then give each member its block of dim-0 rows (the remainder to
    the first ranks).  Default op: Average.  Differentiable."""
    _check_not_scalar([tensor], "reducescatter")
    wire, ctx = compression.compress(tensor)
    out = _Reducescatter.apply(wire, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    tensors = list(tensors)
    _check_not_scalar(tensors, "grouped_reducescatter")
    if _dev.routes(tensors):
        return _dev.submit("reducescatter", tensors, name=name, process_set=process_set,
                           op=_c.reducescatter_op(op), prescale=prescale_factor,
                           postscale=postscale_factor, grouped=True)
    hosts, device = _intake(tensors, inplace=False)
    h = _c.grouped_reducescatter_async(ops, hosts, name=name, op=op, process_set=process_set,
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor)
    return _wrap(h, device)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.args = (op, process_set, prescale * postscale)
        return tuple(synchronize(grouped_reducescatter_async(
            tensors, name=name, op=op, process_set=process_set, prescale_factor=prescale,
            postscale_factor=postscale)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None, None, None, *_reducescatter_backward(grads, *ctx.args))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """:func:`reducescatter` of each tensor, as one grouped collective.  Differentiable."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_reducescatter needs at least one tensor")
    _check_not_scalar(tensors, "grouped_reducescatter")
    wires, ctxs = zip(*(compression.compress(t) for t in tensors))
    outs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                       postscale_factor, *wires)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


# ------------------------------------------------------------------ control

def barrier(process_set=global_process_set) -> None:
    """Return once every member of the set has called barrier."""
    _c.barrier(process_set)


def join(device=-1, process_set=global_process_set) -> int:
    """This rank is out of data: serve the others' allreduces with zeros until every rank has
    joined; returns the last rank to join.  ``device`` is accepted for compatibility (zeros are
    made by the engine on the host)."""
    return _c.join(process_set)
