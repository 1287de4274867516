"""fuse_kvbackend: a fuse communication backend shipped as a separate package.

It shows everything a third party needs: a :class:`fuse.backends.base.Backend` subclass, and one
entry point in this package's ``pyproject.toml``::

    [project.entry-points."fuse.backends"]
    kv = "fuse_kvbackend:KVBackend"

After ``pip install``, ``FUSE_BACKEND=kv fuserun -np 2 python train.py`` uses it.

Data moves through the launcher's rendezvous store (``fuse.cluster.store``): in every collective
each member writes its part under ``fuse_kv/<group>/<seq>/<rank>`` (``<seq>`` counts the group's
collectives) and polls for the other members' keys.  It is slow (every byte crosses HTTP) but
real, and it needs nothing beyond numpy.  Every member writes at least one key in every
collective, so once a member has read all keys of collective ``n`` every member has finished
collective ``n - 1``; that is when it deletes its own keys of ``n - 1``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Sequence

import numpy as np

from fuse.backends.base import Backend, Group, dtype_name_to_numpy
from fuse.cluster.store import store_from_config

__version__ = "0.1.0"

ROOT = "fuse_kv/"

_OPS = {
    "sum": np.add,
    "min": np.minimum,
    "max": np.maximum,
    "product": np.multiply,
}


def is_available() -> bool:
    """Pure Python over the rendezvous store: usable wherever fuse itself is."""
    return True


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 (as uint16) to float32: the bfloat16 bits are the high half of a float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 bits (uint16), rounding to nearest even; NaN stays a quiet NaN."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        out[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return out


def reduce_parts(parts: Sequence[np.ndarray], dtype: str, op: str) -> np.ndarray:
    """Reduce equal-length arrays (in the wire dtype) in list order, so every member that reduces
    the same list gets the same bits.  bfloat16 and float16 are reduced in float32."""
    try:
        ufunc = _OPS[op]
    except KeyError:
        raise ValueError(f"kv backend: unknown reduction {op!r} "
                         f"(expected one of {', '.join(_OPS)})") from None
    if dtype == "bfloat16":
        acc = bf16_to_f32(parts[0]).copy()
        for part in parts[1:]:
            ufunc(acc, bf16_to_f32(part), out=acc)
        return f32_to_bf16(acc)
    if dtype == "float16":
        acc = parts[0].astype(np.float32)
        for part in parts[1:]:
            ufunc(acc, part.astype(np.float32), out=acc)
        return acc.astype(np.float16)
    acc = parts[0].copy()
    for part in parts[1:]:
        ufunc(acc, part, out=acc)
    return acc


class KVGroup(Group):
    """Members ``ranks`` (global ranks, sorted) of one process set, talking through ``store``."""

    def __init__(self, store, ranks: Sequence[int], global_rank: int, scope: str,
                 timeout: float):
        self.ranks = [int(r) for r in ranks]
        if global_rank not in self.ranks:
            raise ValueError(f"kv backend: rank {global_rank} is not a member of group "
                             f"{scope} (ranks {self.ranks})")
        self.rank = self.ranks.index(global_rank)
        self.size = len(self.ranks)
        self._store = store
        self._scope = scope
        self._timeout = timeout
        self._seq = 0
        self._own_keys: list[str] = []   # written in the previous collective, not yet deleted
        self._lock = threading.Lock()

    # -- the one communication pattern: publish, then collect from every other member --

    def _key(self, seq: int, name: str) -> str:
        return f"{ROOT}{self._scope}/{seq}/{name}"

    def _round(self, what: str, publish: dict[str, bytes],
               collect: dict[int, str]) -> dict[int, bytes]:
        """Write ``publish`` (name -> value) and read ``collect`` (member -> name) for the next
        collective; returns member -> value."""
        with self._lock:
            seq = self._seq
            self._seq += 1
            written = []
            for name, value in publish.items():
                key = self._key(seq, name)
                self._store.set(key, bytes(value))
                written.append(key)
            got = self._wait({m: self._key(seq, name) for m, name in collect.items()}, what, seq)
            self._forget(self._own_keys)
            self._own_keys = written
            return got

    def _wait(self, keys: dict[int, str], what: str, seq: int) -> dict[int, bytes]:
        got: dict[int, bytes] = {}
        pending = dict(keys)
        start = time.monotonic()
        next_error_check = start + 1.0
        delay = 0.0002
        while True:
            for member, key in list(pending.items()):
                value = self._store.try_get(key)
                if value is not None:
                    got[member] = value
                    del pending[member]
            if not pending:
                return got
            now = time.monotonic()
            missing = [self.ranks[m] for m in sorted(pending)]
            if now >= next_error_check:  # a worker that died may have left its error behind
                next_error_check = now + 1.0
                for r in missing:
                    err = self._store.try_get(f"errors/{r}")
                    if err is not None:
                        raise RuntimeError(
                            f"kv backend: {what} (group {self._scope}, collective #{seq}) "
                            f"cannot complete: rank {r} failed: "
                            f"{err.decode('utf-8', 'replace')}")
            if now - start >= self._timeout:
                raise TimeoutError(
                    f"kv backend: {what} (group {self._scope}, collective #{seq}) got nothing "
                    f"from rank(s) {missing} within {self._timeout:g} s "
                    "(FUSE_KV_TIMEOUT_SECONDS, default FUSE_GLOO_TIMEOUT_SECONDS)")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _forget(self, keys: list[str]) -> None:
        delete = getattr(self._store, "delete", None)
        if delete is None:
            return
        for key in keys:
            try:
                delete(key)
            except Exception:  # cleanup is best effort; the job must not fail for it
                pass

    def _allgather_bytes(self, data: bytes, what: str) -> list[bytes]:
        """Every member's ``data``, in member order."""
        if self.size == 1:
            return [bytes(data)]
        me = str(self.rank)
        others = {m: str(m) for m in range(self.size) if m != self.rank}
        got = self._round(what, {me: data}, others)
        got[self.rank] = bytes(data)
        return [got[m] for m in range(self.size)]

    # -- the Group contract --

    def allreduce(self, buf: np.ndarray, dtype: str, op: str) -> None:
        if op not in _OPS:
            raise ValueError(f"kv backend: unknown reduction {op!r}")
        if self.size == 1:
            return
        wire = dtype_name_to_numpy(dtype)
        typed = buf if buf.dtype == wire else buf.view(wire)
        parts = self._allgather_bytes(typed.tobytes(), f"allreduce({dtype}, {op})")
        arrays = []
        for member, part in enumerate(parts):
            if len(part) != typed.nbytes:
                raise RuntimeError(
                    f"kv backend: allreduce size mismatch: rank {self.ranks[member]} sent "
                    f"{len(part)} bytes, rank {self.ranks[self.rank]} has {typed.nbytes}")
            arrays.append(np.frombuffer(part, dtype=wire))
        typed[...] = reduce_parts(arrays, dtype, op)

    def allgatherv(self, sendbuf: np.ndarray, recvbuf: np.ndarray,
                   recvbytes: Sequence[int]) -> None:
        sizes = [int(n) for n in recvbytes]
        if len(sizes) != self.size:
            raise ValueError(f"kv backend: allgatherv got {len(sizes)} sizes for a group of "
                             f"{self.size}")
        parts = self._allgather_bytes(np.ascontiguousarray(sendbuf).tobytes(), "allgatherv")
        out = recvbuf.view(np.uint8)
        if out.nbytes < sum(sizes):
            raise ValueError(f"kv backend: allgatherv receive buffer holds {out.nbytes} bytes, "
                             f"needs {sum(sizes)}")
        offset = 0
        for member, (part, n) in enumerate(zip(parts, sizes)):
            if len(part) != n:
                raise RuntimeError(f"kv backend: allgatherv: rank {self.ranks[member]} sent "
                                   f"{len(part)} bytes, {n} expected")
            out[offset:offset + n] = np.frombuffer(part, dtype=np.uint8)
            offset += n

    def broadcast(self, buf: np.ndarray, root: int) -> None:
        if not 0 <= root < self.size:
            raise ValueError(f"kv backend: broadcast root {root} outside group of {self.size}")
        if self.size == 1:
            return
        out = buf.view(np.uint8)
        # Non-roots publish an empty acknowledgement so that every member hears from every
        # other one in every collective (what makes deleting old keys safe).
        mine = out.tobytes() if self.rank == root else b""
        parts = self._allgather_bytes(mine, f"broadcast(root {self.ranks[root]})")
        if self.rank != root:
            data = parts[root]
            if len(data) != out.nbytes:
                raise RuntimeError(f"kv backend: broadcast: root rank {self.ranks[root]} sent "
                                   f"{len(data)} bytes, rank {self.ranks[self.rank]} expects "
                                   f"{out.nbytes}")
            out[...] = np.frombuffer(data, dtype=np.uint8)

    def alltoallv(self, sendbuf: np.ndarray, sendbytes: Sequence[int], recvbuf: np.ndarray,
                  recvbytes: Sequence[int]) -> None:
        send = [int(n) for n in sendbytes]
        recv = [int(n) for n in recvbytes]
        if len(send) != self.size or len(recv) != self.size:
            raise ValueError(f"kv backend: alltoallv needs {self.size} send and receive sizes")
        src = np.ascontiguousarray(sendbuf).view(np.uint8)
        out = recvbuf.view(np.uint8)
        send_off = np.concatenate(([0], np.cumsum(send))).astype(int)
        recv_off = np.concatenate(([0], np.cumsum(recv))).astype(int)
        if src.nbytes < send_off[-1] or out.nbytes < recv_off[-1]:
            raise ValueError("kv backend: alltoallv buffers are smaller than the sizes given")
        me = self.rank
        own = src[send_off[me]:send_off[me + 1]]
        if len(own) != recv[me]:
            raise RuntimeError(f"kv backend: alltoallv: rank {self.ranks[me]} sends itself "
                               f"{len(own)} bytes but expects {recv[me]}")
        if self.size > 1:
            publish = {f"{me}>{d}": src[send_off[d]:send_off[d + 1]].tobytes()
                       for d in range(self.size) if d != me}
            collect = {s: f"{s}>{me}" for s in range(self.size) if s != me}
            got = self._round("alltoallv", publish, collect)
            for s, data in got.items():
                if len(data) != recv[s]:
                    raise RuntimeError(f"kv backend: alltoallv: rank {self.ranks[s]} sent "
                                       f"{len(data)} bytes, {recv[s]} expected")
                out[recv_off[s]:recv_off[s + 1]] = np.frombuffer(data, dtype=np.uint8)
        out[recv_off[me]:recv_off[me + 1]] = own

    def barrier(self) -> None:
        self._allgather_bytes(b"", "barrier")

    def close(self) -> None:
        """Nothing to release.  The keys of the last collective stay: a slower member may still
        be reading them."""


class KVBackend(Backend):
    """Backend whose every collective goes through the launcher's rendezvous store."""

    name = "kv"

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        return (True, "") if is_available() else (False, "kv backend disabled")

    @classmethod
    def version(cls) -> str:
        return __version__

    def __init__(self, config) -> None:
        self.rank = int(config.rank)
        self.size = int(config.size)
        self.timeout = float(os.environ.get("FUSE_KV_TIMEOUT_SECONDS",
                                            config.gloo_timeout_seconds))
        self.store = store_from_config(config)
        if self.store is None and self.size > 1:
            raise RuntimeError(
                "kv backend: no rendezvous store; start the job with fuserun, or point "
                "FUSE_RENDEZVOUS_DIR at a directory every worker can reach")
        self._world = KVGroup(self.store, range(self.size), self.rank, "exchange", self.timeout)

    def exchange(self, data: bytes) -> list[bytes]:
        return self._world._allgather_bytes(bytes(data), "exchange")

    def create_group(self, ranks: Sequence[int], group_id: int) -> KVGroup:
        return KVGroup(self.store, sorted(int(r) for r in ranks), self.rank, f"g{int(group_id)}",
                       self.timeout)

    def close(self) -> None:
        self._world.close()
