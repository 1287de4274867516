"""A worker's life: ``init()`` and ``shutdown()`` (:mod:`lifecycle`), the control handshake,
slow-worker checks and elastic re-forming (the State/run loop and a worker's side of the
elastic rendezvous).  Above the collectives, which it uses; the job's state it writes lives
below them, in :mod:`fuse.job`.  Imports nothing from ``fuse.frameworks`` or ``fuse.runner``."""
