"""PyglooBackend: fuse's backend contract (``fuse.backends.base``) over pygloo.

Everything here uses what fuse hands any backend: the :class:`fuse.config.Config` given to
the constructor (ranks, rendezvous address, timeout, interface) and the launcher's store
(:func:`fuse.cluster.store.store_from_config`).  Each group is one
``pygloo.rendezvous.Context`` connected through that store (:mod:`fuse_pygloo.store`), its
keys under ``pygloo/<epoch>/g<group_id>/``.
"""

from __future__ import annotations

import itertools
import socket

from fuse.backends.base import ConnectingBackend
from fuse.backends.peer_proof import prove_peers
from fuse.cluster.hosts import route_source_address
from fuse.cluster.store import secret_from_env, store_from_config
from fuse_pygloo.dtypes import BACKEND
from fuse_pygloo.group import PyglooError, PyglooGroup
from fuse_pygloo.store import StoreBridge

__version__ = "0.1.0"

# Counts backends made in this process: part of every key, so that a second fuse.init() of the
# same job does not read the addresses the first one published (an elastic job's ranks
# re-initialise different numbers of times and use the driver's generation instead).
_epochs = itertools.count()


def _import_pygloo():
    import pygloo
    return pygloo


def device_attr(pygloo, config):
    """The TCP attributes of this process's Gloo device: ``FUSE_GLOO_IFACE`` when set, else
    the local address that routes to the rendezvous server, else 127.0.0.1 for a job on one
    host."""
    attr = pygloo.transport.tcp.attr()
    if config.gloo_iface:
        attr.iface = config.gloo_iface
        return attr
    if config.rendezvous_addr:
        try:
            attr.hostname = route_source_address(config.rendezvous_addr,
                                                 config.rendezvous_port, socket.AF_UNSPEC)
            return attr
        except OSError:
            pass
    if config.cross_size > 1:
        raise PyglooError(f"{BACKEND} backend: cannot tell which address the other hosts reach "
                          "this one on; set FUSE_GLOO_IFACE to the interface to use (e.g. eth0)")
    attr.hostname = "127.0.0.1"
    return attr


class PyglooBackend(ConnectingBackend):
    """fuse over pygloo; ``PyglooBackend(config)`` connects the world.

    ``store`` overrides the rendezvous store from ``config`` (tests)."""

    name = BACKEND

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        try:
            _import_pygloo()
        except ImportError as err:
            return False, (f"pygloo does not import ({err}); pygloo ships a wheel for CPython "
                           "3.10 on Linux x86_64 only")
        return True, ""

    @classmethod
    def version(cls) -> str:
        from importlib import metadata

        try:
            return metadata.version("pygloo")
        except metadata.PackageNotFoundError:
            return "unknown"

    def __init__(self, config, store=None) -> None:
        self._pg = _import_pygloo()
        self.rank, self.size = int(config.rank), int(config.size)
        self.timeout = float(config.gloo_timeout_seconds)
        self._store = store if store is not None else store_from_config(config)
        if self.size > 1 and self._store is None:
            raise PyglooError(
                f"{BACKEND} backend: rank {self.rank} of {self.size} has no rendezvous store; "
                "start the job with fuserun, or set FUSE_RENDEZVOUS_DIR to a directory all "
                "workers share")
        self._device = None
        if self.size > 1:
            self._device = self._pg.transport.tcp.CreateDevice(device_attr(self._pg, config))
        generation = getattr(config, "rendezvous_generation", -1)
        self._prefix = (f"pygloo/{next(_epochs)}/" if generation < 0
                        else f"pygloo/elastic{generation}/")
        self.groups: dict[int, PyglooGroup] = {}
        self.world = self.connect(list(range(self.size)), 0)

    def connect(self, ranks: list[int], group_id: int) -> PyglooGroup:
        label = "the world" if group_id == 0 else f"process set {group_id}"
        prefix = f"{self._prefix}g{group_id}/"
        context = None
        if len(ranks) > 1:
            context = self._pg.rendezvous.Context(ranks.index(self.rank), len(ranks))
            bridge = StoreBridge(self._store, prefix, self.timeout)
            try:
                context.connectFullMesh(self._pg.rendezvous.CustomStore(bridge), self._device)
            except (RuntimeError, TimeoutError) as err:
                raise PyglooError(f"{BACKEND} backend: rank {self.rank} could not connect to "
                                  f"{label} (ranks {ranks}): {err}") from err
        group = PyglooGroup(self._pg, context, ranks, self.rank, label)
        self.groups[group_id] = group
        # Gloo's listeners take any connection that sends the right four bytes: before the
        # job's data travels, every pair proves the job's secret on its own connection.
        prove_peers(group, ranks, self.rank, prefix, secret_from_env(), backend=BACKEND,
                    error=PyglooError, transport_errors=(PyglooError,))
        return group

    def close(self) -> None:
        super().close()
        self._device = None
