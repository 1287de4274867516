"""The collectives, written once for every framework.

A framework plugs in an :class:`ArrayOps` (how to see a tensor's memory without copying and
how to make new tensors; :class:`NumpyOps` is NumPy's); everything else (naming, op rules, validation, handles, grouped
calls, object collectives) lives here.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Sequence

import cloudpickle
import numpy as np

from fuse import _core
from fuse._request import RequestSpec
from fuse.common import basics
from fuse.common.ops import Average, Sum, resolve_op
from fuse.common.process_sets import global_process_set


class ArrayOps:
    """What a framework adapter tells the collective layer about its tensors."""

    name = "abstract"

    def describe(self, tensor) -> tuple[Any, int, tuple[int, ...]]:
        """``(buffer, dtype_code, shape)``: ``buffer`` exports the tensor's own memory through
        the buffer protocol (no copy).  Raises ValueError for a non-contiguous tensor or an
        unsupported dtype."""
        raise NotImplementedError

    def empty_like(self, tensor):
        raise NotImplementedError

    def allocator(self, like) -> Callable[[tuple], tuple[Any, Any]]:
        """A function ``shape -> (new tensor, its buffer)`` with ``like``'s dtype and device."""
        raise NotImplementedError

    def from_numpy(self, array: np.ndarray, like=None):
        """A framework tensor holding ``array`` (used for splits and object collectives)."""
        raise NotImplementedError


# dtype -> engine code, filled as dtypes are seen (np.dtype(...).name costs microseconds,
# which a 4-byte allreduce notices)
_codes: dict = {}


def dtype_code(dtype: np.dtype) -> int:
    """The engine's code for a NumPy dtype; ValueError for one it cannot reduce."""
    code = _codes.get(dtype)
    if code is None:
        code = _core.DTYPE_CODES.get(np.dtype(dtype).name)
        if code is None:
            raise ValueError(f"dtype {np.dtype(dtype)} is not supported; use one of "
                             f"{', '.join(sorted(_core.DTYPE_CODES))}")
        _codes[dtype] = code
    return code


class NumpyOps(ArrayOps):
    """NumPy arrays, which are their own buffers: fuse's own API (fuse.allreduce, ...) and the
    object collectives below use them; framework adapters that stage through NumPy extend it."""

    name = "numpy"

    def describe(self, tensor):
        if not isinstance(tensor, np.ndarray):
            raise TypeError(f"expected a numpy array, got {type(tensor).__name__}")
        if not tensor.flags.c_contiguous:
            raise ValueError("array is required to be C-contiguous "
                             "(use np.ascontiguousarray)")
        return tensor, dtype_code(tensor.dtype), tensor.shape

    def empty_like(self, tensor):
        return np.empty_like(tensor)

    def allocator(self, like):
        dtype = like.dtype

        def allocate(shape):
            out = np.empty(shape, dtype=dtype)
            return out, out
        return allocate

    def from_numpy(self, array, like=None):
        return array


# handle -> function(value, aux, record) that builds what synchronize() returns
_finishers: dict[int, Callable] = {}
_name_lock = threading.Lock()
_name_counters: dict[tuple[str, int], itertools.count] = {}


def _auto_name(kind: str, pset: int) -> str:
    # Counted per (kind, process set): every member makes the same calls in the same order,
    # so every member derives the same name, even when other sets see other traffic.
    with _name_lock:
        counter = _name_counters.setdefault((kind, pset), itertools.count())
        return f"{kind}.noname.{pset}.{next(counter)}"


def reset_auto_names() -> None:
    """Start the automatic names over: a re-formed elastic job is a new job, whose workers
    that just joined count from zero."""
    with _name_lock:
        _name_counters.clear()


def _pset(process_set) -> int:
    return basics.process_set_id(process_set)


def _check_scale(op: int, prescale: float, postscale: float) -> None:
    if op in (_core.MIN, _core.MAX, _core.PRODUCT) and (prescale != 1.0 or postscale != 1.0):
        raise ValueError("prescale_factor/postscale_factor only apply to Sum and Average")


def _enqueue(specs: list[RequestSpec], finisher: Callable) -> list[int]:
    """Queue ``specs``; ``finisher(value, aux, spec)`` makes each one's result."""
    engine = basics.engine()
    handles = engine.enqueue(specs)
    for h in handles:
        _finishers[h] = finisher
    return handles


def poll(handle: int) -> bool:
    """True once the collective behind ``handle`` has finished."""
    if isinstance(handle, _Group):
        return all(basics.engine().poll(h) for h in handle.handles)
    return basics.engine().poll(handle)


def synchronize(handle):
    """Wait for ``handle`` and return its output (a tuple for grouped and alltoall calls)."""
    if isinstance(handle, _Group):
        return handle.finish()
    finisher = _finishers.pop(handle, None)
    if finisher is None:
        return None
    value, aux, record = basics.engine().wait(handle)
    return finisher(value, aux, record)


class _Group:
    """The handle of a grouped call: one handle for many tensors."""

    def __init__(self, handles: list[int], build: Callable[[list], Any]):
        self.handles = handles
        self.build = build

    def finish(self):
        results, first_error = [], None
        for h in self.handles:
            try:
                results.append(synchronize(h))
            except Exception as err:  # wait for every member before raising
                first_error = first_error or err
        if first_error is not None:
            raise first_error
        return self.build(results)


# ---------------------------------------------------------------- allreduce

def _allreduce_spec(ops: ArrayOps, tensor, output, name, op, prescale, postscale, pset,
                    group_key=None):
    buf, dtype, shape = ops.describe(tensor)
    out_buf = buf if output is tensor else ops.describe(output)[0]
    return RequestSpec(_core.ALLREDUCE, name, dtype, shape, pset, input=buf,
                       output=out_buf, op=op, prescale=prescale, postscale=postscale,
                       group_key=group_key)


def allreduce_async(ops: ArrayOps, tensor, *, output=None, name=None, op=None, average=None,
                    prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Start an allreduce; ``output`` defaults to a new tensor (pass ``tensor`` for in place)."""
    op = resolve_op(op, average)
    _check_scale(op, prescale_factor, postscale_factor)
    pset = _pset(process_set)
    name = name or _auto_name("allreduce", pset)
    out = ops.empty_like(tensor) if output is None else output
    spec = _allreduce_spec(ops, tensor, out, name, op, prescale_factor, postscale_factor, pset)
    return _enqueue([spec], lambda v, a, r: out)[0]


def grouped_allreduce_async(ops: ArrayOps, tensors: Sequence, *, inplace=False, name=None,
                            op=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    op = resolve_op(op, average)
    _check_scale(op, prescale_factor, postscale_factor)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    pset = _pset(process_set)
    base = name or _auto_name("grouped_allreduce", pset)
    outs = list(tensors) if inplace else [ops.empty_like(t) for t in tensors]
    specs = [_allreduce_spec(ops, t, o, f"{base}.{i}", op, prescale_factor, postscale_factor,
                             pset, group_key=base)
             for i, (t, o) in enumerate(zip(tensors, outs))]
    handles = _enqueue(specs, lambda v, a, r: None)
    return _Group(handles, lambda _results: list(outs))


# ---------------------------------------------------------------- allgather / reducescatter

def _new_output(ops, tensor):
    return ops.allocator(tensor)


def allgather_async(ops: ArrayOps, tensor, *, name=None, process_set=global_process_set):
    buf, dtype, shape = ops.describe(tensor)
    if len(shape) == 0:
        raise ValueError("allgather needs a tensor with at least one dimension, got a scalar")
    pset = _pset(process_set)
    name = name or _auto_name("allgather", pset)
    spec = RequestSpec(_core.ALLGATHER, name, dtype, shape, pset, input=buf,
                       allocator=_new_output(ops, tensor))
    return _enqueue([spec], lambda v, a, r: r.result)[0]


def grouped_allgather_async(ops: ArrayOps, tensors: Sequence, *, name=None,
                            process_set=global_process_set):
    pset = _pset(process_set)
    base = name or _auto_name("grouped_allgather", pset)
    specs = []
    for i, t in enumerate(tensors):
        buf, dtype, shape = ops.describe(t)
        if len(shape) == 0:
            raise ValueError("allgather needs tensors with at least one dimension")
        specs.append(RequestSpec(_core.ALLGATHER, f"{base}.{i}", dtype, shape, pset,
                                 input=buf, allocator=_new_output(ops, t), group_key=base))
    handles = _enqueue(specs, lambda v, a, r: r.result)
    return _Group(handles, list)


def reducescatter_async(ops: ArrayOps, tensor, *, name=None, op=Average,
                        process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    op = resolve_op(op, None)
    if op not in (Average, Sum):
        raise ValueError("reducescatter supports only Average and Sum")
    buf, dtype, shape = ops.describe(tensor)
    pset = _pset(process_set)
    name = name or _auto_name("reducescatter", pset)
    spec = RequestSpec(_core.REDUCESCATTER, name, dtype, shape, pset, input=buf, op=op,
                       prescale=prescale_factor, postscale=postscale_factor,
                       allocator=_new_output(ops, tensor))
    return _enqueue([spec], lambda v, a, r: r.result)[0]


def grouped_reducescatter_async(ops: ArrayOps, tensors: Sequence, *, name=None, op=Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    op = resolve_op(op, None)
    if op not in (Average, Sum):
        raise ValueError("reducescatter supports only Average and Sum")
    pset = _pset(process_set)
    base = name or _auto_name("grouped_reducescatter", pset)
    specs = []
    for i, t in enumerate(tensors):
        buf, dtype, shape = ops.describe(t)
        specs.append(RequestSpec(_core.REDUCESCATTER, f"{base}.{i}", dtype, shape, pset,
                                 input=buf, op=op, prescale=prescale_factor,
                                 postscale=postscale_factor, allocator=_new_output(ops, t),
                                 group_key=base))
    handles = _enqueue(specs, lambda v, a, r: r.result)
    return _Group(handles, list)


# ---------------------------------------------------------------- broadcast / alltoall

def broadcast_async(ops: ArrayOps, tensor, root_rank: int, *, output=None, name=None,
                    process_set=global_process_set):
    """``root_rank`` is a global rank, as in Horovod, even inside a process set."""
    buf, dtype, shape = ops.describe(tensor)
    pset = _pset(process_set)
    members = process_set.ranks if process_set is not None else global_process_set.ranks
    if root_rank not in members:
        raise ValueError(f"broadcast root_rank {root_rank} is not a member of {process_set}")
    name = name or _auto_name("broadcast", pset)
    out = ops.empty_like(tensor) if output is None else output
    out_buf = buf if out is tensor else ops.describe(out)[0]
    spec = RequestSpec(_core.BROADCAST, name, dtype, shape, pset, input=buf,
                       output=out_buf, root=int(root_rank))
    return _enqueue([spec], lambda v, a, r: out)[0]


def alltoall_async(ops: ArrayOps, tensor, splits=None, *, name=None,
                   process_set=global_process_set):
    """Handle whose result is ``(output, received_splits)``."""
    buf, dtype, shape = ops.describe(tensor)
    if len(shape) == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension, got a scalar")
    pset = _pset(process_set)
    nranks = len(process_set.ranks)
    split_list = None
    if splits is not None:
        split_list = [int(s) for s in np.asarray(splits).reshape(-1)]
        if len(split_list) != nranks:
            raise ValueError(f"alltoall splits has {len(split_list)} entries; the process set "
                             f"has {nranks} ranks")
        if any(s < 0 for s in split_list) or sum(split_list) != shape[0]:
            raise ValueError(f"alltoall splits {split_list} must be non-negative and sum to "
                             f"the first dimension ({shape[0]})")
    elif shape[0] % nranks:
        raise ValueError(f"alltoall without splits needs the first dimension ({shape[0]}) to "
                         f"be divisible by the number of ranks ({nranks})")
    name = name or _auto_name("alltoall", pset)
    spec = RequestSpec(_core.ALLTOALL, name, dtype, shape, pset, input=buf,
                       splits=split_list, allocator=_new_output(ops, tensor))
    return _enqueue([spec],
                    lambda v, a, r: (r.result, ops.from_numpy(np.asarray(a, np.int32))))[0]


# ---------------------------------------------------------------- control

_NO_DATA = _core.DTYPE_CODES["uint8"]   # the dtype of collectives that carry no tensor

def barrier(process_set=global_process_set) -> None:
    """Return once every member of the set has called barrier."""
    pset = _pset(process_set)
    spec = RequestSpec(_core.BARRIER, "barrier", _NO_DATA, (0,), pset)
    synchronize(_enqueue([spec], lambda v, a, r: None)[0])


def join(process_set=global_process_set) -> int:
    """This rank is out of data: keep serving the others' allreduces (with zeros) until every
    rank has joined.  Returns the last rank to join."""
    pset = _pset(process_set)
    spec = RequestSpec(_core.JOIN, "join", _NO_DATA, (0,), pset)
    return int(synchronize(_enqueue([spec], lambda v, a, r: v)[0]))


def submit_control(kind: str, ranks: Sequence[int]) -> int:
    """``add_process_set`` with the new set's ``ranks`` (returns its id), or
    ``remove_process_set`` with ``ranks=[id]``."""
    name = f"process_set.{kind}"
    if kind == "add_process_set":
        spec = RequestSpec(_core.PSET_ADD, name, _NO_DATA, (0,), 0, ranks=list(ranks))
    elif kind == "remove_process_set":
        (removed,) = ranks
        spec = RequestSpec(_core.PSET_REMOVE, name, _NO_DATA, (0,), 0, removed_set=removed)
    else:
        raise KeyError(kind)
    return int(synchronize(_enqueue([spec], lambda v, a, r: v)[0]))


# ---------------------------------------------------------------- Python objects

_numpy_ops = NumpyOps()


def broadcast_object(obj=None, root_rank: int = 0, name=None, process_set=global_process_set):
    """``obj`` from ``root_rank`` on every member (serialised with cloudpickle)."""
    ops = _numpy_ops
    name = name or _auto_name("broadcast_object", _pset(process_set))
    me = basics.rank()
    payload = np.frombuffer(cloudpickle.dumps(obj), np.uint8) if me == root_rank else None
    length = np.array([len(payload) if payload is not None else 0], np.int64)
    length = synchronize(broadcast_async(ops, length, root_rank, name=name + ".size",
                                         process_set=process_set))
    data = payload.copy() if payload is not None else np.empty(int(length[0]), np.uint8)
    data = synchronize(broadcast_async(ops, data, root_rank, name=name + ".data",
                                       process_set=process_set))
    return obj if me == root_rank else cloudpickle.loads(data.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set) -> list:
    """A list with every member's ``obj``, in rank order."""
    ops = _numpy_ops
    name = name or _auto_name("allgather_object", _pset(process_set))
    data = np.frombuffer(cloudpickle.dumps(obj), np.uint8).copy()
    sizes = synchronize(allgather_async(ops, np.array([len(data)], np.int64),
                                        name=name + ".sizes", process_set=process_set))
    gathered = synchronize(allgather_async(ops, data, name=name + ".data",
                                           process_set=process_set))
    out, offset = [], 0
    for n in sizes:
        out.append(cloudpickle.loads(gathered[offset:offset + int(n)].tobytes()))
        offset += int(n)
    return out
