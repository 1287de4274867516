"""The Gloo backend: fuse's default CPU backend, over Facebook's Gloo library (TCP transport).

Every collective runs with the GIL released, and each group hands the engine a native
``fuse.group_ops.v1`` table so that its background thread never needs the GIL.

Rendezvous uses the store the launcher gives every worker (:func:`fuse.cluster.store.store_from_config`):
each group publishes its TCP addresses under ``gloo/<epoch>/g<group_id>/<rank>``.  The network
address is ``FUSE_GLOO_IFACE`` when set; otherwise the local address that routes to the
rendezvous server (127.0.0.1 when the whole job runs on this host).
"""

from __future__ import annotations

import ipaddress
import itertools
import socket

from fuse.backends.base import ConnectingBackend, Group
from fuse.backends.gloo import connections
from fuse.backends.gloo.errors import GlooError
from fuse.backends.gloo.peer_proof import prove_peers
from fuse.backends.gloo.published_keys import PublishedKeys
from fuse.cluster.store import secret_from_env

__all__ = ["GlooBackend", "GlooError", "choose_address"]

# Counts GlooBackend instances in this process; part of every rendezvous key so that a second
# fuse.init() in the same job does not read the addresses the first one published.
_epochs = itertools.count()


def _import_native():
    from fuse.backends.gloo import _gloo
    return _gloo


def _route_to(host: str, port: int) -> str | None:
    """The local address the kernel would use to reach host:port (no packet is sent)."""
    from fuse.cluster.hosts import route_source_address

    try:
        return route_source_address(host, port, socket.AF_UNSPEC)
    except OSError:
        return None


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def choose_address(config) -> tuple[str, str]:
    """(hostname, iface) for this process's Gloo device; exactly one is non-empty.

    ``FUSE_GLOO_IFACE`` wins.  Otherwise: the address that routes to the rendezvous server; for a
    job on one host, 127.0.0.1; for a multi-host job without a server, the address of the
    default route.
    """
    if config.gloo_iface:
        return "", config.gloo_iface
    multi_host = config.cross_size > 1
    if config.rendezvous_addr:
        addr = _route_to(config.rendezvous_addr, config.rendezvous_port)
        if addr and not (multi_host and _is_loopback(addr)):
            return addr, ""
    if not multi_host:
        return "127.0.0.1", ""
    addr = _route_to("192.0.2.1", 9)  # TEST-NET-1: only asks the routing table
    if addr and not _is_loopback(addr):
        return addr, ""
    raise GlooError("gloo: cannot tell which network address the other hosts reach this one "
                    "on; set FUSE_GLOO_IFACE to the interface to use (e.g. eth0)")


class GlooBackend(ConnectingBackend):
    """The Gloo backend; ``GlooBackend(config)`` connects the world.

    ``store`` overrides the rendezvous store from ``config`` (tests, embedding).
    """

    name = "gloo"

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        from fuse._build_info import GLOO_VERSION

        if not GLOO_VERSION:
            return False, ("this build of fuse has no gloo backend: Gloo was not found when it was "
                           "built (install libgloo-dev and rebuild, or install the fuse-dl wheel, "
                           "which carries Gloo)")
        try:
            _import_native()
        except ImportError as err:
            return False, f"the compiled module fuse.backends.gloo._gloo does not import: {err}"
        return True, ""

    def __init__(self, config, store=None) -> None:
        from fuse.cluster.store import store_from_config

        self._native = _import_native()
        self.rank, self.size = config.rank, config.size
        self.timeout = float(config.gloo_timeout_seconds)
        # Once connected, a collective waits for a peer's data no longer than the control
        # connection waits for its acknowledgements: a peer whose link to this rank is cut
        # (while both still reach rank 0) fails the collective within the peer timeout.
        self.collective_timeout = min(self.timeout, float(config.peer_timeout_seconds))
        self._store = store if store is not None else store_from_config(config)
        if self.size > 1 and self._store is None:
            raise GlooError(
                f"gloo: rank {self.rank} of {self.size} has no rendezvous store; start the job "
                "with fuserun, or set FUSE_RENDEZVOUS_DIR to a directory all workers share")
        self._device = None
        if self.size > 1:
            hostname, iface = choose_address(config)
            self._device = self._native.Device(hostname=hostname, iface=iface)
        # An elastic job's processes re-initialize different numbers of times: the driver's
        # generation, the same on every rank of one rendezvous, names the keys instead.
        generation = getattr(config, "rendezvous_generation", -1)
        self._prefix = (f"gloo/{next(_epochs)}/" if generation < 0
                        else f"gloo/elastic{generation}/")
        self.groups: dict[int, Group] = {}
        self._store_port = getattr(config, "rendezvous_port", None)
        self._connections: dict[int, list[tuple[int, int]]] = {}    # group id -> (fd, inode)
        self.world = self.connect(list(range(self.size)), 0)

    @property
    def address(self) -> str:
        """This process's Gloo endpoint, e.g. "[127.0.0.1]:0" (or "none" for one process)."""
        return str(self._device) if self._device is not None else "none"

    def connect(self, ranks: list[int], group_id: int) -> Group:
        prefix = f"{self._prefix}g{group_id}/"
        store = PublishedKeys(self._store) if len(ranks) > 1 else None
        before = connections.Snapshot() if store is not None else None
        context = self._native.GlooContext(
            self._device, ranks.index(self.rank), len(ranks), self.timeout, store, prefix)
        self.groups[group_id] = context
        if before is not None:
            self._connections[group_id] = before.new_connections(self._store_port)
        prove_peers(context, ranks, self.rank, prefix, secret_from_env())
        if store is not None:
            # Past this barrier every member has made its context, so has read our address;
            # a later process of this rank, counting its epochs from 0 again, must not find it
            # (see published_keys).
            context.barrier()
            store.drop()
            context.set_timeout(self.collective_timeout)
        return context

    def abort(self) -> None:
        for group_id in list(self._connections):
            connections.shut_down(self._connections.pop(group_id, []))

    def close(self) -> None:
        super().close()
        self._connections.clear()
        self._device = None


def _register() -> None:
    try:
        Group.register(_import_native().GlooContext)
    except ImportError:
        pass


_register()
