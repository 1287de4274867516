"""fuse.worker.peer_probe: a peer whose listener accepts, or whose host refuses the connection
(its process is gone), is reachable; one that never answers the handshake is not.  Real
sockets."""

import socket

from fuse.worker import peer_probe


def test_reachable_refused_and_cut_peers():
    me = peer_probe.listen("127.0.0.1")
    assert peer_probe.listen("127.0.0.1") == me          # one listener per process
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()                          # bound, not listening: refused
    # a listener that never accepts, its queue full: the kernel drops further handshakes, as a
    # cut link would (no answer at all)
    silent = socket.create_server(("127.0.0.1", 0), backlog=0)
    held = []
    try:
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(silent.getsockname())
            held.append(c)
        addresses = [me, me, closed, silent.getsockname(), None]
        assert peer_probe.unreachable(addresses, me=0, timeout=0.5) == [3]
        assert peer_probe.unreachable(addresses, me=0, skip=[3], timeout=0.5) == []
    finally:
        for c in held:
            c.close()
        silent.close()
