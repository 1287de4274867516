"""Start-of-training helpers: broadcast variables and Python objects."""

from __future__ import annotations

import tensorflow as tf

from fuse.collectives import calls as _c
from fuse.job.process_sets import global_process_set
from fuse.frameworks.tensorflow import mpi_ops
from fuse.frameworks.tensorflow.bridge import in_tf1_graph


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Give every variable ``root_rank``'s value (``variables``: a list of ``tf.Variable``,
    e.g. ``model.variables`` plus ``optimizer.variables``).  Works eagerly and inside
    ``tf.function``; in a TensorFlow 1 graph it returns the op that does it (run it in the
    session), as Horovod does.  ``inplace`` is accepted for compatibility (variables are always
    assigned in place)."""
    variables = list(variables)
    for i, var in enumerate(variables):
        if not isinstance(var, tf.Variable) and not hasattr(var, "assign"):
            raise ValueError(f"broadcast_variables: item {i} is a {type(var).__name__}, not a "
                             "variable")
    names = [f"broadcast_variables.{i}" for i in range(len(variables))]
    graph = in_tf1_graph()
    assigns = []
    for name, var in zip(names, variables):
        value = mpi_ops.broadcast_raw(tf.convert_to_tensor(var), int(root_rank), name,
                                       process_set)
        # a TF1 graph's assign op (not its read) is what tf.group must run; Keras 3
        # variables take no read_value
        assigns.append(var.assign(value, read_value=False) if graph else var.assign(value))
    return tf.group(*assigns) if graph else None


def broadcast_global_variables(root_rank):
    """TensorFlow 1 graphs: the op that gives every global variable ``root_rank``'s value.
    Eagerly (and in tf.function) there is no global-variable collection: RuntimeError, as in
    Horovod (use ``broadcast_variables(model.variables, root_rank)``)."""
    if not in_tf1_graph():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution; "
                           "use hvd.broadcast_variables(model.variables, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """``obj`` from ``root_rank`` on every member (serialised with cloudpickle).  ``session``
    (TF1) is accepted for compatibility."""
    return _c.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function ``obj -> root_rank's obj`` (Horovod builds one graph op for it)."""
    def fn(obj):
        return _c.broadcast_object(obj, root_rank, name=name, process_set=process_set)
    return fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """A list with every member's ``obj``, in rank order."""
    return _c.allgather_object(obj, name=name, process_set=process_set)
