"""``fuse.torch.elastic`` (``hvd.elastic``): ``TorchState``, ``ElasticSampler``, ``run``.

``TorchState(model, optimizer, **attrs)`` keeps a model, an optimizer and an ``ElasticSampler``
through handlers (Horovod's handler registry): each saves a copy in memory at ``commit()``,
puts it back at ``restore()`` and broadcasts rank 0's at ``sync()``; other attributes are kept
as by ``ObjectState``.  Assigning a new model or optimizer to the state re-saves it.  The
framework-free half (the state over handlers, the sampler's bookkeeping) is
:mod:`fuse.worker.elastic_handlers`, shared with ``fuse.mxnet.elastic``.
"""

from __future__ import annotations

import copy

import torch

from fuse.worker.elastic import State, run, run_fn  # noqa: F401
from fuse.worker.elastic_handlers import (ElasticSamplerBase, HandlerRegistry, HandlerState,  # noqa: F401
                                          ObjectState, SamplerStateHandler, StateDictHandler,
                                          StateHandler)
from fuse.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from fuse.frameworks.torch.functions import broadcast_optimizer_state, broadcast_parameters
from fuse.frameworks.torch.sharded_optimizer import ShardedOptimizer
from fuse.collectives import calls as _c

__all__ = ["run", "run_fn", "State", "ObjectState", "TorchState", "ElasticSampler",
           "StateHandler", "ModelStateHandler", "OptimizerStateHandler",
           "ShardedOptimizerStateHandler", "SamplerStateHandler",
           "get_handler_registry", "set_handler_registry"]


class ElasticSampler(ElasticSamplerBase, torch.utils.data.Sampler):
    __doc__ = ElasticSamplerBase.__doc__


# ----------------------------------------------------------------------------- handlers

class ModelStateHandler(StateDictHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateDictHandler):
    """The optimizer's state dict and, for a DistributedOptimizer with
    ``Compression.powersgd``, its PowerSGD state (iteration, Q's, this rank's errors): saved at
    commit, put back at restore; ``sync`` gives every rank rank 0's state (each rank keeps its
    own errors; a new one starts without)."""

    def __init__(self, value):
        super().__init__(value)
        self._saved_compression = self._compression_state()

    def _powersgd(self):
        return getattr(self.value, "__dict__", {}).get("_powersgd")

    def _compression_state(self):
        powersgd = self._powersgd()
        return powersgd.state_dict() if powersgd is not None else None

    def take(self):
        return super().take(), self._compression_state()

    def keep(self, taken) -> None:
        state, self._saved_compression = taken
        super().keep(state)

    def restore(self):
        super().restore()
        powersgd = self._powersgd()
        if powersgd is not None and self._saved_compression is not None:
            powersgd.load_state_dict(self._saved_compression)

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class ShardedOptimizerStateHandler(StateDictHandler):
    """A sharded optimizer (``DistributedOptimizer(..., sharded=True)``): ``save`` keeps the
    full state, gathered from every shard (commit is collective: the gathering is the
    handler's ``take``, done before the state keeps anything), so that any surviving worker
    holds what a killed worker owned; ``restore`` loads it back (each rank keeps its shard);
    ``reset`` (after every re-form, also when workers were only removed and ``sync`` is
    skipped) loads the committed state again, sharded over the new set of workers: the
    removed workers' shards exist nowhere else (the hosts change at a commit, so the committed
    state is the live one); ``sync`` gives every rank, new ones too, rank 0's committed state,
    or before any commit the live state (``broadcast_optimizer_state``).  Nothing collective
    happens at construction: a worker joining a running job builds its state while the
    others are already in ``sync``."""

    def __init__(self, value):
        StateHandler.__init__(self, value)      # no state_dict() yet: it is collective
        self._saved = None

    def restore(self):
        if self._saved is not None:
            super().restore()

    def reset(self):
        self.restore()

    def sync(self):
        full = _c.broadcast_object(self._saved, 0, name="fuse.elastic.sharded_optimizer")
        if full is None:
            broadcast_optimizer_state(self.value, root_rank=0)
            return
        self._saved = full
        self.value.load_state_dict(copy.deepcopy(full))


get_handler_registry, set_handler_registry = HandlerRegistry.functions([
    (ShardedOptimizer, ShardedOptimizerStateHandler),
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
])


class TorchState(HandlerState):
    """State of a PyTorch job: ``TorchState(model=None, optimizer=None, **kwargs)``.

    ``model`` (any ``nn.Module``), ``optimizer`` (a ``torch.optim.Optimizer`` or
    ``DistributedOptimizer``) and any ``ElasticSampler`` among the kwargs are kept through
    their handlers; other kwargs as in ``ObjectState``."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        super().__init__(get_handler_registry(), **kwargs)
