"""Start-of-training helpers: broadcast a model's parameters and an optimizer's state."""

from __future__ import annotations

import torch

from fuse.worker import lifecycle
from fuse.collectives import calls as _c
from fuse.worker.process_sets import global_process_set
from fuse.frameworks.torch import mpi_ops


def _named_tensors(params):
    if isinstance(params, dict):
        return sorted(params.items())
    if isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = list(params)
        if all(isinstance(x, tuple) and len(x) == 2 for x in items):
            return items
        return [(str(i), p) for i, p in enumerate(items)]
    raise ValueError(f"invalid params of type: {type(params)}")


def broadcast_parameters(params, root_rank, process_set=global_process_set) -> None:
    """Overwrite ``params`` (a ``state_dict()`` or ``named_parameters()``) with
    ``root_rank``'s values, in place."""
    handles = []
    for name, p in _named_tensors(params):
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"broadcast_parameters: {name!r} is a {type(p).__name__}, not a "
                             "tensor")
        target = p.data if isinstance(p, torch.nn.Parameter) else p
        if target.is_contiguous():
            h = mpi_ops.broadcast_async_(target, root_rank, name=f"broadcast_parameters.{name}",
                                         process_set=process_set)
            handles.append((h, None, None))
        else:
            h = mpi_ops.broadcast_async(target, root_rank, name=f"broadcast_parameters.{name}",
                                        process_set=process_set)
            handles.append((h, target, None))
    first_error = None
    for h, target, _ in handles:
        try:
            out = mpi_ops.synchronize(h)
            if target is not None:
                target.copy_(out)
        except Exception as err:
            first_error = first_error or err
    if first_error is not None:
        raise first_error


class _Slot:
    """A tensor's place in a state dict sent as a skeleton."""

    __slots__ = ("index", "shape", "dtype")

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, shape, dtype


def _map_leaves(obj, leaf):
    """``obj`` rebuilt with ``leaf(x)`` for every x that is not a dict, list or tuple."""
    if isinstance(obj, dict):
        return {k: _map_leaves(v, leaf) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_leaves(v, leaf) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_map_leaves(v, leaf) for v in obj)
    return leaf(obj)


def _strip(obj, tensors):
    """``obj`` with each tensor replaced by a _Slot, the tensors appended to ``tensors``."""
    def slot(x):
        if not isinstance(x, torch.Tensor):
            return x
        tensors.append(x)
        return _Slot(len(tensors) - 1, tuple(x.shape), x.dtype)
    return _map_leaves(obj, slot)


def _fill(obj, tensors):
    """The inverse of _strip: each _Slot replaced by its tensor."""
    return _map_leaves(obj, lambda x: tensors[x.index] if isinstance(x, _Slot) else x)


def broadcast_optimizer_state(optimizer, root_rank, model=None,
                              process_set=global_process_set) -> None:
    """Give every rank ``root_rank``'s optimizer state: per-parameter state tensors, scalar
    state and every param-group option (lr, betas, ...).

    Works for every ``torch.optim`` optimizer, including those that create their state lazily
    at the first step: the root's state dict travels as a skeleton (structure, scalars, and
    the shape/dtype of each tensor) and the tensors follow as in-place broadcasts, so a rank
    whose state is still empty allocates it from the root's.  ``model`` is accepted for
    compatibility.  A ``DistributedOptimizer`` with ``Compression.powersgd`` also gets the
    root's PowerSGD iteration and Q's.

    As after Horovod's (which takes a step on zero gradients to create the state), every
    parameter that requires grad has a ``.grad`` tensor afterwards: a missing one is set to
    zeros.  No step is taken, so no update (weight decay, Adam's step count) happens here.
    A sharded optimizer (``DistributedOptimizer(..., sharded=True)``) gets the root's state
    shard by shard, and its gradients are left alone."""
    from fuse.frameworks.torch.sharded_optimizer import ShardedOptimizer
    if type(optimizer) is ShardedOptimizer:
        optimizer.broadcast_state(root_rank)
        return
    _fill_missing_grads(optimizer)
    me = lifecycle.rank()
    tensors: list = []
    skeleton = _strip(optimizer.state_dict(), tensors) if me == root_rank else None
    skeleton = _c.broadcast_object(skeleton, root_rank, name="broadcast_optimizer_state.skel",
                                   process_set=process_set)
    if me != root_rank:
        slots: list = []
        _collect_slots(skeleton, slots)
        slots.sort(key=lambda s: s.index)
        tensors = [torch.empty(s.shape, dtype=s.dtype) for s in slots]
    work = [t.detach().cpu().contiguous() if me == root_rank else t for t in tensors]
    handles = [mpi_ops.broadcast_async_(t, root_rank, name=f"broadcast_optimizer_state.{k}",
                                        process_set=process_set)
               for k, t in enumerate(work)]
    for h in handles:
        mpi_ops.synchronize(h)
    if me != root_rank:
        optimizer.load_state_dict(_fill(skeleton, work))
    _broadcast_compression_state(optimizer, root_rank, process_set)


def _broadcast_compression_state(optimizer, root_rank, process_set) -> None:
    """A DistributedOptimizer's PowerSGD: the state every rank must agree on (iteration, Q's)
    from ``root_rank``; each rank keeps its own error feedback."""
    powersgd = getattr(optimizer, "__dict__", {}).get("_powersgd")
    if powersgd is None:
        return
    shared = _c.broadcast_object(powersgd.shared_state() if lifecycle.rank() == root_rank
                                 else None, root_rank, name="broadcast_optimizer_state.powersgd",
                                 process_set=process_set)
    if lifecycle.rank() != root_rank:
        powersgd.load_shared_state(shared)


def _fill_missing_grads(optimizer) -> None:
    """Zero gradients where a parameter that requires grad has none (sparse ones for
    ``SparseAdam``, which refuses dense gradients)."""
    sparse = isinstance(optimizer, torch.optim.SparseAdam)
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
                if sparse:
                    p.grad = p.grad.to_sparse()


def _collect_slots(obj, out):
    if isinstance(obj, _Slot):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _collect_slots(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect_slots(v, out)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """``obj`` from ``root_rank`` on every member (serialised with cloudpickle)."""
    return _c.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """A list with every member's ``obj``, in rank order."""
    return _c.allgather_object(obj, name=name, process_set=process_set)
