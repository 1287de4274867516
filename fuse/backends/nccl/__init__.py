"""The NCCL backend: collectives on CUDA device buffers, through CuPy's NCCL binding.

A :class:`~fuse.backends.base.DeviceBackend`, chosen with ``FUSE_GPU_BACKEND=nccl`` (the
default) and used by :mod:`fuse.job.device_path` for CUDA tensors; CPU tensors keep the CPU
backend (Gloo or MPI).  One communicator per process set and device, made from a unique id that
group rank 0 draws and the others receive through fuse's CPU collectives.  Every call is only
enqueued on the device stream it is given; nothing here waits for the device.

NCCL has no allgatherv or alltoallv: allgatherv is an allgather when every member sends as many
elements (the usual case), else one broadcast per member; alltoallv is a send and a receive per
peer; all of them inside one NCCL group.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

from fuse.backends.base import DeviceBackend, DeviceGroup
from fuse.backends.nccl.library import cupy_modules, unavailable_reason

_DTYPE_NAMES = {    # fuse wire type -> attribute of cupy.cuda.nccl
    "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "bool": "NCCL_UINT8",
    "int32": "NCCL_INT32", "uint32": "NCCL_UINT32", "int64": "NCCL_INT64",
    "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64", "bfloat16": "NCCL_BFLOAT16",
}
_OP_NAMES = {"sum": "NCCL_SUM", "product": "NCCL_PROD", "min": "NCCL_MIN", "max": "NCCL_MAX"}


def _constant(nccl, table, key, what):
    attr = table.get(key)
    value = getattr(nccl, attr, None) if attr else None
    if value is None:
        raise ValueError(f"NCCL does not support {what} {key!r} (supported: "
                         f"{', '.join(k for k, a in table.items() if hasattr(nccl, a))})")
    return value


class NCCLGroup(DeviceGroup):
    """One NCCL communicator: the members of a process set on one device each."""

    def __init__(self, nccl, comm, rank: int, size: int):
        self._nccl, self._comm = nccl, comm
        self.rank, self.size = rank, size

    def _dtype(self, dtype):
        return _constant(self._nccl, _DTYPE_NAMES, dtype, "dtype")

    def allreduce(self, sendbuf, recvbuf, dtype, op, stream):
        self._comm.allReduce(sendbuf.data.ptr, recvbuf.data.ptr, sendbuf.size,
                             self._dtype(dtype), _constant(self._nccl, _OP_NAMES, op, "op"),
                             stream.ptr)

    def allgatherv(self, sendbuf, recvbuf, counts, dtype, stream):
        dt = self._dtype(dtype)
        if len(set(counts)) == 1:
            self._comm.allGather(sendbuf.data.ptr, recvbuf.data.ptr, counts[0], dt, stream.ptr)
            return
        self.group_start()
        try:
            offset = 0
            for member, n in enumerate(counts):
                target = recvbuf[offset:offset + n]
                source = sendbuf if member == self.rank else target
                if n:
                    self._comm.broadcast(source.data.ptr, target.data.ptr, n, dt, member,
                                         stream.ptr)
                offset += n
        finally:
            self.group_end()

    def broadcast(self, buf, root, dtype, stream):
        self._comm.broadcast(buf.data.ptr, buf.data.ptr, buf.size, self._dtype(dtype), root,
                             stream.ptr)

    def alltoallv(self, sendbuf, sendcounts, recvbuf, recvcounts, dtype, stream):
        dt = self._dtype(dtype)
        self.group_start()
        try:
            send_at = recv_at = 0
            for peer in range(self.size):
                s, r = sendcounts[peer], recvcounts[peer]
                if s:
                    self._comm.send(sendbuf[send_at:send_at + s].data.ptr, s, dt, peer,
                                    stream.ptr)
                if r:
                    self._comm.recv(recvbuf[recv_at:recv_at + r].data.ptr, r, dt, peer,
                                    stream.ptr)
                send_at += s
                recv_at += r
        finally:
            self.group_end()

    def reducescatter(self, sendbuf, recvbuf, recvcounts, dtype, op, stream):
        if len(set(recvcounts)) == 1:
            self._comm.reduceScatter(sendbuf.data.ptr, recvbuf.data.ptr, recvcounts[0],
                                     self._dtype(dtype),
                                     _constant(self._nccl, _OP_NAMES, op, "op"), stream.ptr)
            return
        # uneven blocks (dim 0 not divisible by the set size): reduce everything in place,
        # then this member's block is a device-to-device copy on the same stream
        self.allreduce(sendbuf, sendbuf, dtype, op, stream)
        start = sum(recvcounts[:self.rank])
        n = recvcounts[self.rank]
        with stream:
            recvbuf[:n] = sendbuf[start:start + n]

    def group_start(self):
        self._nccl.groupStart()

    def group_end(self):
        self._nccl.groupEnd()

    def close(self):
        comm, self._comm = self._comm, None
        if comm is not None:
            comm.destroy()


class NCCLBackend(DeviceBackend):
    name: ClassVar[str] = "nccl"

    @classmethod
    def is_available(cls):
        why = unavailable_reason()
        return (not why), why

    @classmethod
    def built(cls) -> int:
        try:
            _cupy, nccl = cupy_modules()
            return int(nccl.get_version())
        except Exception:   # no CuPy, no libnccl: NCCL is not built here, which is the answer
            return 0

    def __init__(self, config=None):
        self._cupy, self._nccl = cupy_modules()
        self._streams: dict[int, object] = {}
        self._external: dict[tuple[int, int], object] = {}   # framework streams, by pointer
        self._groups: list[NCCLGroup] = []

    def create_group(self, rank: int, size: int, device: int, exchange) -> NCCLGroup:
        # only rank 0 draws the id (drawing one starts NCCL's bootstrap listener)
        uid = exchange(bytes(b % 256 for b in self._nccl.get_unique_id())
                       if rank == 0 else None)
        with self._cupy.cuda.Device(device):
            try:        # CuPy 14 takes the id as bytes
                comm = self._nccl.NcclCommunicator(size, uid, rank)
            except TypeError:   # older CuPy: the tuple of signed chars it gave
                comm = self._nccl.NcclCommunicator(
                    size, tuple(b - 256 if b > 127 else b for b in uid), rank)
        group = NCCLGroup(self._nccl, comm, rank, size)
        self._groups.append(group)
        return group

    def use_device(self, device: int):
        return self._cupy.cuda.Device(device)

    def stream(self, device: int):
        s = self._streams.get(device)
        if s is None:
            with self._cupy.cuda.Device(device):
                s = self._streams[device] = self._cupy.cuda.Stream(non_blocking=True)
        return s

    def external_stream(self, ptr: int, device: int):
        key = (ptr, device)
        s = self._external.get(key)
        if s is None:
            # CuPy 14 deprecates ExternalStream for Stream.from_external, which wants an
            # object speaking the CUDA stream protocol; a bare pointer is what torch gives
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                s = self._external[key] = self._cupy.cuda.ExternalStream(ptr, device)
        return s

    def new_event(self, device: int):
        with self._cupy.cuda.Device(device):
            return self._cupy.cuda.Event(disable_timing=True)

    def from_dlpack(self, obj):
        # cupy.from_dlpack takes any __dlpack__ exporter; asarray reads
        # __cuda_array_interface__ (both share the memory)
        if hasattr(obj, "__dlpack__"):
            return self._cupy.from_dlpack(obj)
        return self._cupy.asarray(obj)

    def empty(self, count: int, dtype: str, device: int):
        with self._cupy.cuda.Device(device):
            return self._cupy.empty(count, dtype="uint16" if dtype == "bfloat16" else
                                    ("uint8" if dtype == "bool" else dtype))

    def close(self):
        groups, self._groups = self._groups, []
        for g in groups:
            g.close()


__all__ = ["NCCLBackend", "NCCLGroup"]
