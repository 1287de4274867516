"""Which peers this worker can reach: what a failed collective blames when two workers lose
each other while both still reach rank 0.

Such a partition shows only in the backend: the control connections (a star around rank 0)
stay up, and a Gloo collective between the two fails with a timeout that names no peer.  So
every worker of a multi-rank job listens on a small TCP port of its own (one per process, kept
through an elastic job's re-formations), whose address it swaps with the others when it
connects the control channel; after a failed collective it tries to connect to each peer's.
A connect that times out, or that the network refuses (no route), means the path between the
two hosts is cut; one that is refused by the peer's host (its process is gone) or accepted is
not a partition.  The listener accepts and closes at once: it carries nothing.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

PROBE_TIMEOUT_S = 2.0       # a path that does not complete a TCP handshake in this is cut
_CUT_ERRNOS = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.EHOSTDOWN}

_listener: "_Listener | None" = None
_lock = threading.Lock()


class _Listener:
    def __init__(self, addr: str):
        self.sock = socket.create_server((addr, 0), backlog=128)
        self.address = (addr, self.sock.getsockname()[1])
        self.pid = os.getpid()      # a forked child starts its own (the thread stays behind)
        threading.Thread(target=self._serve, name="fuse-peer-probe", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return          # closed
            conn.close()


def listen(addr: str) -> tuple[str, int]:
    """This process's probe address on ``addr`` (the address its peers reach it at); the
    listener starts on the first call and stays for the process's life."""
    global _listener
    with _lock:
        if _listener is None or _listener.address[0] != addr or _listener.pid != os.getpid():
            if _listener is not None and _listener.pid == os.getpid():
                _listener.sock.close()
            _listener = _Listener(addr)
        return _listener.address


def _cut(address, timeout: float) -> bool:
    try:
        socket.create_connection(tuple(address), timeout=timeout).close()
    except socket.timeout:
        return True
    except OSError as err:
        return err.errno in _CUT_ERRNOS
    return False


def unreachable(addresses: list, me: int, skip=(), timeout: float = PROBE_TIMEOUT_S
                ) -> list[int]:
    """The ranks (indexes of ``addresses``, each a probe address or None) other than ``me``
    and ``skip`` whose host this process cannot reach: tried at once, within ``timeout``."""
    ranks = [r for r, a in enumerate(addresses) if a and r != me and r not in set(skip)]
    if not ranks:
        return []
    with ThreadPoolExecutor(max_workers=min(len(ranks), 32),
                            thread_name_prefix="fuse-probe") as pool:
        cut = list(pool.map(lambda r: _cut(addresses[r], timeout), ranks))
    return [r for r, c in zip(ranks, cut) if c]
