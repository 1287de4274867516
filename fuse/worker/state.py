"""The running job as this process knows it: the engine, the configuration, the backend and the
registered process sets.

``fuse.worker.lifecycle`` (init, shutdown) writes it; the collective layer and the process sets
read it.  It imports nothing of fuse's above ``fuse.config``, so every module may import it:
this is what keeps basics, collectives and process_sets from importing each other in a circle.
"""

from __future__ import annotations

import os
import threading

from fuse.config import Config


class _State:
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
        self.generation = -1    # elastic: the rendezvous generation this process last joined
        self.last_failure: str | None = None    # the engine's failure at the last shutdown
        # a forked child: the pid of the parent whose running engine it inherited (see
        # _forget_inherited_engine); None otherwise
        self.forked_from: int | None = None


_state = _State()

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
    _state.lock = threading.RLock()     # another thread of the parent may have held it
    if _state.engine is None:
        return
    # Never finalised here: its sockets and segments are the parent's, and its threads did not
    # come along (freeing a Gloo context joins a loop thread this process does not have;
    # shutting the engine down would say goodbye on the parent's behalf).
    for obj in (_state.engine, _state.backend, _state.timeline, _state.autotuner):
        if obj is not None:
            _never_finalise(obj)
    _state.engine = _state.backend = _state.timeline = _state.autotuner = None
    _state.config = None
    _state.process_sets = {}
    _state.forked_from = os.getppid()


os.register_at_fork(after_in_child=_forget_inherited_engine)


def require():
    """The running engine; ValueError before init(), after shutdown() and in a child forked
    after init()."""
    engine = _state.engine
    if engine is None:
        if _state.forked_from is not None:
            raise ValueError(
                f"fuse was initialized in process {_state.forked_from}, which forked this "
                f"process ({os.getpid()}); a forked child cannot use its parent's job: call "
                "fuse.init() in the child (a job of its own), or fork before fuse.init()")
        raise ValueError("fuse has not been initialized; call fuse.init() first "
                         "(or this rank has shut down)")
    return engine


def is_initialized() -> bool:
    return _state.engine is not None


def config() -> Config:
    require()
    assert _state.config is not None
    return _state.config


def rank() -> int:
    return config().rank


def size() -> int:
    return config().size


def engine():
    """The running engine (for the collective layer and framework adapters)."""
    return require()
