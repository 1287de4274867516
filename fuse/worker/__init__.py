"""A worker's life: ``init()`` and ``shutdown()`` (:mod:`lifecycle`), the job's state, process
sets, the control handshake, and elastic re-forming (the State/run loop and a worker's side of
the elastic rendezvous).  Imports nothing from ``fuse.frameworks`` or ``fuse.runner``."""
