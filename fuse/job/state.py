"""The running job as this process knows it: the engine, the configuration, the backend and the
registered process sets.

``fuse.worker.lifecycle`` (init, shutdown) writes it; the collective layer and the process sets
read it.  It imports nothing of fuse's above ``fuse.config``, so every layer above may import it:
this is what lets lifecycle (above the collectives) and the collectives (above this) each
import what they need without a circle.
"""

from __future__ import annotations

import os
import threading

from fuse.config import Config


class JobState:
    """What init() made.  Only ``fuse.worker.lifecycle`` writes it (holding ``lock``); every
    other module reads it through the functions below."""

    def __init__(self):
        self.lock = threading.RLock()
        self.engine = None
        self.config: Config | None = None
        self.backend = None
        # process sets registered besides the global one (id 0, always there), by id
        self.process_sets: dict = {}
        self.dynamic = False
        self.prev_excepthook = None
        self.timeline = None    # TimelineWriter on rank 0 while a timeline is written
        self.autotuner = None   # Autotuner thread on rank 0 under FUSE_AUTOTUNE
        # elastic: the rendezvous generation this process last joined (the driver's number)
        self.rendezvous_generation = -1
        # how many engines init() has started in this process: a re-formed job has a new
        # number, which is how the layers above know to drop what the old engine held
        self.engine_generation = 0
        self.last_failure: str | None = None    # the engine's failure at the last shutdown
        self.last_lost: list[int] = []          # ... the rank found unanswering that caused it
        # every rank's probe address (fuse.worker.peer_probe) in the job last formed, by rank
        self.peer_addresses: list = []
        # a forked child: the pid of the parent whose running engine it inherited (see
        # _forget_inherited_engine); None otherwise
        self.forked_from: int | None = None

    def install(self, engine, config: Config, backend) -> None:
        """init(): the new engine runs; the job is (re-)formed."""
        self.engine, self.config, self.backend = engine, config, backend
        self.engine_generation += 1
        self.process_sets = {}


job = JobState()


def _never_finalise(obj) -> None:
    """Keep ``obj`` alive for the rest of this process, interpreter exit included: an extra
    reference no module teardown drops."""
    import ctypes
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _forget_inherited_engine() -> None:
    """In a child forked after init(): the engine's thread did not come along, and its
    connections belong to the parent, so the child must not use them (a collective would
    block, or worse, run over the parent's connections).  The child starts uninitialised;
    its first fuse call says why (see require), and init() makes a job of its own."""
    job.lock = threading.RLock()     # another thread of the parent may have held it
    if job.engine is None:
        return
    # Never finalised here: its sockets and segments are the parent's, and its threads did not
    # come along (freeing a Gloo context joins a loop thread this process does not have;
    # shutting the engine down would say goodbye on the parent's behalf).
    for obj in (job.engine, job.backend, job.timeline, job.autotuner):
        if obj is not None:
            _never_finalise(obj)
    job.engine = job.backend = job.timeline = job.autotuner = None
    job.config = None
    job.process_sets = {}
    job.forked_from = os.getppid()


os.register_at_fork(after_in_child=_forget_inherited_engine)


def require():
    """The running engine; ValueError before init(), after shutdown() and in a child forked
    after init()."""
    engine = job.engine
    if engine is None:
        if job.forked_from is not None:
            raise ValueError(
                f"fuse was initialized in process {job.forked_from}, which forked this "
                f"process ({os.getpid()}); a forked child cannot use its parent's job: call "
                "fuse.init() in the child (a job of its own), or fork before fuse.init()")
        raise ValueError("fuse has not been initialized; call fuse.init() first "
                         "(or this rank has shut down)")
    return engine


def is_initialized() -> bool:
    return job.engine is not None


def config() -> Config:
    require()
    assert job.config is not None
    return job.config


def rank() -> int:
    return config().rank


def size() -> int:
    return config().size


def engine():
    """The running engine (for the collective layer and framework adapters)."""
    return require()


def last_config() -> Config | None:
    """The configuration of the job this process last ran, still there after shutdown()
    (None before the first init()): what a task wrapper reads once the function returned."""
    return job.config


def backend():
    """The running backend (None before init() or after shutdown())."""
    return job.backend


def rendezvous_generation() -> int:
    """Elastic: the driver's generation this process last joined (-1 before any)."""
    return job.rendezvous_generation


def engine_generation() -> int:
    """How many engines init() has started in this process: it changes exactly when the job
    is re-formed (shutdown() then init()), so a layer that keeps per-engine state (the torch
    optimizer's handles and gradient layout) compares it instead of the engine's identity."""
    return job.engine_generation


def registered_process_set(pid: int):
    """The process set registered under ``pid`` (not the global one), or None."""
    return job.process_sets.get(pid)


def last_failure() -> str | None:
    """The engine's failure at the last shutdown (None if it stopped cleanly)."""
    return job.last_failure
