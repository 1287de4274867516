"""A worker asks the name service for the launcher's store once per process: every later store
client, and every reconnect, reuses the answer (a container platform's DNS stops answering for
seconds while pods come and go, which is when an elastic job re-forms).  The store is a real
server on loopback, reached by name; the name service is the real one, counted."""

from __future__ import annotations

import socket

import pytest

from fuse.cluster import hosts
from fuse.cluster.store import HTTPStore, KVStoreServer

pytestmark = pytest.mark.timeout(60)


def test_the_stores_name_is_looked_up_once_per_process(monkeypatch):
    server = KVStoreServer("127.0.0.1", 0, secret=b"job").start()
    hosts.resolve.cache_clear()
    asked = []
    lookup = socket.getaddrinfo

    def counted(host, *args, **kwargs):
        asked.append(host)
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    try:
        for n in range(3):      # a store client per re-form, as the rendezvous makes
            store = HTTPStore("localhost", server.port, secret=b"job", timeout=5, attempts=2)
            store.set(f"k{n}", b"v")
            store._local.conn.close()       # as after a dropped keep-alive: it reconnects
            assert store.try_get(f"k{n}") == b"v"
    finally:
        server.stop()
        hosts.resolve.cache_clear()
    assert asked == ["localhost"]
