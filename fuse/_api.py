"""The collectives on NumPy arrays: ``fuse.allreduce(np_array)`` and friends.

Out-of-place calls return new arrays; the ``_`` variants work in place; ``*_async`` variants
return a handle for :func:`poll` and :func:`synchronize`.  Signatures follow Horovod's.
"""

from __future__ import annotations

import numpy as np

from fuse.collectives import calls as _c
from fuse.collectives.calls import (NumpyOps, allgather_object, barrier,  # noqa: F401
                                     broadcast_object, join, poll, synchronize)
from fuse.collectives.ops import Average
from fuse.job.process_sets import global_process_set

ops = NumpyOps()


def _arr(x) -> np.ndarray:
    a = np.asarray(x)       # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _inplace(x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"in-place collectives need a numpy array, got {type(x).__name__}")
    return x


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    return _c.allreduce_async(ops, _arr(tensor), name=name, op=op, average=average,
                              prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, process_set=process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    t = _inplace(tensor)
    return _c.allreduce_async(ops, t, output=t, name=name, op=op, average=average,
                              prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, process_set=process_set)


allreduce = _c.blocking(allreduce_async, synchronize, """A new array holding the reduction of
``tensor`` over the process set (op defaults to Average).""")
allreduce_ = _c.blocking(allreduce_async_, synchronize, "In-place allreduce; returns ``tensor``.")


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _c.grouped_allreduce_async(ops, [_arr(t) for t in tensors], name=name, op=op,
                                      average=average, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor,
                                      process_set=process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _c.grouped_allreduce_async(ops, [_inplace(t) for t in tensors], inplace=True,
                                      name=name, op=op, average=average,
                                      prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor,
                                      process_set=process_set)


grouped_allreduce = _c.blocking(grouped_allreduce_async, synchronize)
grouped_allreduce_ = _c.blocking(grouped_allreduce_async_, synchronize)


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _c.allgather_async(ops, _arr(tensor), name=name, process_set=process_set)


allgather = _c.blocking(allgather_async, synchronize, """Every member's array concatenated
along dimension 0 (which may differ per rank).""")


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _c.grouped_allgather_async(ops, [_arr(t) for t in tensors], name=name,
                                      process_set=process_set)


grouped_allgather = _c.blocking(grouped_allgather_async, synchronize)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _c.broadcast_async(ops, _arr(tensor), root_rank, name=name, process_set=process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    t = _inplace(tensor)
    return _c.broadcast_async(ops, t, root_rank, output=t, name=name, process_set=process_set)


broadcast = _c.blocking(broadcast_async, synchronize, """``root_rank``'s array on every member
(``root_rank`` is a global rank).""")
broadcast_ = _c.blocking(broadcast_async_, synchronize)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    return _c.alltoall_async(ops, _arr(tensor), splits, name=name, process_set=process_set)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Send ``splits[i]`` rows to member i; returns the received rows, and with ``splits``
    also the number of rows received from each member."""
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    return _c.reducescatter_async(ops, _arr(tensor), name=name, op=op,
                                  process_set=process_set, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor)


reducescatter = _c.blocking(reducescatter_async, synchronize, """Reduce, then give each member
its block of rows (the remainder to the first ranks).""")


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    return _c.grouped_reducescatter_async(ops, [_arr(t) for t in tensors], name=name, op=op,
                                          process_set=process_set,
                                          prescale_factor=prescale_factor,
                                          postscale_factor=postscale_factor)


grouped_reducescatter = _c.blocking(grouped_reducescatter_async, synchronize)
