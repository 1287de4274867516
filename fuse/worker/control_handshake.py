"""Who may join the control channel: the start-up handshake between rank 0 and the others.

Rank 0 listens on a TCP port that any local user can find and connect to.  So a connection
counts only once it proves the job's control key: rank 0 sends a fresh nonce, the peer answers
with its rank and an HMAC of nonce and rank under the key.  The key is made by rank 0 and
travels with the listener's address through the backend's own exchange (Gloo or MPI
connections the job already trusts), so it works under any launcher.  A connection that says
nothing, says too little or proves nothing is closed and reported; it cannot hold up the real
ranks, take a rank's place, or fail the job.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import selectors
import socket
import struct
import time
from typing import Callable

__all__ = ["make_key", "proof", "accept_ranks", "join_coordinator"]

_MAGIC = b"fuse-control-v1"
NONCE_BYTES = 16
_ANSWER = struct.Struct("<i32s")        # rank, HMAC-SHA256
HANDSHAKE_SECONDS = 5.0                 # a peer that has not answered by then is dropped
_MAX_PENDING = 64                       # half-open handshakes at once; more are refused


def watch_peer(conn: socket.socket, peer_timeout: float) -> None:
    """Make the kernel notice a peer that stops answering, alive or not (its host down or cut
    off by the network), within about ``peer_timeout`` seconds, whatever the engine is doing:
    keep-alive probes while the connection is quiet, a limit on unacknowledged data while it is
    not.  The connection then fails with ETIMEDOUT, which the engine reports naming the rank
    (fuse.engine.channel).  Without this, a partition is noticed only by ssh's keep-alive, or
    never."""
    idle = max(1, int(peer_timeout / 3))
    probes = 4
    interval = max(1, int((peer_timeout - idle) / probes))
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                        ("TCP_KEEPCNT", probes),
                        ("TCP_USER_TIMEOUT", int(peer_timeout * 1000))):
        option = getattr(socket, name, None)
        if option is not None:      # Linux has them all; elsewhere the defaults stay
            conn.setsockopt(socket.IPPROTO_TCP, option, value)


def make_key() -> bytes:
    return secrets.token_bytes(32)


def proof(key: bytes, nonce: bytes, rank: int) -> bytes:
    return hmac.new(key, _MAGIC + nonce + struct.pack("<i", rank), hashlib.sha256).digest()


def accept_ranks(listener: socket.socket, size: int, key: bytes, timeout: float,
                 report: Callable[[str], None], peer_timeout: float = 15.0) -> list[int]:
    """Rank 0: accept one proven connection from each of ranks 1 .. size-1 within ``timeout``
    seconds; returns their file descriptors indexed by rank (-1 for rank 0).  Connections that
    fail the handshake are closed and passed to ``report`` in one line each."""
    fds = [-1] * size
    pending: dict[socket.socket, tuple[bytes, bytearray, float, str]] = {}
    sel = selectors.DefaultSelector()
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout

    def drop(conn: socket.socket, why: str) -> None:
        peer = pending.pop(conn)[3]
        sel.unregister(conn)
        conn.close()
        report(f"control channel: refused a connection from {peer}: {why}")

    try:
        while any(fd == -1 for fd in fds[1:]):
            now = time.monotonic()
            if now >= deadline:
                missing = [r for r in range(1, size) if fds[r] == -1]
                raise ConnectionError(f"ranks {missing} did not connect to rank 0 within "
                                      f"{timeout:g} s (FUSE_GLOO_TIMEOUT_SECONDS)")
            for conn in [c for c, p in pending.items() if p[2] <= now]:
                drop(conn, f"no answer within {HANDSHAKE_SECONDS:g} s")
            wake = min([deadline] + [p[2] for p in pending.values()])
            for skey, _ in sel.select(max(0.0, wake - now)):
                if skey.fileobj is listener:
                    _accept_one(listener, pending, sel, report)
                    continue
                conn = skey.fileobj
                nonce, got, _until, _peer = pending[conn]
                try:
                    data = conn.recv(_ANSWER.size - len(got))
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as err:
                    drop(conn, f"{err}")
                    continue
                if not data:
                    drop(conn, "closed before proving the job's control key")
                    continue
                got += data
                if len(got) < _ANSWER.size:
                    continue
                rank, mac = _ANSWER.unpack(bytes(got))
                if not 0 < rank < size:
                    drop(conn, f"claims rank {rank} of {size}")
                elif not hmac.compare_digest(mac, proof(key, nonce, rank)):
                    drop(conn, f"claims rank {rank} without the job's control key")
                elif fds[rank] != -1:
                    drop(conn, f"rank {rank} is connected already")
                else:
                    pending.pop(conn)
                    sel.unregister(conn)
                    conn.setblocking(True)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    watch_peer(conn, peer_timeout)
                    fds[rank] = conn.detach()
        return fds
    except BaseException:
        for fd in fds:
            if fd >= 0:
                socket.socket(fileno=fd).close()
        raise
    finally:
        for conn in list(pending):
            conn.close()
        sel.close()


def _accept_one(listener, pending, sel, report) -> None:
    try:
        conn, peer = listener.accept()
    except (BlockingIOError, InterruptedError):
        return
    if len(pending) >= _MAX_PENDING:
        conn.close()
        report(f"control channel: refused a connection from {peer[0]}: "
               f"{_MAX_PENDING} handshakes already open")
        return
    nonce = secrets.token_bytes(NONCE_BYTES)
    try:
        conn.setblocking(False)
        conn.send(nonce)            # 16 bytes into an empty socket buffer: never partial
    except OSError:
        conn.close()
        return
    pending[conn] = (nonce, bytearray(), time.monotonic() + HANDSHAKE_SECONDS, str(peer[0]))
    sel.register(conn, selectors.EVENT_READ)


def join_coordinator(addr: tuple[str, int], rank: int, key: bytes, timeout: float,
                     peer_timeout: float = 15.0) -> int:
    """Ranks > 0: connect to rank 0, prove the key, and return the connection's descriptor."""
    conn = socket.create_connection(addr, timeout=timeout)
    try:
        nonce = b""
        while len(nonce) < NONCE_BYTES:
            chunk = conn.recv(NONCE_BYTES - len(nonce))
            if not chunk:
                raise ConnectionError("rank 0 closed the control connection during start-up")
            nonce += chunk
        conn.sendall(_ANSWER.pack(rank, proof(key, nonce, rank)))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        watch_peer(conn, peer_timeout)
        conn.settimeout(None)
        return conn.detach()
    except BaseException:
        conn.close()
        raise
