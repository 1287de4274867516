"""The control channel's start-up handshake on real loopback sockets: only connections that
prove the job's key become ranks; intruders that connect first, claim a rank, stay silent or
send garbage are refused one line each and cannot hold up or replace the real ranks."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from fuse.worker import control_handshake as hs

pytestmark = pytest.mark.timeout(60)


def _listener():
    return socket.create_server(("127.0.0.1", 0), backlog=128)


def _rank_0(listener, size, key, timeout=20.0):
    """Run rank 0's accept in a thread; returns (thread, result dict, report lines)."""
    out, lines = {}, []

    def run():
        try:
            out["fds"] = hs.accept_ranks(listener, size, key, timeout, lines.append)
        except BaseException as err:
            out["error"] = err
    t = threading.Thread(target=run)
    t.start()
    return t, out, lines


def _peer_of(fd):
    s = socket.socket(fileno=fd)
    try:
        return s.getpeername()
    finally:
        s.detach()


def test_real_ranks_join_after_intruders_that_came_first():
    key = hs.make_key()
    listener = _listener()
    addr = listener.getsockname()
    t, out, lines = _rank_0(listener, 3, key)
    # intruders, each before the real ranks: a rank number without proof (the old protocol),
    # a wrong proof, a silent connection, garbage, and a bogus rank
    plain = socket.create_connection(addr)
    plain.recv(hs.NONCE_BYTES)
    plain.sendall(struct.pack("<i", 1) + bytes(32))
    wrong = socket.create_connection(addr)
    nonce = wrong.recv(hs.NONCE_BYTES)
    wrong.sendall(struct.pack("<i", 2) + hs.proof(hs.make_key(), nonce, 2))
    silent = socket.create_connection(addr)
    garbage = socket.create_connection(addr)
    garbage.sendall(b"GET / HTTP/1.0\r\n\r\n" * 3)
    try:
        garbage.shutdown(socket.SHUT_WR)
    except OSError:     # rank 0 may have cut it off already (ENOTCONN): as it should
        pass
    bogus = socket.create_connection(addr)
    nonce = bogus.recv(hs.NONCE_BYTES)
    bogus.sendall(struct.pack("<i", 7) + hs.proof(key, nonce, 7))
    time.sleep(0.2)
    # the real ranks, while the silent intruder still holds its connection open
    t0 = time.monotonic()
    real = {r: hs.join_coordinator(addr, r, key, 10.0) for r in (2, 1)}
    t.join(30)
    assert "error" not in out, out.get("error")
    assert time.monotonic() - t0 < hs.HANDSHAKE_SECONDS    # the silent one held nobody up
    fds = out["fds"]
    assert fds[0] == -1
    for r in (1, 2):   # rank r's descriptor on rank 0 is the real rank r's connection
        mine = socket.socket(fileno=real[r])
        assert _peer_of(fds[r]) == mine.getsockname()
        mine.close()
        socket.socket(fileno=fds[r]).close()
    text = "\n".join(lines)
    assert "claims rank 1 without the job's control key" in text
    assert "claims rank 2 without the job's control key" in text
    assert "claims rank 7 of 3" in text
    assert "Traceback" not in text
    for s in (plain, wrong, silent, garbage, bogus):
        s.close()
    listener.close()


def test_a_silent_intruder_is_dropped_and_missing_ranks_are_named():
    key = hs.make_key()
    listener = _listener()
    silent = socket.create_connection(listener.getsockname())
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=r"ranks \[1\] did not connect to rank 0 within"):
        hs.accept_ranks(listener, 2, key, hs.HANDSHAKE_SECONDS + 1.0, lambda line: None)
    assert time.monotonic() - t0 < hs.HANDSHAKE_SECONDS + 5
    assert silent.recv(64)[:hs.NONCE_BYTES]          # it got a nonce, then was closed
    silent.close()
    listener.close()
