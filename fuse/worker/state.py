"""The running job as this process knows it: the engine, the configuration, the backend and the
registered process sets.

``fuse.worker.lifecycle`` (init, shutdown) writes it; the collective layer and the process sets
read it.  It imports nothing of fuse's above ``fuse.config``, so every module may import it:
this is what keeps basics, collectives and process_sets from importing each other in a circle.
"""

from __future__ import annotations

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


_state = _State()


def require():
    """The running engine; ValueError before init() or after shutdown()."""
    engine = _state.engine
    if engine is None:
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
