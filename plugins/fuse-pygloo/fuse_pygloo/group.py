"""One process set over a pygloo context: fuse's Group contract in pygloo's calls.

pygloo takes raw addresses (``ndarray.ctypes.data``) and element counts, and holds the GIL
for the whole of every call: while a collective runs, no other Python thread of the process
runs (see the README's plugin guide and bench/RESULTS.md for what that costs).

Where pygloo lacks what the contract asks:
- ``allgatherv``: pygloo's allgatherv is Gloo's allgather (every block the same size), so
  each member pads its block to the largest and the blocks are packed afterwards.
- ``alltoallv``: pygloo has no alltoall; members exchange blocks with blocking send/recv,
  pair by pair in one order every member follows (pair (i, j), i < j, sorted: the lower rank
  sends first), which cannot deadlock: the first unfinished pair always has both members at it.
- ``reducescatter``: the contract's default (allreduce, then keep one's own block).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fuse.backends.base import Group, dtype_name_to_numpy
from fuse_pygloo.dtypes import BACKEND, gloo_dtype, gloo_op


class PyglooError(RuntimeError):
    """A pygloo call failed (a peer died or timed out); the message names the group."""


def _ptr(buf: np.ndarray) -> int:
    if not buf.flags.c_contiguous:
        raise ValueError(f"{BACKEND} backend: buffers must be contiguous")
    return int(buf.ctypes.data)


class PyglooGroup(Group):
    """Members ``ranks`` (global ranks, sorted) connected by ``context``, a connected
    ``pygloo.rendezvous.Context`` (None for a group of one)."""

    def __init__(self, pygloo, context, ranks: Sequence[int], global_rank: int, label: str):
        self._pg = pygloo
        self._ctx = context
        self.ranks = [int(r) for r in ranks]
        self.rank = self.ranks.index(int(global_rank))
        self.size = len(self.ranks)
        self.label = label
        self._uint8 = pygloo.glooDataType_t.glooUint8

    def _call(self, what: str, fn, *args, **kwargs) -> None:
        try:
            fn(self._ctx, *args, **kwargs)
        except (RuntimeError, TypeError) as err:
            raise PyglooError(
                f"{BACKEND} backend: {what} on {self.label} (ranks {self.ranks}) failed on rank "
                f"{self.ranks[self.rank]}: {err}") from err

    def allreduce(self, buf: np.ndarray, dtype: str, op: str) -> None:
        kind = gloo_dtype(self._pg, dtype)
        reduce_op = gloo_op(self._pg, op)
        if self.size == 1 or buf.size == 0:
            return
        typed = buf.view(dtype_name_to_numpy(dtype))
        ptr = _ptr(typed)
        self._call(f"allreduce({dtype}, {op})", self._pg.allreduce, ptr, ptr, typed.size, kind,
                   reduce_op)

    def allgatherv(self, sendbuf: np.ndarray, recvbuf: np.ndarray,
                   recvbytes: Sequence[int]) -> None:
        sizes = [int(n) for n in recvbytes]
        if len(sizes) != self.size:
            raise ValueError(f"{BACKEND} backend: allgatherv got {len(sizes)} sizes for a "
                             f"group of {self.size}")
        send = np.ascontiguousarray(sendbuf).view(np.uint8).reshape(-1)
        out = recvbuf.view(np.uint8).reshape(-1)
        if send.nbytes != sizes[self.rank]:
            raise ValueError(f"{BACKEND} backend: allgatherv: rank {self.ranks[self.rank]} "
                             f"sends {send.nbytes} bytes, the sizes say {sizes[self.rank]}")
        if out.nbytes < sum(sizes):
            raise ValueError(f"{BACKEND} backend: allgatherv receive buffer holds {out.nbytes} "
                             f"bytes, needs {sum(sizes)}")
        if self.size == 1:
            out[:send.nbytes] = send
            return
        block = max(sizes)
        if block == 0:
            return
        if all(n == block for n in sizes):   # equal blocks: straight into recvbuf
            self._call("allgatherv", self._pg.allgather, _ptr(send), _ptr(out), block,
                       self._uint8)
            return
        padded = np.zeros(block, np.uint8)
        padded[:send.nbytes] = send
        gathered = np.empty(block * self.size, np.uint8)
        self._call("allgatherv", self._pg.allgather, _ptr(padded), _ptr(gathered), block,
                   self._uint8)
        offset = 0
        for member, n in enumerate(sizes):
            out[offset:offset + n] = gathered[member * block:member * block + n]
            offset += n

    def broadcast(self, buf: np.ndarray, root: int) -> None:
        if not 0 <= root < self.size:
            raise ValueError(f"{BACKEND} backend: broadcast root {root} outside a group of "
                             f"{self.size}")
        data = buf.view(np.uint8).reshape(-1)
        if self.size == 1 or data.nbytes == 0:
            return
        ptr = _ptr(data)
        self._call(f"broadcast(root {self.ranks[root]})", self._pg.broadcast, ptr, ptr,
                   data.nbytes, self._uint8, root)

    def alltoallv(self, sendbuf: np.ndarray, sendbytes: Sequence[int], recvbuf: np.ndarray,
                  recvbytes: Sequence[int]) -> None:
        send = [int(n) for n in sendbytes]
        recv = [int(n) for n in recvbytes]
        if len(send) != self.size or len(recv) != self.size:
            raise ValueError(f"{BACKEND} backend: alltoallv needs {self.size} send and receive "
                             "sizes")
        src = np.ascontiguousarray(sendbuf).view(np.uint8).reshape(-1)
        out = recvbuf.view(np.uint8).reshape(-1)
        send_off = np.concatenate(([0], np.cumsum(send))).astype(np.int64)
        recv_off = np.concatenate(([0], np.cumsum(recv))).astype(np.int64)
        if src.nbytes < send_off[-1] or out.nbytes < recv_off[-1]:
            raise ValueError(f"{BACKEND} backend: alltoallv buffers are smaller than the sizes "
                             "given")
        me = self.rank
        if send[me] != recv[me]:
            raise ValueError(f"{BACKEND} backend: alltoallv: rank {self.ranks[me]} sends "
                             f"itself {send[me]} bytes but expects {recv[me]}")
        out[recv_off[me]:recv_off[me + 1]] = src[send_off[me]:send_off[me + 1]]
        for low in range(self.size):
            for high in range(low + 1, self.size):
                if me not in (low, high):
                    continue
                peer = high if me == low else low
                steps = [self._send, self._recv] if me == low else [self._recv, self._send]
                for step in steps:
                    step(peer, src[send_off[peer]:send_off[peer + 1]],
                         out[recv_off[peer]:recv_off[peer + 1]])

    def _send(self, peer: int, block: np.ndarray, _unused: np.ndarray) -> None:
        if block.nbytes:
            self._call(f"alltoallv (send to rank {self.ranks[peer]})", self._pg.send,
                       _ptr(block), block.nbytes, self._uint8, peer)

    def _recv(self, peer: int, _unused: np.ndarray, block: np.ndarray) -> None:
        if block.nbytes:
            self._call(f"alltoallv (receive from rank {self.ranks[peer]})", self._pg.recv,
                       _ptr(block), block.nbytes, self._uint8, peer)

    def barrier(self) -> None:
        if self.size > 1:
            self._call("barrier", self._pg.barrier)

    def close(self) -> None:
        if self._ctx is not None:
            try:
                self._ctx.closeConnections()
            except RuntimeError:  # a peer already gone: nothing left to close
                pass
            self._ctx = None
