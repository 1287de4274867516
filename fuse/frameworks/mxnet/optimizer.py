"""``DistributedOptimizer`` (an ``mx.optimizer.Optimizer``) and ``DistributedTrainer`` (a Gluon
``Trainer``): both average gradients over the process set before the update.

The bookkeeping (groups, names on the wire, predivide scaling) is
:mod:`fuse.collectives.grad_sync`'s and the casts :mod:`fuse.collectives.compression`'s; this module only
finds the gradients.  Every gradient of one step is submitted before any is waited for, so the
engine fuses them into few messages.

Averaging uses the engine's Average with ``gradient_predivide_factor`` f as prescale 1/f and
postscale f (Horovod folds the same factors into ``rescale_grad``; the result is the same and
the optimizer's own ``rescale_grad`` stays as the user set it).
"""

from __future__ import annotations

import warnings

import mxnet as mx

from fuse.collectives.grad_sync import assign_groups, scaling, wire_names
from fuse.collectives.ops import Average
from fuse.job.process_sets import global_process_set
from fuse.frameworks.mxnet import mpi_ops
from fuse.frameworks.mxnet.tensors import Compression


class _GradientReducer:
    """Averages a list of gradients in place, in groups (see ``grad_sync.assign_groups``)."""

    def __init__(self, gradient_predivide_factor, num_groups, process_set, compression):
        self.op, self.prescale, self.postscale = scaling(Average, gradient_predivide_factor)
        self.num_groups = int(num_groups)
        self.process_set = process_set
        self.compression = compression

    def active(self) -> bool:
        ps = self.process_set
        return ps.included() and len(ps.ranks) > 1

    def reduce(self, grads, names) -> None:
        """Average ``grads`` (NDArrays, one per name) over the process set, in place."""
        if not grads or not self.active():
            return
        wired = [self.compression.compress(g) for g in grads]
        wires = [w for w, _ in wired]
        labels = wire_names(names)
        handles, first_error = [], None
        groups = list(enumerate(assign_groups(grads, num_groups=self.num_groups)))
        try:
            # Last group first: MXNet's backward is still running on its engine's threads
            # and writes the gradients roughly in the reverse of the parameters' order, so
            # each submission waits only for its own gradients and the engine reduces the
            # late layers' gradients while MXNet computes the early layers'.
            for g, members in reversed(groups):
                kwargs = dict(op=self.op, prescale_factor=self.prescale,
                              postscale_factor=self.postscale, process_set=self.process_set)
                if len(members) == 1:
                    i = members[0]
                    handles.append(mpi_ops.allreduce_async_(wires[i], name=labels[i],
                                                            **kwargs))
                else:
                    handles.append(mpi_ops.grouped_allreduce_async_(
                        [wires[i] for i in members],
                        name=f"grouped_allreduce.group{g}.{labels[members[0]]}", **kwargs))
        except Exception as err:     # a bad gradient: still wait for those already submitted
            first_error = err
        for h in handles:
            try:
                mpi_ops.wait(h)
            except Exception as err:
                first_error = first_error or err
        if first_error is not None:
            raise first_error
        for grad, (wire, ctx) in zip(grads, wired):
            if wire is not grad:
                grad[:] = self.compression.decompress(wire, ctx)


def _forwarded(name: str):
    """A method that calls the wrapped optimizer's ``name`` with the same arguments."""
    def forward(self, *args, **kwargs):
        return getattr(self._optimizer, name)(*args, **kwargs)
    forward.__name__ = forward.__qualname__ = name
    return forward


def _forwarding(*names: str):
    """Class decorator: each of ``names`` becomes a method that calls the wrapped optimizer's
    (the base class defines them all, so ``__getattr__`` would never be asked)."""
    def decorate(cls):
        for name in names:
            setattr(cls, name, _forwarded(name))
        return cls
    return decorate


@_forwarding("create_state", "create_state_multi_precision", "set_learning_rate",
             "set_lr_scale", "set_lr_mult", "set_wd_mult", "_set_current_context",
             "_update_count", "_get_lrs", "_get_lr", "_get_wds", "_get_wd")
class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wrap ``optimizer`` so that ``update()`` / ``update_multi_precision()`` apply gradients
    averaged over the process set (for the Module API or a Gluon ``Trainer`` with
    ``kvstore=None``; in Gluon prefer :class:`DistributedTrainer`).

    Args:
        optimizer: any ``mx.optimizer.Optimizer``.
        gradient_predivide_factor: divide by f before the sum and multiply by f after.
        num_groups: when > 0, the gradients of one update call go in that many grouped
            allreduces.
        process_set: the workers this optimizer averages over.

    Every attribute the wrapper does not define is the wrapped optimizer's, for reading and
    for writing (``Trainer.step`` sets ``rescale_grad`` on it, for instance).
    """

    _OWN = ("_optimizer", "_reducer")

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0,
                 process_set=global_process_set):
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise TypeError("DistributedOptimizer wraps an mx.optimizer.Optimizer, got "
                            f"{type(optimizer).__name__}")
        # no super().__init__: the state lives in the wrapped optimizer
        object.__setattr__(self, "_optimizer", optimizer)
        object.__setattr__(self, "_reducer", _GradientReducer(
            gradient_predivide_factor, num_groups, process_set, Compression.none))

    def __getattr__(self, name):
        # only reached for names this class does not define
        return getattr(self.__dict__["_optimizer"], name)

    def __setattr__(self, name, value):
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)

    def __repr__(self):
        return f"DistributedOptimizer({self._optimizer!r})"

    # ---- the wrapped optimizer's own verbs

    @property
    def learning_rate(self):
        return self._optimizer.learning_rate

    def __getstate__(self):
        return self.__dict__.copy()

    def __setstate__(self, state):
        self.__dict__.update(state)

    # ---- updates: average first

    def _allreduce(self, index, grad):
        if isinstance(index, (list, tuple)):
            self._reducer.reduce(list(grad), [str(i) for i in index])
        else:
            self._reducer.reduce([grad], [str(index)])

    def update(self, index, weight, grad, state):
        self._allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self._allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)


class DistributedTrainer(mx.gluon.Trainer):
    """A Gluon ``Trainer`` whose ``step()`` / ``allreduce_grads()`` average the gradients over
    the process set (no kvstore).

    Args:
        params: a ``ParameterDict`` (``net.collect_params()``), a dict or a list of Parameters;
            a dict is taken in sorted key order so every rank sees the same order.
        optimizer, optimizer_params: as for ``gluon.Trainer``.
        compression: ``Compression.none`` or ``Compression.fp16`` for the wire.
        gradient_predivide_factor: divide by f before the sum and multiply by f after.
        prefix: put in front of every gradient's name, to tell several trainers apart.
        num_groups: when > 0, the gradients go in that many grouped allreduces.
        process_set: the workers this trainer averages over.
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0,
                 process_set=global_process_set):
        if isinstance(optimizer, DistributedOptimizer):
            warnings.warn("DistributedTrainer was given a DistributedOptimizer; it averages "
                          "the gradients itself, so the wrapped optimizer is used instead",
                          stacklevel=2)
            optimizer = optimizer._optimizer
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError(f"prefix must be a str, got {type(prefix).__name__}")
        if hasattr(params, "items"):
            params = [params[key] for key in sorted(params.keys())]
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._fuse_prefix = prefix or ""
        self._fuse_reducer = _GradientReducer(gradient_predivide_factor, num_groups,
                                              process_set, compression)

    def _allreduce_grads(self):
        grads, names, copies = [], [], []
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            per_context = param.list_grad()
            grads.append(per_context[0])
            names.append(f"{self._fuse_prefix}{i}")
            copies.append(per_context[1:])
        self._fuse_reducer.reduce(grads, names)
        for grad, others in zip(grads, copies):   # several local contexts stay identical
            for other in others:
                grad.copyto(other)
