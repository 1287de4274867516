"""Start-of-training helpers: broadcast a model's parameters; Python objects."""

from __future__ import annotations

import mxnet as mx

from fuse.collectives import calls as _c
from fuse.job.process_sets import global_process_set
from fuse.frameworks.mxnet import mpi_ops


def _broadcast_into(arrays, root_rank, name, process_set):
    """``root_rank``'s values into ``arrays`` (one Parameter's copies on its contexts)."""
    first = arrays[0]
    mpi_ops.wait(mpi_ops.broadcast_async_(first, root_rank, name=name,
                                          process_set=process_set))
    for other in arrays[1:]:
        first.copyto(other)


def _broadcast_after_init(param, root_rank, name, process_set):
    """A parameter whose shape is known only at the first forward (deferred initialisation):
    broadcast it right after MXNet initialises it.  Every rank runs its first forward through
    the same layers in the same order, so the broadcasts are issued in the same order too."""
    init_impl = param._init_impl

    def init_then_broadcast(data, ctx_list):
        init_impl(data, ctx_list)
        del param._init_impl          # back to the class's method
        _broadcast_into(param.list_data(), root_rank, name, process_set)

    param._init_impl = init_then_broadcast


def broadcast_parameters(params, root_rank=0, prefix=None, process_set=global_process_set):
    """Overwrite ``params`` with ``root_rank``'s values, in place.

    ``params`` is a dict of name -> NDArray (``Module.get_params()``) or of name -> Gluon
    ``Parameter``, or a Gluon ``ParameterDict`` (``net.collect_params()``).  A parameter not
    initialised yet (deferred initialisation) is broadcast as soon as MXNet initialises it.
    ``prefix`` is put in front of every name, to tell several calls apart."""
    if not hasattr(params, "items"):
        raise ValueError(f"broadcast_parameters takes a dict or a ParameterDict, got "
                         f"{type(params).__name__}")
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError(f"prefix must be a str, got {type(prefix).__name__}")
    prefix = prefix or ""
    pending = []
    for key, value in sorted(params.items(), key=lambda kv: str(kv[0])):
        name = f"broadcast_parameters.{prefix}{key}"
        if isinstance(value, mx.gluon.Parameter):
            try:
                arrays = value.list_data()
            except mx.gluon.parameter.DeferredInitializationError:
                _broadcast_after_init(value, root_rank, name, process_set)
                continue
            pending.append((mpi_ops.broadcast_async_(arrays[0], root_rank, name=name,
                                                     process_set=process_set), arrays))
        elif isinstance(value, mx.nd.NDArray):
            pending.append((mpi_ops.broadcast_async_(value, root_rank, name=name,
                                                     process_set=process_set), [value]))
        else:
            raise ValueError(f"broadcast_parameters: {key!r} is a {type(value).__name__}, not "
                             "an NDArray or a Parameter")
    first_error = None
    for handle, arrays in pending:      # wait for every broadcast before raising
        try:
            mpi_ops.wait(handle)
            for other in arrays[1:]:
                arrays[0].copyto(other)
        except Exception as err:
            first_error = first_error or err
    if first_error is not None:
        raise first_error


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """``obj`` from ``root_rank`` on every member (serialised with cloudpickle)."""
    return _c.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """A list with every member's ``obj``, in rank order."""
    return _c.allgather_object(obj, name=name, process_set=process_set)
