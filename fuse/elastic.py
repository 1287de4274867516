"""Elastic training with the NumPy API: ``fuse.elastic.ObjectState`` and ``fuse.elastic.run``.

    state = fuse.elastic.ObjectState(epoch=0, weights=w)

    @fuse.elastic.run
    def train(state):
        ...
        state.commit()

See :mod:`fuse.worker.elastic` for the loop and the README's elastic section for the launcher.
"""

from __future__ import annotations

from fuse.worker import elastic as _elastic
from fuse.worker.elastic import State, run, run_fn  # noqa: F401
from fuse.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401

__all__ = ["State", "ObjectState", "run", "run_fn", "HorovodInternalError",
           "HostsUpdatedInterrupt"]


def _bcast_object(obj):
    from fuse.collectives import calls as collectives
    return collectives.broadcast_object(obj, 0, name="fuse.elastic.object_state")


def _get_rank():
    from fuse.worker import lifecycle
    return lifecycle.rank()


class ObjectState(_elastic.ObjectState):
    """Picklable attributes given as keyword arguments, broadcast with fuse's NumPy API."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=_bcast_object, get_rank=_get_rank, **kwargs)
