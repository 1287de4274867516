"""``fuse.mxnet.elastic`` (``hvd.elastic``): ``MXNetState``, ``ElasticSampler``, ``run``.

Horovod has no elastic mode for MXNet; this one is PyTorch's (``fuse.torch.elastic``) on Gluon
objects, on the same written-once code (:mod:`fuse.worker.elastic_handlers`):
``MXNetState(model, trainer, **attrs)`` keeps a Gluon ``Block`` (or a ``ParameterDict``), a
``gluon.Trainer`` (``DistributedTrainer`` included: its optimizer's states and update counts)
and an ``ElasticSampler`` (a ``gluon.data.Sampler``) through handlers: each saves a copy in
memory at ``commit()``, puts it back at ``restore()`` and broadcasts rank 0's at ``sync()``;
other attributes are kept as by ``ObjectState``.
"""

from __future__ import annotations

import copy

import mxnet as mx

from fuse.worker.elastic import State, run, run_fn  # noqa: F401
from fuse.worker.elastic_handlers import (ElasticSamplerBase, HandlerRegistry, HandlerState,  # noqa: F401
                                          ObjectState, SamplerStateHandler, StateHandler,
                                          bcast_object)
from fuse.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from fuse.frameworks.mxnet.functions import broadcast_parameters

__all__ = ["run", "run_fn", "State", "ObjectState", "MXNetState", "ElasticSampler",
           "StateHandler", "ParametersStateHandler", "TrainerStateHandler",
           "SamplerStateHandler", "get_handler_registry", "set_handler_registry"]


class ElasticSampler(ElasticSamplerBase, mx.gluon.data.Sampler):
    __doc__ = ElasticSamplerBase.__doc__


def _params(value):
    return value.collect_params() if isinstance(value, mx.gluon.Block) else value


class ParametersStateHandler(StateHandler):
    """A Gluon ``Block``'s parameters (or a ``ParameterDict``).  Parameters still waiting for
    deferred initialisation have no value yet: they are skipped until they do."""

    def __init__(self, model):
        super().__init__(model)
        self.save()

    def save(self):
        self._saved = {name: p.data().copy() for name, p in _params(self.value).items()
                       if p._data is not None}
        mx.nd.waitall()

    def restore(self):
        params = _params(self.value)
        for name, data in self._saved.items():
            params[name].set_data(data.copy())

    def sync(self):
        broadcast_parameters(_params(self.value), root_rank=0)


class TrainerStateHandler(StateHandler):
    """A ``gluon.Trainer``'s optimizer: the per-parameter states (momentum, ...) and the update
    counts (learning-rate schedules and Adam's bias correction read them)."""

    def __init__(self, trainer):
        super().__init__(trainer)
        self.save()

    def _snapshot(self):
        trainer = self.value
        opt = trainer._optimizer
        states = [u.get_states(dump_optimizer=False) for u in trainer._updaters]
        return {"states": states, "num_update": opt.num_update,
                "counts": copy.deepcopy(opt._index_update_count),
                "all_counts": copy.deepcopy(getattr(opt, "_all_index_update_counts", None))}

    def _put(self, snapshot):
        trainer = self.value
        opt = trainer._optimizer
        for updater, states in zip(trainer._updaters, snapshot["states"]):
            updater.set_states(states)
        opt.num_update = snapshot["num_update"]
        opt._index_update_count = copy.deepcopy(snapshot["counts"])
        if snapshot["all_counts"] is not None:
            opt._all_index_update_counts = copy.deepcopy(snapshot["all_counts"])
            opt._index_update_count = opt._all_index_update_counts[0]

    def save(self):
        self._saved = self._snapshot()

    def restore(self):
        self._put(self._saved)

    def sync(self):
        self._put(bcast_object(self._snapshot(), name="fuse.elastic.trainer_state"))


get_handler_registry, set_handler_registry = HandlerRegistry.functions([
    (mx.gluon.Block, ParametersStateHandler),
    (mx.gluon.ParameterDict, ParametersStateHandler),
    (mx.gluon.Trainer, TrainerStateHandler),
    (ElasticSampler, SamplerStateHandler),
])


class MXNetState(HandlerState):
    """State of an MXNet Gluon job: ``MXNetState(model=None, trainer=None, **kwargs)``.

    ``model`` (a Gluon ``Block`` or ``ParameterDict``), ``trainer`` (a ``gluon.Trainer`` or
    ``DistributedTrainer``) and any ``ElasticSampler`` among the kwargs are kept through their
    handlers; other kwargs as in ``ObjectState``."""

    def __init__(self, model=None, trainer=None, **kwargs):
        kwargs.update(model=model, trainer=trainer)
        super().__init__(get_handler_registry(), **kwargs)
