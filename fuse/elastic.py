"""Elastic training with the NumPy API: ``fuse.elastic.ObjectState`` and ``fuse.elastic.run``::

    state = fuse.elastic.ObjectState(epoch=0, weights=w)

    @fuse.elastic.run
    def train(state):
        ...
        state.commit()

See :mod:`fuse.worker.elastic` for the loop, and the documentation's Elastic training page for
the launcher.
"""

from __future__ import annotations

from fuse.worker.elastic import State, run, run_fn  # noqa: F401
from fuse.worker.elastic_handlers import ObjectState  # noqa: F401
from fuse.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401

__all__ = ["State", "ObjectState", "run", "run_fn", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
