"""The collectives on TensorFlow tensors, with Horovod's signatures and gradients.

The work is done by :mod:`fuse.collectives.calls`; this module turns each call into a host
function run through :mod:`fuse.frameworks.tensorflow.bridge` (eagerly, or as an ordered
``tf.py_function`` inside ``tf.function``) and attaches Horovod's gradient with
``tf.custom_gradient``:

==============  =============================================================
forward         gradient
==============  =============================================================
allreduce       allreduce of the gradient with the same op and scale factors
allgather       allreduce (Average) of the gradient, then this rank's rows (grouped too)
broadcast       allreduce (Average) of the gradient; zero on non-root ranks
alltoall        alltoall of the gradient back with the received splits
reducescatter   allgather of the gradient (times the set size for Sum, times the scales)
==============  =============================================================

Names: a ``name`` given by the caller names the collective on the wire (mismatch errors quote
it).  Without one, eagerly and inside ``tf.function`` the name is drawn when the collective is
queued, from a counter every rank advances in the same order; in a TensorFlow 1 graph it is
drawn when the graph is built (:func:`fuse.frameworks.tensorflow.bridge.build_time_name`).

Errors: ranks that disagree raise ``tf.errors.FailedPreconditionError``, bad arguments found
when the collective runs ``tf.errors.InvalidArgumentError`` (see the bridge).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from fuse.worker import lifecycle
from fuse.collectives import calls as _c
from fuse.collectives.ops import Average, Sum, resolve_op
from fuse.job.process_sets import global_process_set
from fuse.frameworks.tensorflow.bridge import (build_time_name, in_tf1_graph, run_host,
                                               run_value)
from fuse.frameworks.tensorflow.tensors import (Compression, TensorflowOps, check_dtype,
                                                host_output)

ops = TensorflowOps()


def _wait(handle):
    return _c.synchronize(handle)


def _tensor(value, what):
    t = tf.convert_to_tensor(value)
    check_dtype(t.dtype, what)
    return t


def _zeros_for_missing(grads, outputs):
    # the tape hands None for an output nothing depended on; the peers still need a tensor
    return [tf.zeros_like(o) if g is None else g for g, o in zip(grads, outputs)]


# ------------------------------------------------------------------ allreduce

def _named(kind, name, process_set):
    return build_time_name(kind, name, lifecycle.process_set_id(process_set))


def _allreduce_raw(tensor, name, op, prescale, postscale, process_set):
    name = _named("allreduce", name, process_set)

    def host(arrays):
        out, view = host_output(arrays[0])     # returned without a copy
        _wait(_c.allreduce_async(ops, arrays[0], output=view, name=name, op=op,
                                 prescale_factor=prescale, postscale_factor=postscale,
                                 process_set=process_set))
        return [out]
    return run_host(host, [tensor], [tensor.dtype], [tensor.shape], "allreduce")[0]


def _allreduce_diff(tensor, name, op, prescale, postscale, process_set):
    @tf.custom_gradient
    def reduce(x):
        def grad(dy):
            return _allreduce_raw(dy, None, op, prescale, postscale, process_set)
        return _allreduce_raw(x, name, op, prescale, postscale, process_set), grad
    return reduce(tensor)


def _sparse_allreduce(slices, name, op, process_set):
    """IndexedSlices are reduced by gathering every rank's rows (indices and values); Average
    divides the values by the set size.  Only Average and Sum make sense here."""
    if op not in (Average, Sum):
        raise NotImplementedError("allreduce of tf.IndexedSlices supports only op=Average or "
                                  "op=Sum (or pass sparse_as_dense=True / a dense tensor)")
    values = allgather(slices.values, name=f"{name}.values" if name else None,
                       process_set=process_set)
    indices = allgather(slices.indices, name=f"{name}.indices" if name else None,
                        process_set=process_set)
    if op == Average:
        values = values / tf.cast(len(process_set.ranks), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """The reduction of ``tensor`` (a tensor, variable or ``tf.IndexedSlices``) over the
    process set; default op Average.  Differentiable: the gradient is allreduced the same
    way.  ``device_*`` and ``ignore_name_scope`` are accepted for compatibility."""
    op = resolve_op(op, average)
    _c.check_scale(op, prescale_factor, postscale_factor)
    if isinstance(tensor, tf.IndexedSlices):
        if prescale_factor != 1.0 or postscale_factor != 1.0:
            raise NotImplementedError("prescale_factor/postscale_factor are not supported "
                                      "for tf.IndexedSlices")
        return _sparse_allreduce(tensor, name, op, process_set)
    tensor = _tensor(tensor, f"allreduce {name or ''}".strip())
    wire, ctx = compression.compress(tensor)
    out = _allreduce_diff(wire, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def _grouped_allreduce_raw(tensors, name, op, prescale, postscale, process_set):
    name = _named("grouped_allreduce", name, process_set)

    def host(arrays):
        return _wait(_c.grouped_allreduce_async(ops, arrays, name=name, op=op,
                                                prescale_factor=prescale,
                                                postscale_factor=postscale,
                                                process_set=process_set))
    return run_host(host, tensors, [t.dtype for t in tensors], [t.shape for t in tensors],
                    "grouped_allreduce")


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduce a list of tensors as one grouped collective (negotiated and fused together).
    ``tf.IndexedSlices`` in the list are reduced on their own.  Differentiable."""
    op = resolve_op(op, average)
    _c.check_scale(op, prescale_factor, postscale_factor)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    dense_at = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    results = [None] * len(tensors)
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            results[i] = allreduce(t, op=op, name=f"{name}.{i}" if name else None,
                                   process_set=process_set)
    if dense_at:
        dense = [_tensor(tensors[i], "grouped_allreduce") for i in dense_at]
        wires, ctxs = zip(*(compression.compress(t) for t in dense))

        @tf.custom_gradient
        def reduce(*xs):
            outs = _grouped_allreduce_raw(list(xs), name, op, prescale_factor,
                                          postscale_factor, process_set)

            def grad(*dys):
                return _grouped_allreduce_raw(_zeros_for_missing(dys, outs), None, op,
                                              prescale_factor, postscale_factor, process_set)
            return outs, grad

        outs = reduce(*wires)
        for i, out, ctx in zip(dense_at, outs, ctxs):
            results[i] = compression.decompress(out, ctx)
    return results


# ------------------------------------------------------------------ allgather

def _allgather_raw(tensor, name, process_set):
    name = _named("allgather", name, process_set)

    def host(arrays):
        return [_wait(_c.allgather_async(ops, arrays[0], name=name,
                                         process_set=process_set))]
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else None
    return run_host(host, [tensor], [tensor.dtype], [shape], "allgather")[0]


def _allgather_grad(xs, dys, process_set):
    """Horovod's gradient of (grouped) allgather: each gathered gradient averaged over the
    set (one grouped allreduce), then the rows this rank contributed.  The row counts travel
    in one allgather, since they may differ between ranks."""
    reduced = _grouped_allreduce_raw(list(dys), None, Average, 1.0, 1.0, process_set)
    rows = tf.stack([tf.cast(tf.shape(x)[0], tf.int64) for x in xs])
    counts = tf.reshape(_allgather_raw(rows, None, process_set), [-1, len(xs)])
    me = process_set.rank()
    offsets = tf.reduce_sum(counts[:me], axis=0)
    out = []
    for i, r in enumerate(reduced):
        rest = tf.shape(r, out_type=tf.int64)[1:]
        out.append(tf.slice(r, tf.concat([offsets[i:i + 1], tf.zeros_like(rest)], 0),
                            tf.concat([counts[me, i:i + 1], rest], 0)))
    return out


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every member's tensor concatenated along dimension 0 (which may differ between
    ranks).  Differentiable: the gradient is averaged over the set, and each rank keeps the
    rows it gave."""
    tensor = _tensor(tensor, f"allgather {name or ''}".strip())
    _c.check_not_scalar(_static_shapes([tensor]), "allgather")

    @tf.custom_gradient
    def gather(x):
        out = _allgather_raw(x, name, process_set)

        def grad(dy):
            return _allgather_grad([x], _zeros_for_missing([dy], [out]), process_set)[0]
        return out, grad
    return gather(tensor)


def _grouped_allgather_raw(tensors, name, process_set):
    name = _named("grouped_allgather", name, process_set)

    def host(arrays):
        return _wait(_c.grouped_allgather_async(ops, arrays, name=name,
                                                process_set=process_set))
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else None
              for t in tensors]
    return run_host(host, tensors, [t.dtype for t in tensors], shapes, "grouped_allgather")


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgather a list of tensors as one grouped collective.  Differentiable, as
    :func:`allgather` (Horovod's gradient)."""
    tensors = [_tensor(t, "grouped_allgather") for t in tensors]
    if not tensors:
        raise ValueError("grouped_allgather needs at least one tensor")
    _c.check_not_scalar(_static_shapes(tensors), "grouped_allgather")

    @tf.custom_gradient
    def gather(*xs):
        outs = _grouped_allgather_raw(list(xs), name, process_set)

        def grad(*dys):
            return _allgather_grad(xs, _zeros_for_missing(dys, outs), process_set)
        return outs, grad
    return list(gather(*tensors))


def _static_shapes(tensors):
    """The shapes known when the graph is built (None where the rank is not): what the
    scalar checks can refuse before anything runs."""
    return [t.shape if t.shape.rank is not None else None for t in tensors]


# ------------------------------------------------------------------ broadcast

def broadcast_raw(tensor, root_rank, name, process_set):
    if root_rank not in process_set.ranks:   # an argument error, found before running
        raise ValueError(f"broadcast root_rank {root_rank} is not a member of {process_set}")
    name = _named("broadcast", name, process_set)

    def host(arrays):
        return [_wait(_c.broadcast_async(ops, arrays[0], root_rank, name=name,
                                         process_set=process_set))]
    return run_host(host, [tensor], [tensor.dtype], [tensor.shape], "broadcast")[0]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """``root_rank``'s tensor on every member (``root_rank`` is a global rank).
    Differentiable: the gradient is averaged over the set and kept on the root only."""
    tensor = _tensor(tensor, f"broadcast {name or ''}".strip())
    root_rank = int(root_rank)

    @tf.custom_gradient
    def bcast(x):
        def grad(dy):
            reduced = _allreduce_raw(dy, None, Average, 1.0, 1.0, process_set)
            if lifecycle.rank() != root_rank:
                reduced = reduced * 0
            return reduced
        return broadcast_raw(x, root_rank, name, process_set), grad
    return bcast(tensor)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrite each variable with ``root_rank``'s value, in place.  Eagerly and in
    tf.function it returns the variables; in a TensorFlow 1 graph (where nothing happens until
    the session runs it) the assignments' new values, which run the broadcast when evaluated.
    A list when given a list."""
    single = isinstance(variables, tf.Variable)
    variables = [variables] if single else list(variables)
    results = []
    for i, var in enumerate(variables):
        value = broadcast_raw(_tensor(var, "broadcast_"), int(root_rank),
                               f"{name}.{i}" if name else None, process_set)
        assigned = var.assign(value)
        results.append(assigned if in_tf1_graph() else var)
    return results[0] if single else results


# ------------------------------------------------------------------ alltoall

def _alltoall_raw(tensor, splits, name, process_set):
    has_splits = splits is not None
    name = _named("alltoall", name, process_set)
    inputs = [tensor] + ([tf.reshape(tf.cast(splits, tf.int64), [-1])] if has_splits else [])

    def host(arrays):
        split_list = arrays[1].tolist() if has_splits else None
        out, received = _wait(_c.alltoall_async(ops, arrays[0], split_list, name=name,
                                                process_set=process_set))
        return [out, np.asarray(received, np.int32)]
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else None
    out, received = run_host(host, inputs, [tensor.dtype, tf.int32],
                             [shape, [len(process_set.ranks)]], "alltoall")
    return out, received


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Send ``splits[i]`` rows of dimension 0 to member i (an even split without ``splits``).
    Returns the received rows, or ``(rows, received_splits)`` when ``splits`` is given.
    Differentiable: the gradient travels back with the received splits."""
    tensor = _tensor(tensor, f"alltoall {name or ''}".strip())
    if tensor.shape.rank == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension, got a scalar")
    if splits is not None:
        splits = tf.convert_to_tensor(splits)
        if splits.dtype not in (tf.int32, tf.int64):
            raise ValueError("alltoall splits must be an int32 (or int64) tensor or a list")

    @tf.custom_gradient
    def exchange(x):
        out, received = _alltoall_raw(x, splits, name, process_set)

        def grad(dy, _dsplits=None):
            back, _ = _alltoall_raw(dy, received, None, process_set)
            return back
        return (out, received), grad
    out, received = exchange(tensor)
    return out if splits is None else (out, received)


# ------------------------------------------------------------------ reducescatter

def _reducescatter_raw(tensors, name, op, prescale, postscale, process_set, grouped):
    name = _named("grouped_reducescatter" if grouped else "reducescatter", name, process_set)

    def host(arrays):
        if grouped:
            return _wait(_c.grouped_reducescatter_async(
                ops, arrays, name=name, op=op, process_set=process_set,
                prescale_factor=prescale, postscale_factor=postscale))
        return [_wait(_c.reducescatter_async(ops, arrays[0], name=name, op=op,
                                             process_set=process_set,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale))]
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else None
              for t in tensors]
    return run_host(host, tensors, [t.dtype for t in tensors], shapes,
                    "grouped_reducescatter" if grouped else "reducescatter")


def _reducescatter_grad(dys, op, scale, process_set):
    """Horovod's gradient of reducescatter: the allgathered gradient, times the set size for
    Sum, times ``prescale_factor * postscale_factor`` (``scale``)."""
    gathered = [_allgather_raw(dy, None, process_set) for dy in dys]
    if op == Sum:
        scale = scale * len(process_set.ranks)
    if scale != 1.0:
        gathered = [g * tf.cast(scale, g.dtype) for g in gathered]
    return gathered


def _reducescatter_diff(tensors, name, op, prescale, postscale, process_set, grouped):
    @tf.custom_gradient
    def scatter(*xs):
        outs = _reducescatter_raw(list(xs), name, op, prescale, postscale, process_set,
                                  grouped)

        def grad(*dys):
            return _reducescatter_grad(_zeros_for_missing(dys, outs), op,
                                       prescale * postscale, process_set)
        return outs, grad
    return scatter(*tensors)


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce over the set, then give each member its block of dimension-0 rows (the
    remainder to the first ranks).  Default op Average.  Differentiable."""
    op = resolve_op(op, None)
    tensor = _tensor(tensor, f"reducescatter {name or ''}".strip())
    _c.check_not_scalar(_static_shapes([tensor]), "reducescatter")
    wire, ctx = compression.compress(tensor)
    out = _reducescatter_diff([wire], name, op, prescale_factor, postscale_factor,
                              process_set, grouped=False)[0]
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    """Reducescatter a list of tensors as one grouped collective.  Differentiable."""
    op = resolve_op(op, None)
    tensors = [_tensor(t, "grouped_reducescatter") for t in tensors]
    if not tensors:
        raise ValueError("grouped_reducescatter needs at least one tensor")
    _c.check_not_scalar(_static_shapes(tensors), "grouped_reducescatter")
    wires, ctxs = zip(*(compression.compress(t) for t in tensors))
    outs = _reducescatter_diff(list(wires), name, op, prescale_factor, postscale_factor,
                               process_set, grouped=True)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


# ------------------------------------------------------------------ control

def join(process_set=global_process_set):
    """This rank is out of data: serve the others' allreduces with zeros until every rank has
    joined.  Returns the last rank to join (an int32 scalar tensor)."""
    return run_host(lambda _arrays: [np.int32(_c.join(process_set))], [], [tf.int32], [[]],
                    "join")[0]


def barrier(process_set=global_process_set):
    """Return once every member of the set has called barrier (inside ``tf.function``, the
    barrier runs in program order with the collectives around it)."""
    def host(_arrays):
        _c.barrier(process_set)
        return [np.int32(0)]
    out = run_host(host, [], [tf.int32], [[]], "barrier")[0]
    return None if tf.executing_eagerly() else out


# ------------------------------------------------------------------ graph-time identity ops

def size_op(process_set_id=0, name=None):
    """The size of the process set, read when the graph runs."""
    return run_value(lambda: _process_set(process_set_id).size(), "size_op")


def local_size_op(name=None):
    return run_value(lifecycle.local_size, "local_size_op")


def rank_op(name=None):
    return run_value(lifecycle.rank, "rank_op")


def local_rank_op(name=None):
    return run_value(lifecycle.local_rank, "local_rank_op")


def process_set_included_op(process_set_id=0, name=None):
    """1 when this rank belongs to the process set, else 0."""
    return run_value(lambda: int(_process_set(process_set_id).included()),
                     "process_set_included_op")


def _process_set(process_set_id):
    return lifecycle.process_set_by_id(process_set_id)
