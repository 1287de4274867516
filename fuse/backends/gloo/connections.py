"""A Gloo group's TCP connections, found so that they can be shut down from outside Gloo.

A peer whose host or container vanished never closes its connections (no FIN or RST comes
from a network namespace that is gone): a collective waiting on it waits for the collective
timeout, holding the group's lock, and closing the group waits as long.  When the job gives
the group up (an elastic generation ends), ``shutdown()`` on this process's own end of each
connection makes Gloo's loop read end-of-file, as from a peer that closed it: the collective
fails at once and the group closes.

Gloo keeps its sockets to itself, so the group's are told apart by when they appeared: the
connected TCP sockets of this process that exist after the group connected and did not before,
less those to the rendezvous store (whose requests the connect makes).  Each is remembered with
its inode, so that a descriptor number Gloo closed and the process reused is left alone.
Linux only (``/proc/self/fd``); elsewhere nothing is found and a given-up group's collective
ends at its timeout as before.
"""

from __future__ import annotations

import os
import socket
import stat

FD_DIR = "/proc/self/fd"


def _sockets() -> dict[int, int]:
    """This process's socket descriptors: fd -> inode."""
    out = {}
    try:
        names = os.listdir(FD_DIR)
    except OSError:
        return out
    for name in names:
        try:
            fd = int(name)
            st = os.fstat(fd)
        except (ValueError, OSError):
            continue
        if stat.S_ISSOCK(st.st_mode):
            out[fd] = st.st_ino
    return out


def _peer_port(fd: int) -> int | None:
    """The remote port of TCP socket ``fd``, or None when it is not a connected TCP socket."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
            return None
        return s.getpeername()[1]
    except OSError:
        return None         # listening, or not connected
    finally:
        s.detach()


class Snapshot:
    """The sockets before a group connects; :meth:`new_connections` after it."""

    def __init__(self) -> None:
        self.before = _sockets()

    def new_connections(self, store_port: int | None) -> list[tuple[int, int]]:
        """(fd, inode) of the connected TCP sockets that appeared since, but those to
        ``store_port``."""
        out = []
        for fd, ino in _sockets().items():
            if self.before.get(fd) == ino:
                continue
            port = _peer_port(fd)
            if port is not None and port != store_port:
                out.append((fd, ino))
        return out


def shut_down(connections: list[tuple[int, int]]) -> None:
    """``shutdown(SHUT_RDWR)`` each connection that is still the socket it was; the descriptors
    stay Gloo's to close."""
    for fd, ino in connections:
        try:
            if os.fstat(fd).st_ino != ino:
                continue
            s = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            s.detach()
