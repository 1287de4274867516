"""``horovod.common``'s names (exceptions, util, process_sets, elastic), for scripts that import
them from there, and the surface every framework namespace shares (:mod:`surface`, with the
Horovod knobs fuse accepts but ignores).  The code behind them lives in ``fuse.worker`` and
``fuse.collectives``."""
