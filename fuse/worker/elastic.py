"""Elastic training, written once for every framework: ``State``, ``ObjectState`` and the
``run`` decorator (Horovod's ``horovod.common.elastic``, same names and semantics).

The loop ``run`` wraps around the user's training function::

    sync the state (broadcast from rank 0), unless the last reset did not need it
    call the function
      - a collective failed (HorovodInternalError = FuseInternalError): restore the last
        commit, then re-form and sync
      - the hosts changed (HostsUpdatedInterrupt, raised at a commit): re-form; sync only if
        workers were added
    re-form: fuse.shutdown(); fuse.init() (which joins the driver's next generation), then the
    state's reset callbacks

Host changes reach the job through the rendezvous store: rank 0 reads the driver's newest
generation at most every ``HOST_CHECK_SECONDS`` and broadcasts it at each
``check_host_updates()``, so every rank raises at the same step.
"""

from __future__ import annotations

import copy
import functools
import time

import numpy as np

from fuse.collectives import calls
from fuse.worker import heartbeat, lifecycle
from fuse.cluster.store import StoreUnreachable
from fuse.job import state as job_state
from fuse.exceptions import FuseInternalError, HostsUpdatedInterrupt

__all__ = ["Snapshot", "State", "ObjectState", "run_fn", "run"]

# Rank 0 asks the store for a new generation at most this often; each check broadcasts its
# answer (a few bytes) so that every rank decides alike.
HOST_CHECK_SECONDS = 0.25


class _HostUpdates:
    """Rank 0's view of the driver's newest generation, polled through the store."""

    def __init__(self):
        self._store = None
        self._store_of = None
        self._last_poll = 0.0
        self._newest = -1
        self._added = False

    def _poll(self) -> None:
        from fuse.cluster import elastic_protocol as protocol
        from fuse.cluster.store import store_from_config
        cfg = job_state.config()
        if self._store is None or self._store_of is not cfg:
            self._store, self._store_of = store_from_config(cfg), cfg
        raw = self._store.try_get(protocol.GENERATION_KEY)
        newest = int(raw.decode()) if raw else -1
        if newest > self._newest:
            plan = self._store.try_get(protocol.PLAN_KEY.format(g=newest))
            self._added = plan is None or protocol.decode_plan(plan)[1]
            self._newest = newest

    def check(self) -> None:
        """Collective: raise HostsUpdatedInterrupt on every rank when the driver has formed a
        generation newer than the one this job runs."""
        if not job_state.config().elastic:
            return
        current = job_state.rendezvous_generation()
        msg = np.zeros(2, np.int64)
        if lifecycle.rank() == 0:
            now = time.monotonic()
            if now - self._last_poll >= HOST_CHECK_SECONDS:
                self._last_poll = now
                self._poll()
            msg[:] = (self._newest, self._added)
        msg = calls.synchronize(calls.broadcast_async(calls.NumpyOps(), msg, 0,
                                                      name="fuse.elastic.host_updates"))
        if int(msg[0]) > current:
            raise HostsUpdatedInterrupt(skip_sync=not bool(msg[1]))


_host_updates = _HostUpdates()


class Snapshot:
    """What the elastic loop keeps through a re-formed job: ``save`` a copy, ``restore`` the
    last saved copy, ``sync`` rank 0's copy to every worker; ``reset`` after the job
    re-formed.  A whole :class:`State`, or one handled object of it."""

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        pass

    def saved(self):
        """What the last ``save`` kept, picklable: a durable commit writes it to disk
        (fuse.worker.durable)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be committed durably")

    def load_saved(self, saved) -> None:
        """Make ``saved`` (from :meth:`saved`, maybe of another process) the last saved copy,
        and restore it."""
        raise NotImplementedError(f"{type(self).__name__} cannot be committed durably")


class KeptCopy(Snapshot):
    """A snapshot kept as one picklable copy in ``_saved``: a durable commit writes that copy
    as it is, and loading one keeps a copy of it and restores it."""

    _saved = None

    def saved(self):
        return self._saved

    def load_saved(self, saved) -> None:
        self._saved = copy.deepcopy(saved)
        self.restore()


class State(Snapshot):
    """State of a training job that survives the loss or gain of workers.

    ``bcast_object(obj)`` broadcasts a picklable object from rank 0; ``get_rank()`` returns this
    worker's rank.  Subclasses define ``save``, ``restore``, ``sync`` and ``reset``.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (without arguments) after the job re-formed and before the state is
        synced: e.g. to scale the learning rate with the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's notification hook; fuse learns of host changes at ``check_host_updates``."""

    def commit(self, durable: bool | None = None):
        """Save the state in memory, then raise HostsUpdatedInterrupt if the hosts changed.
        Collective: every rank commits at the same step.  ``durable`` (default: whether
        FUSE_ELASTIC_CHECKPOINT_DIR is set): rank 0 also writes the committed state there,
        where the job started again finds it (fuse.worker.durable)."""
        from fuse.worker import durable as _durable
        self.save()
        if _durable.wanted(durable) and self._rank() == 0:
            _durable.write(self.saved())
        self.check_host_updates()

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt (on every rank at once) if the driver has re-formed the
        job since this worker joined.  Collective."""
        _host_updates.check()


class ObjectState(KeptCopy, State):
    """Picklable attributes, given as keyword arguments: ``ObjectState(bcast_object, get_rank,
    epoch=0, batch=0)``.  ``save`` snapshots them (a deep copy), ``restore`` puts the snapshot
    back, ``sync`` broadcasts it from rank 0."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved = copy.deepcopy(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved = {attr: copy.deepcopy(getattr(self, attr)) for attr in self._saved}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved:
            self._saved = self._bcast_object(self._saved)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved.items():
            setattr(self, attr, copy.deepcopy(value))


def _reset():
    lifecycle.shutdown()
    lifecycle.init()


# Re-forming fails when another worker dies while the job connects; the next generation is
# then joined.  Failing this many times in a row means something else is wrong: raise.
REFORM_ATTEMPTS = 5


def _reform(reset):
    for attempt in range(REFORM_ATTEMPTS):
        try:
            reset()
            return
        except StoreUnreachable:
            raise       # cut off from the launcher: no generation will ever come
        except (FuseInternalError, ConnectionError):
            if attempt + 1 == REFORM_ATTEMPTS:
                raise
            lifecycle.shutdown()       # whatever of the engine had started


def run_fn(func, reset=_reset):
    """Wrap ``func(state, *args, **kwargs)`` in the elastic loop; ``reset`` re-forms the job."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        _resume_durable(state)
        while True:
            try:
                if not skip_sync:
                    state.sync()
                result = func(state, *args, **kwargs)
                heartbeat.finish()      # trained: what is left is this process's exit
                return result
            except FuseInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
            _reform(reset)
            state.on_reset()

    return wrapper


def _resume_durable(state) -> None:
    """Rank 0 of a job started again: the last durable commit (if any) becomes the state,
    which the loop's first sync hands to every worker."""
    from fuse.worker import durable
    if lifecycle.rank() != 0:
        return
    saved = durable.read()
    if saved is not None:
        state.load_saved(saved)


def run(func):
    """Decorator: ``@fuse.elastic.run def train(state, ...)`` (see the module's docstring).
    No collective may run before the decorated function on a worker, or the workers that join
    later wait for it forever."""
    return run_fn(func, _reset)
