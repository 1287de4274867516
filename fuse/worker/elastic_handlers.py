"""The framework-free half of a framework's elastic state, written once for PyTorch and MXNet.

A framework's state (``TorchState``, ``MXNetState``) keeps its model, optimizer and sampler
through *handlers* (Horovod's handler registry): each handler saves a copy in memory at
``commit()``, puts it back at ``restore()`` and broadcasts rank 0's at ``sync()``.  What a
handler does with its object is the framework's; this module has

* :class:`ObjectState` with Horovod's signature (keyword arguments only);
* :class:`StateHandler`, the handler interface;
* :class:`HandlerState`, the state that finds a handler for each value it is given (from the
  framework's registry), runs them at save/restore/sync/reset and keeps every other value as
  :class:`~fuse.worker.elastic.ObjectState` does;
* :class:`ElasticSamplerBase`, the sampler's bookkeeping (which samples of the epoch no
  committed step processed, split over the current workers), and its handler
  :class:`SamplerStateHandler`.
"""

from __future__ import annotations

import copy
import math
import random

from fuse.collectives import calls as _c
from fuse.worker import lifecycle
from fuse.worker import elastic as _elastic


def bcast_object(obj, name="fuse.elastic.object_state"):
    """Rank 0's ``obj`` on every rank (what the states' ``sync`` sends)."""
    return _c.broadcast_object(obj, 0, name=name)


class ObjectState(_elastic.ObjectState):
    """Picklable attributes given as keyword arguments, ``ObjectState(epoch=0, batch=0)``:
    the framework modules' ``ObjectState`` (Horovod's signature), synced with fuse's
    ``broadcast_object``."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=lifecycle.rank, **kwargs)


class StateHandler(_elastic.Snapshot):
    """Keeps one object of a state: ``save`` a copy, ``restore`` it, ``sync`` rank 0's.

    A state's commit saves its handlers in two passes (:meth:`HandlerState.save`): every
    handler's :meth:`take` first, then every :meth:`keep`.  Making a copy may be collective (a
    sharded optimizer gathers its state from every rank) and fail half-way through a commit
    when a worker leaves; nothing is kept before every copy is made, so a commit is kept whole
    or not at all (never the model of the new commit beside the optimizer of the old one).  A
    handler that defines only ``save`` saves in the second pass."""

    def __init__(self, value):
        self.value = value

    def take(self):
        """The copy ``save`` keeps, made but not kept yet (None: this handler saves in one
        go, in :meth:`keep`)."""
        return None

    def keep(self, taken) -> None:
        """Keep ``taken``, what :meth:`take` made, as the saved copy."""
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()


class HandlerRegistry:
    """A framework's ``(type, handler class)`` pairs, the first ``isinstance`` match winning:
    Horovod's per-framework ``get_handler_registry``/``set_handler_registry`` are :meth:`get`
    and :meth:`set` of one of these."""

    def __init__(self, pairs):
        self._pairs = list(pairs)

    @classmethod
    def functions(cls, pairs):
        """Horovod's ``get_handler_registry`` and ``set_handler_registry`` of a framework
        module, over a new registry of ``pairs``."""
        registry = cls(pairs)
        return registry.get, registry.set

    def get(self):
        return self._pairs

    def set(self, pairs):
        self._pairs = pairs


class HandlerState(_elastic.ObjectState):
    """State whose values with a handler in ``registry`` (a list of ``(type, handler class)``,
    the first ``isinstance`` match wins) are kept by that handler; the others are kept as by
    ``ObjectState``.  Assigning a new value to a handled attribute re-saves it."""

    def __init__(self, registry, **kwargs):
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(registry, value) if value is not None else None
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        self.__dict__["_handlers"] = handlers
        for name, handler in handlers.items():
            self.__dict__[name] = handler.value
        super().__init__(bcast_object=bcast_object, get_rank=lifecycle.rank, **plain)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def _each_handler(self, step: str) -> None:
        for handler in self._handlers.values():
            getattr(handler, step)()

    def save(self):
        # every copy made before any is kept: see StateHandler
        taken = {name: handler.take() for name, handler in self._handlers.items()}
        for name, handler in self._handlers.items():
            handler.keep(taken[name])
        super().save()

    def restore(self):
        self._each_handler("restore")
        super().restore()

    def sync(self):
        self._each_handler("sync")
        super().sync()

    def reset(self):
        self._each_handler("reset")
        super().reset()

    def saved(self):
        return {"handlers": {name: h.saved() for name, h in self._handlers.items()},
                "plain": super().saved()}

    def load_saved(self, saved) -> None:
        for name, value in saved["handlers"].items():
            if name in self._handlers:
                self._handlers[name].load_saved(value)
        super().load_saved(saved["plain"])


def _handler_for(registry, value):
    # a distributed optimizer reports its wrapped optimizer's class (isinstance holds)
    for cls, handler in registry:
        if isinstance(value, cls):
            return handler(value)
    return None


class ElasticSamplerBase:
    """A distributed sampler that survives a change of workers in the middle of an epoch (the
    framework's ``ElasticSampler`` adds its own ``Sampler`` base class).

    Record each batch you finished with ``record_batch(batch_idx, batch_size)`` (or the sample
    indices with ``record_indices``); a state that holds the sampler saves the processed
    indices at ``commit()``.  After the job re-forms, the samples of this epoch that no worker
    committed are shuffled (seeded by ``seed + epoch``, the same on every rank) and split over
    the new workers; nothing committed is seen again this epoch.  As in PyTorch's
    DistributedSampler, the last round is padded with a few repeated samples so that every rank
    gets as many.  Call ``set_epoch(epoch)`` when an epoch ends.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices: set[int] = set()
        self.indices: list[int] = []
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Batch ``batch_idx`` (of ``batch_size`` samples per rank) is done on every rank: the
        ranks step together, so each records every rank's share (all ranks then agree on what
        is left, even when a re-form skips the sync)."""
        start = batch_idx * batch_size
        for r in range(self.num_replicas):
            mine = self._indices_of(r)
            self.record_indices(mine[start:min(start + batch_size, len(mine))])

    def record_indices(self, indices):
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def reset(self):
        """Split the samples this epoch has not processed over the current workers."""
        self.num_replicas = lifecycle.size() if lifecycle.is_initialized() else 1
        self.rank = lifecycle.rank() if lifecycle.is_initialized() else 0
        remaining = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(remaining)
        self.remaining_indices = remaining
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._my_indices()

    def _indices_of(self, rank: int) -> list[int]:
        indices = list(self.remaining_indices)
        if indices:
            while len(indices) < self.total_size:     # pad (wrapping around) to split evenly
                indices += indices[:self.total_size - len(indices)]
        return indices[rank:self.total_size:self.num_replicas]

    def _my_indices(self) -> list[int]:
        return self._indices_of(self.rank)

    def __iter__(self):
        self.indices = self._my_indices()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


class StateDictHandler(_elastic.KeptCopy, StateHandler):
    """Keeps an object with ``state_dict()``/``load_state_dict()`` (a torch module or
    optimizer, an MXNet trainer's wrapper, a sampler): ``save`` deep-copies its state dict,
    ``restore`` loads that copy back; subclasses say how to ``sync``."""

    def __init__(self, value):
        super().__init__(value)
        self._saved = copy.deepcopy(value.state_dict())

    def take(self):
        return copy.deepcopy(self.value.state_dict())

    def keep(self, taken) -> None:
        self._saved = taken

    def save(self):
        self.keep(self.take())

    def restore(self):
        # A copy: torch's Optimizer.load_state_dict keeps the tensors it is given as its state,
        # so the steps after a rollback would otherwise change the committed copy in place and a
        # second rollback before the next commit would restore their work.
        self.value.load_state_dict(copy.deepcopy(self._saved))


class SamplerStateHandler(StateDictHandler):
    """Keeps an :class:`ElasticSamplerBase`: its epoch and the samples committed steps
    processed.

    After a sync every worker goes on from rank 0's state (its model is broadcast), so the
    samples counted as processed are those of rank 0's last commit, from every worker (a
    worker that records only its own samples, ``record_indices``, is the only one to know
    them).  A worker may have kept one commit more than rank 0: a commit whose copy is
    collective (a sharded optimizer's) can complete on one rank and fail on another when a
    worker leaves.  That worker's samples then come from the commit before its last, or the
    steps that rank 0 rolled back would be skipped.  Commits are counted to tell; a sync
    makes every worker's count rank 0's."""

    def __init__(self, value):
        super().__init__(value)
        self._commits = 0
        self._before = self._saved      # the commit before the last one

    def keep(self, taken) -> None:
        self._before = self._saved
        super().keep(taken)
        self._commits += 1

    def sync(self):
        parts = _c.allgather_object(
            (self._commits, self.value.processed_indices, self._saved["processed_indices"],
             self._before["processed_indices"]), name="fuse.elastic.sampler_processed")
        lead = parts[0][0]
        processed, committed = set(), set()
        for commits, current, saved, before in parts:
            if commits == lead + 1:
                # it kept the commit rank 0 failed to: its state is that commit, restored
                processed |= set(before)
                committed |= set(before)
            else:                       # new workers bring nothing
                processed |= set(current)
                committed |= set(saved)
        state = self.value.state_dict()
        state["processed_indices"] = processed
        saved = dict(self._saved, processed_indices=committed)
        state, saved = bcast_object((state, saved), name="fuse.elastic.sampler_state")
        self.value.load_state_dict(state)
        # every worker's next rollback goes back to the same commit, rank 0's
        self._saved = self._before = saved
        self._commits = lead

    def reset(self):
        self.value.reset()
