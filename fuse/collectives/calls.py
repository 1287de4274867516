"""The collectives, written once for every framework.

A framework plugs in an :class:`~fuse.collectives.array_ops.ArrayOps` (how to see a tensor's memory
without copying and how to make new tensors; ``NumpyOps`` is NumPy's); everything else (naming,
op rules, validation, handles, grouped calls, object collectives) lives here.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Sequence

import cloudpickle
import numpy as np

from fuse.engine.protocol import (ALLGATHER, ALLREDUCE, ALLTOALL, BARRIER, BROADCAST, DTYPE_CODES,
                                  DTYPE_NAMES, JOIN, PSET_ADD, PSET_REMOVE, REDUCESCATTER)
from fuse.engine.request import RequestSpec
from fuse.collectives import adasum
from fuse.job import state
from fuse.collectives.array_ops import ArrayOps, NumpyOps, dtype_code  # noqa: F401 (re-exported)
from fuse.exceptions import UnsupportedOpError
from fuse.collectives.ops import Adasum, Average, Max, Min, Product, Sum, resolve_op
from fuse.job.process_sets import global_process_set, process_set_id


# handle -> function(value, aux, record) that builds what synchronize() returns
_finishers: dict[int, Callable] = {}
_name_lock = threading.Lock()
_name_counters: dict[tuple[str, int], int] = {}


def auto_name(kind: str, pset: int) -> str:
    # Counted per (kind, process set): every member makes the same calls in the same order,
    # so every member derives the same name, even when other sets see other traffic.
    with _name_lock:
        n = _name_counters.get((kind, pset), 0)
        _name_counters[(kind, pset)] = n + 1
        return f"{kind}.noname.{pset}.{n}"



def _return_name(kind: str, pset: int, name: str) -> None:
    # Undo auto_name for a call that was never queued (unless another thread drew since).
    with _name_lock:
        n = _name_counters.get((kind, pset), 0)
        if name == f"{kind}.noname.{pset}.{n - 1}":
            _name_counters[(kind, pset)] = n - 1


def _enqueue_named(name, kind: str, pset: int, make_specs: Callable[[str], list],
                   finisher: Callable) -> list[int]:
    """Queue ``make_specs(name)``, drawing an automatic name when ``name`` is None.

    The name is drawn after the caller's own checks and given back if queueing fails, so a
    call that fails on one rank only (bad splits, a closed engine) and is caught there does not
    shift the automatic names of every later call on that rank."""
    drawn = name is None
    if drawn:
        name = auto_name(kind, pset)
    try:
        return _enqueue(make_specs(name), finisher)
    except BaseException:
        if drawn:
            _return_name(kind, pset, name)
        raise


def reset_auto_names() -> None:
    """Start the automatic names over: a re-formed elastic job is a new job, whose workers
    that just joined count from zero."""
    with _name_lock:
        _name_counters.clear()


def _pset(process_set) -> int:
    return process_set_id(process_set)


def check_scale(op: int, prescale: float, postscale: float) -> None:
    if op in (Min, Max, Product) and (prescale != 1.0 or postscale != 1.0):
        raise ValueError("prescale_factor/postscale_factor only apply to Sum and Average")


def _enqueue(specs: list[RequestSpec], finisher: Callable) -> list[int]:
    """Queue ``specs``; ``finisher(value, aux, spec)`` makes each one's result."""
    engine = state.engine()
    handles = engine.enqueue(specs)
    for h in handles:
        _finishers[h] = finisher
    return handles


def poll(handle: int) -> bool:
    """True once the collective behind ``handle`` has finished."""
    if isinstance(handle, _Group):
        return all(state.engine().poll(h) for h in handle.handles)
    return state.engine().poll(handle)


def synchronize(handle):
    """Wait for ``handle`` and return its output (a tuple for grouped and alltoall calls)."""
    if isinstance(handle, _Group):
        return handle.finish()
    finisher = _finishers.pop(handle, None)
    if finisher is None:
        return None
    value, aux, record = state.engine().wait(handle)
    return finisher(value, aux, record)


def blocking(async_fn: Callable, synchronize_fn: Callable = synchronize,
             doc: str | None = None) -> Callable:
    """The blocking form of ``async_fn`` (``allreduce`` from ``allreduce_async``): the same
    parameters (``inspect.signature`` shows them), the handle synchronized with
    ``synchronize_fn``.  Horovod pairs every ``*_async`` call with one of these."""
    name = async_fn.__name__.replace("_async", "")

    @functools.wraps(async_fn)
    def call(*args, **kwargs):
        return synchronize_fn(async_fn(*args, **kwargs))
    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc if doc is not None else f"``{async_fn.__name__}``, waited for."
    return call


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

def _allreduce_buffers(ops: ArrayOps, tensor, output):
    """``(input buffer, dtype code, shape, output buffer)``; raises for a bad tensor."""
    buf, dtype, shape = ops.describe(tensor)
    return buf, dtype, shape, (buf if output is tensor else ops.describe(output)[0])


def _allreduce_spec(buffers, name, op, prescale, postscale, pset, group_key=None):
    buf, dtype, shape, out_buf = buffers
    return RequestSpec(ALLREDUCE, name, dtype, shape, pset, input=buf,
                       output=out_buf, op=op, prescale=prescale, postscale=postscale,
                       group_key=group_key)


def allreduce_async(ops: ArrayOps, tensor, *, output=None, name=None, op=None, average=None,
                    prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Start an allreduce; ``output`` defaults to a new tensor (pass ``tensor`` for in place)."""
    op = resolve_op(op, average)
    check_scale(op, prescale_factor, postscale_factor)
    pset = _pset(process_set)
    out = ops.empty_like(tensor) if output is None else output
    if op == Adasum:
        return _adasum_group(ops, [tensor], [out], name, "allreduce", prescale_factor,
                             postscale_factor, process_set, lambda outs: outs[0])
    buffers = _allreduce_buffers(ops, tensor, out)
    return _enqueue_named(name, "allreduce", pset, lambda n: [_allreduce_spec(
        buffers, n, op, prescale_factor, postscale_factor, pset)], lambda v, a, r: out)[0]


def allreduce_each_async_(ops: ArrayOps, tensors: Sequence, names: Sequence[str], *, op,
                          prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set) -> list[int]:
    """In-place allreduces of ``tensors``, each its own collective under its own name (one
    handle each, as ``allreduce_async`` in place), queued in one call so the engine thread
    wakes once for all of them.  Unlike a grouped allreduce nothing ties them together: the
    coordinator still matches each name across ranks on its own, so ranks that batch their
    tensors differently still meet."""
    op = resolve_op(op, None)
    check_scale(op, prescale_factor, postscale_factor)
    if op == Adasum:
        raise UnsupportedOpError("allreduce_each_async_ does not take Adasum")
    pset = _pset(process_set)
    specs = [_allreduce_spec(_allreduce_buffers(ops, t, t), n, op, prescale_factor,
                             postscale_factor, pset) for t, n in zip(tensors, names)]
    handles = state.engine().enqueue(specs)
    for h, t in zip(handles, tensors):
        _finishers[h] = lambda v, a, r, t=t: t
    return handles


def grouped_allreduce_async(ops: ArrayOps, tensors: Sequence, *, inplace=False, name=None,
                            op=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    op = resolve_op(op, average)
    check_scale(op, prescale_factor, postscale_factor)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    pset = _pset(process_set)
    outs = list(tensors) if inplace else [ops.empty_like(t) for t in tensors]
    if op == Adasum:
        return _adasum_group(ops, tensors, outs, name, "grouped_allreduce", prescale_factor,
                             postscale_factor, process_set, list)
    buffers = [_allreduce_buffers(ops, t, o) for t, o in zip(tensors, outs)]

    def specs(base):
        return [_allreduce_spec(b, f"{base}.{i}", op, prescale_factor, postscale_factor, pset,
                                group_key=base)
                for i, b in enumerate(buffers)]
    handles = _enqueue_named(name, "grouped_allreduce", pset, specs, lambda v, a, r: None)
    return _Group(handles, lambda _results: list(outs))


def _numpy_view(buf, code: int) -> np.ndarray:
    """A flat numpy view of a buffer the adapter described (writable if the buffer is)."""
    name = DTYPE_NAMES[code]
    if name == "bfloat16":
        import ml_dtypes
        dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        dtype = np.dtype(name)
    return np.asarray(memoryview(buf).cast("B")).view(dtype)


def _adasum_group(ops: ArrayOps, tensors, outs, name, kind: str, prescale: float,
                  postscale: float, process_set, build) -> "_Group":
    """Adasum of each tensor into its output (see :mod:`fuse.collectives.adasum`); the collectives
    run now, so the returned handle is already complete."""
    described = [ops.describe(t) for t in tensors]
    for t, (_, code, _) in zip(tensors, described):
        if DTYPE_NAMES[code] not in adasum.FLOAT_DTYPES:
            raise ValueError(f"Adasum needs floating-point tensors, got "
                             f"{DTYPE_NAMES[code]}")
    adasum.check_set_size(len(process_set.ranks))
    out_bufs = [b if o is t else ops.describe(o)[0]
                for (b, _, _), t, o in zip(described, tensors, outs)]
    base = name or auto_name(kind, _pset(process_set))
    for i, ((buf, code, _), out_buf) in enumerate(zip(described, out_bufs)):
        vector = _numpy_view(buf, code).astype(np.float64)
        if prescale != 1.0:
            vector *= prescale
        label = base if len(tensors) == 1 and kind == "allreduce" else f"{base}.{i}"
        result = adasum.allreduce(vector, label, _AdasumExchange(process_set), process_set)
        if postscale != 1.0:
            result *= postscale
        target = _numpy_view(out_buf, code)
        target[:] = result.astype(target.dtype)
    return _Group([], lambda _results: build(list(outs)))


class _AdasumExchange:
    """The blocking NumPy collectives over one process set that Adasum's steps run."""

    def __init__(self, process_set):
        self.ops, self.process_set = _numpy_ops, process_set

    def alltoall(self, array, splits, name):
        received, _ = synchronize(alltoall_async(self.ops, array, splits, name=name,
                                                 process_set=self.process_set))
        return received

    def allreduce_sum(self, array, name):
        return synchronize(allreduce_async(self.ops, array, name=name, op=Sum,
                                           process_set=self.process_set))

    def allgather(self, array, name):
        return synchronize(allgather_async(self.ops, array, name=name,
                                           process_set=self.process_set))


# ---------------------------------------------------------------- allgather / reducescatter

def _new_output(ops, tensor):
    return ops.allocator(tensor)


def allgather_async(ops: ArrayOps, tensor, *, name=None, process_set=global_process_set):
    buf, dtype, shape = ops.describe(tensor)
    if len(shape) == 0:
        raise ValueError("allgather needs a tensor with at least one dimension, got a scalar")
    pset = _pset(process_set)
    return _enqueue_named(name, "allgather", pset, lambda n: [RequestSpec(
        ALLGATHER, n, dtype, shape, pset, input=buf,
        allocator=_new_output(ops, tensor))], lambda v, a, r: r.result)[0]


def _given_output(ops, output, what: str):
    """An allocator that hands out ``output`` (contiguous), refusing another shape."""
    buf, _, have = ops.describe(output)

    def allocate(shape):
        if tuple(shape) != tuple(have):
            raise ValueError(f"{what}: the members' parts make shape {tuple(shape)}, the "
                             f"output given has shape {tuple(have)}")
        return output, buf
    return allocate


def grouped_allgather_async(ops: ArrayOps, tensors: Sequence, *, name=None,
                            process_set=global_process_set, outputs: Sequence | None = None):
    """``outputs`` (fuse's own, not Horovod's): a contiguous tensor per tensor to gather into,
    of the gathered shape, in place of new ones; a tensor may be its rank's place in its
    output (rows this rank's parts, the members' parts back to back in rank order), then it
    is not copied."""
    pset = _pset(process_set)
    described = []
    for t in tensors:
        buf, dtype, shape = ops.describe(t)
        if len(shape) == 0:
            raise ValueError("allgather needs tensors with at least one dimension")
        described.append((t, buf, dtype, shape))
    if outputs is not None and len(outputs) != len(described):
        raise ValueError(f"grouped allgather of {len(described)} tensors given "
                         f"{len(outputs)} outputs")

    def allocator(i, t):
        if outputs is None:
            return _new_output(ops, t)
        return _given_output(ops, outputs[i], f"allgather of tensor {i} of {len(described)}"
                             f"{f' ({name})' if name else ''}")

    def specs(base):
        return [RequestSpec(ALLGATHER, f"{base}.{i}", dtype, shape, pset, input=buf,
                            allocator=allocator(i, t), group_key=base)
                for i, (t, buf, dtype, shape) in enumerate(described)]
    handles = _enqueue_named(name, "grouped_allgather", pset, specs, lambda v, a, r: r.result)
    return _Group(handles, list)


def reducescatter_op(op):
    """``op`` resolved; an :class:`UnsupportedOpError` unless it is Average or Sum."""
    op = resolve_op(op, None)
    if op not in (Average, Sum):
        raise UnsupportedOpError(f"reducescatter supports only Average and Sum, got op {op}")
    return op


def check_not_scalar(shapes: Sequence, what: str) -> None:
    """A ``ValueError`` naming ``what`` when a shape has no dimension: allgather,
    reducescatter and alltoall split or join along dimension 0 (as Horovod refuses them)."""
    for i, shape in enumerate(shapes):
        if shape is not None and len(shape) == 0:
            which = f" (tensor {i} of {len(shapes)})" if len(shapes) > 1 else ""
            raise ValueError(f"{what} needs tensors of at least one dimension (it splits and "
                             f"joins along dimension 0); got a scalar{which}")


def reducescatter_async(ops: ArrayOps, tensor, *, name=None, op=Average,
                        process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0, scratch=False):
    """``scratch`` (fuse's own, not Horovod's): ``tensor`` may be overwritten (its memory
    is the engine's working buffer, which saves copying it into the fusion buffer); the
    result is a new tensor all the same."""
    op = reducescatter_op(op)
    buf, dtype, shape = ops.describe(tensor)
    check_not_scalar([shape], "reducescatter")
    pset = _pset(process_set)
    return _enqueue_named(name, "reducescatter", pset, lambda n: [RequestSpec(
        REDUCESCATTER, n, dtype, shape, pset, input=buf, op=op,
        prescale=prescale_factor, postscale=postscale_factor,
        # the input given as the output too: what tells the engine it may reduce there
        output=buf if scratch else None,
        allocator=_new_output(ops, tensor))], lambda v, a, r: r.result)[0]


def grouped_reducescatter_async(ops: ArrayOps, tensors: Sequence, *, name=None, op=Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    op = reducescatter_op(op)
    pset = _pset(process_set)
    described = [(t, *ops.describe(t)) for t in tensors]
    check_not_scalar([d[3] for d in described], "grouped_reducescatter")

    def specs(base):
        return [RequestSpec(REDUCESCATTER, f"{base}.{i}", dtype, shape, pset,
                            input=buf, op=op, prescale=prescale_factor,
                            postscale=postscale_factor, allocator=_new_output(ops, t),
                            group_key=base)
                for i, (t, buf, dtype, shape) in enumerate(described)]
    handles = _enqueue_named(name, "grouped_reducescatter", pset, specs,
                             lambda v, a, r: r.result)
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
    out = ops.empty_like(tensor) if output is None else output
    out_buf = buf if out is tensor else ops.describe(out)[0]
    return _enqueue_named(name, "broadcast", pset, lambda n: [RequestSpec(
        BROADCAST, n, dtype, shape, pset, input=buf, output=out_buf,
        root=int(root_rank))], lambda v, a, r: out)[0]


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
    return _enqueue_named(name, "alltoall", pset, lambda n: [RequestSpec(
        ALLTOALL, n, dtype, shape, pset, input=buf, splits=split_list,
        allocator=_new_output(ops, tensor))],
        lambda v, a, r: (r.result, ops.from_numpy(np.asarray(a, np.int32))))[0]


# ---------------------------------------------------------------- control

_NO_DATA = DTYPE_CODES["uint8"]   # the dtype of collectives that carry no tensor

def barrier(process_set=global_process_set) -> None:
    """Return once every member of the set has called barrier."""
    pset = _pset(process_set)
    spec = RequestSpec(BARRIER, "barrier", _NO_DATA, (0,), pset)
    synchronize(_enqueue([spec], lambda v, a, r: None)[0])


def join(process_set=global_process_set) -> int:
    """This rank is out of data: keep serving the others' allreduces (with zeros) until every
    rank has joined.  Returns the last rank to join."""
    pset = _pset(process_set)
    spec = RequestSpec(JOIN, "join", _NO_DATA, (0,), pset)
    return int(synchronize(_enqueue([spec], lambda v, a, r: v)[0]))


def submit_control(kind: str, ranks: Sequence[int]) -> int:
    """``add_process_set`` with the new set's ``ranks`` (returns its id), or
    ``remove_process_set`` with ``ranks=[id]``."""
    name = f"process_set.{kind}"
    if kind == "add_process_set":
        spec = RequestSpec(PSET_ADD, name, _NO_DATA, (0,), 0, ranks=list(ranks))
    elif kind == "remove_process_set":
        (removed,) = ranks
        spec = RequestSpec(PSET_REMOVE, name, _NO_DATA, (0,), 0, removed_set=removed)
    else:
        raise KeyError(kind)
    return int(synchronize(_enqueue([spec], lambda v, a, r: v)[0]))


# ---------------------------------------------------------------- Python objects

_numpy_ops = NumpyOps()


def broadcast_object(obj=None, root_rank: int = 0, name=None, process_set=global_process_set):
    """``obj`` from ``root_rank`` on every member (serialised with cloudpickle)."""
    ops = _numpy_ops
    name = name or auto_name("broadcast_object", _pset(process_set))
    me = state.rank()
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
    name = name or auto_name("allgather_object", _pset(process_set))
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
