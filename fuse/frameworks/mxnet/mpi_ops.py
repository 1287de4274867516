"""The collectives on MXNet NDArrays, with ``horovod.mxnet``'s signatures.

The work is done by :mod:`fuse.collectives.calls`; this module adds the NDArray intake: each
call waits for MXNet's asynchronous engine to finish with the NDArrays it touches (inputs ready
to read, outputs free to write), hands their own memory to fuse's engine, and returns when the
result is in place.  So, unlike Horovod's, these calls block until the collective is done; the
results are the same and an NDArray is never read or written by both engines at once.

``priority`` is accepted for compatibility: fuse's engine orders collectives by submission and
negotiation, not by MXNet engine priority.
"""

from __future__ import annotations

import numpy as np
from mxnet.base import MXNetError

from fuse.collectives import calls as _c
from fuse.collectives.ops import Average, resolve_op
from fuse.job.process_sets import global_process_set
from fuse.frameworks.mxnet.tensors import (MxnetOps, check_ndarray, ready_for_read,
                                           ready_for_write)

ops = MxnetOps()


class CollectiveArgumentError(MXNetError, ValueError):
    """A collective's arguments do not fit the process set (alltoall splits, rows that do not
    divide evenly).  Horovod's MXNet ops raise ``MXNetError`` (a ``RuntimeError``) there;
    this is one, and a ``ValueError`` as fuse raises elsewhere."""


def _checked(tensors, wait_until):
    """Check the NDArrays and wait until MXNet lets the collective at them
    (``ready_for_read`` for what it reads, ``ready_for_write`` for what it overwrites)."""
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        check_ndarray(t, f"tensor {i}" if len(tensors) > 1 else "tensor")
    for t in tensors:
        wait_until(t)
    return tensors


def _inputs(tensors):
    """The NDArrays a collective only reads."""
    return _checked(tensors, ready_for_read)


def _in_place(tensors):
    """The NDArrays a collective overwrites."""
    return _checked(tensors, ready_for_write)


# ------------------------------------------------------------------ handles (internal)
# horovod.mxnet has no poll/synchronize; the optimizers use these to keep many gradients in
# flight at once (fused by the engine) and wait for them together.

def allreduce_async_(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Start an in-place allreduce of a ready NDArray; returns a handle for :func:`wait`."""
    (t,) = _in_place([tensor])
    return _c.allreduce_async(ops, t, output=t, name=name, op=op,
                              prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, process_set=process_set)


def grouped_allreduce_async_(tensors, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    ts = _in_place(tensors)
    return _c.grouped_allreduce_async(ops, ts, inplace=True, name=name, op=op,
                                      prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor,
                                      process_set=process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Start an in-place broadcast of an NDArray; returns a handle for :func:`wait`."""
    (t,) = _in_place([tensor])
    return _c.broadcast_async(ops, t, root_rank, output=t, name=name,
                              process_set=process_set)


def wait(handle):
    """The result of a handle (raises the collective's error)."""
    return _c.synchronize(handle)


# ------------------------------------------------------------------ allreduce

def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, op=None):
    """A new NDArray with the reduction of ``tensor`` over the process set (default op:
    Average)."""
    op = resolve_op(op, average)
    (t,) = _inputs([tensor])
    return wait(_c.allreduce_async(ops, t, name=name, op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, process_set=process_set))


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place allreduce; returns ``tensor``."""
    op = resolve_op(op, average)
    wait(allreduce_async_(tensor, name=name, op=op, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=process_set))
    return tensor


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """New NDArrays with the reductions of ``tensors`` (one grouped collective)."""
    op = resolve_op(op, average)
    ts = _inputs(tensors)
    return wait(_c.grouped_allreduce_async(ops, ts, name=name, op=op,
                                           prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor,
                                           process_set=process_set))


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place grouped allreduce; returns ``tensors`` (as a list)."""
    op = resolve_op(op, average)
    return wait(grouped_allreduce_async_(tensors, name=name, op=op,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         process_set=process_set))


# ------------------------------------------------------------------ allgather

def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Every member's NDArray concatenated along axis 0 (axis 0 may differ between ranks)."""
    (t,) = _inputs([tensor])
    return wait(_c.allgather_async(ops, t, name=name, process_set=process_set))


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    ts = _inputs(tensors)
    return wait(_c.grouped_allgather_async(ops, ts, name=name, process_set=process_set))


# ------------------------------------------------------------------ broadcast

def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """A new NDArray with ``root_rank``'s values (``root_rank`` is a global rank)."""
    (t,) = _inputs([tensor])
    return wait(_c.broadcast_async(ops, t, root_rank, name=name, process_set=process_set))


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    wait(broadcast_async_(tensor, root_rank, name=name, process_set=process_set))
    return tensor


# ------------------------------------------------------------------ alltoall

def _splits_list(splits):
    if splits is None:
        return None
    if hasattr(splits, "asnumpy"):
        splits = splits.asnumpy()
    arr = np.asarray(splits)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"alltoall splits must be integers, got {arr.dtype}")
    return [int(s) for s in arr.reshape(-1)]


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Send ``splits[i]`` rows of axis 0 to member i (an even split without ``splits``).
    Returns the received rows, or ``(rows, received_splits)`` when ``splits`` is given."""
    (t,) = _inputs([tensor])
    try:
        handle = _c.alltoall_async(ops, t, _splits_list(splits), name=name,
                                   process_set=process_set)
    except ValueError as err:       # checked here, before anything is submitted
        raise CollectiveArgumentError(str(err)) from err
    out, received = wait(handle)
    return out if splits is None else (out, received)


# ------------------------------------------------------------------ reducescatter

def _not_scalar(tensors, what):
    _c.check_not_scalar([t.shape for t in tensors], what)
    return tensors


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce over the set, then give each member its block of axis-0 rows (the remainder to
    the first ranks).  Default op: Average."""
    (t,) = _not_scalar(_inputs([tensor]), "reducescatter")
    return wait(_c.reducescatter_async(ops, t, name=name, op=op, process_set=process_set,
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor))


def grouped_reducescatter(tensors, op=Average, name=None, priority=0,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    ts = _not_scalar(_inputs(tensors), "grouped_reducescatter")
    return wait(_c.grouped_reducescatter_async(ops, ts, name=name, op=op,
                                               process_set=process_set,
                                               prescale_factor=prescale_factor,
                                               postscale_factor=postscale_factor))
