"""A stand-in for the small part of CuPy (and its NCCL binding) fuse uses: NOT a GPU.

There is no GPU on the machines the tests run on.  This module lets the device-path wiring run
anyway: "device" arrays are NumPy arrays (``FakeDeviceArray``, with ``.data.ptr``), streams and
events only record what is done to them, and the NCCL communicator moves bytes between the
worker processes through files in ``FUSE_FAKE_NCCL_DIR``.  Every stream, event and NCCL call is
appended to ``CALLS`` in order, so tests can check what was called and in which order.  A host
copy that fuse makes of a "device" array (``cupy.asnumpy``, ``.get()``, ``.tolist()``, or NumPy
reading it: ``np.asarray``, ``np.array``, any NumPy function, through ``__array__``) is recorded
in ``HOST_COPIES``; the tests' own reads of the results are not.

``install()`` puts it in ``sys.modules`` as ``cupy``, ``cupy.cuda`` and ``cupy.cuda.nccl``.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import pickle
import sys
import time
import types

import ml_dtypes
import numpy as np

CALLS: list[tuple] = []
HOST_COPIES: list[str] = []
_ids = itertools.count(1)
_streams: dict[int, str] = {}


# Modules a host copy passes through on its way from the code that asked for it: the traps
# themselves, and the libraries whose functions make the copy (np.asarray -> __array__).
_PASS_THROUGH = {"fake_cupy", "fake_torch_cuda", "numpy", "torch"}


def record_host_copy(what: str) -> None:
    """Record host copy ``what`` in HOST_COPIES when fuse asked for it (the nearest caller
    outside the traps, NumPy and torch is a module of fuse); a test reading its results back
    is not fuse's copy."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] not in _PASS_THROUGH:
            break
        frame = frame.f_back
    if frame is not None and module.split(".")[0] == "fuse":
        HOST_COPIES.append(what)


def _host(value):
    """The NumPy memory behind a "device" array (anything else as it is)."""
    return value._memory if isinstance(value, FakeDeviceArray) else value


class FakeDeviceArray:
    """A "device" array: NumPy memory behind the part of CuPy's ndarray that fuse uses (shape,
    dtype, sizes, ``.data.ptr``, slicing, ``view``, assignment).  Not an ndarray (nor does it
    export NumPy's array interface or a buffer), so NumPy reads it only through ``__array__``,
    which is a host copy, as with CuPy (which refuses the implicit conversion outright)."""

    __slots__ = ("_memory",)

    def __init__(self, memory: np.ndarray):
        self._memory = memory

    shape = property(lambda self: self._memory.shape)
    dtype = property(lambda self: self._memory.dtype)
    size = property(lambda self: self._memory.size)
    ndim = property(lambda self: self._memory.ndim)
    nbytes = property(lambda self: self._memory.nbytes)
    itemsize = property(lambda self: self._memory.itemsize)

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self._memory.ctypes.data)

    def __len__(self):
        return len(self._memory)

    def __getitem__(self, key):
        return FakeDeviceArray(np.asarray(self._memory[key]))

    def __setitem__(self, key, value):
        self._memory[key] = _host(value)

    def view(self, dtype):
        return FakeDeviceArray(self._memory.view(dtype))

    def reshape(self, *shape):
        return FakeDeviceArray(self._memory.reshape(*shape))

    def copy(self):
        return FakeDeviceArray(self._memory.copy())     # device to device

    def __imul__(self, factor):
        self._memory *= factor
        return self

    def get(self):
        record_host_copy("cupy.ndarray.get")
        return self._memory.copy()

    def tolist(self):
        record_host_copy("cupy.ndarray.tolist")
        return self._memory.tolist()

    def __array__(self, dtype=None, copy=None):
        record_host_copy("numpy reading a cupy.ndarray (__array__)")
        return self._memory.astype(dtype) if dtype is not None else self._memory.copy()

    def __repr__(self):
        return f"FakeDeviceArray({self._memory!r})"


def _wrap(array) -> FakeDeviceArray:
    return FakeDeviceArray(np.asarray(_host(array)))


def _stream_name(ptr: int) -> str:
    return _streams.get(ptr, f"unknown:{ptr}")


class Stream:
    def __init__(self, non_blocking=False, ptr=None, name=None):
        self.ptr = ptr if ptr is not None else 0x5000 + next(_ids)
        self.name = name or f"stream{self.ptr:x}"
        _streams[self.ptr] = self.name
        CALLS.append(("Stream", self.name))

    def wait_event(self, event):
        CALLS.append(("wait_event", self.name, event.id))

    def __enter__(self):
        CALLS.append(("use_stream", self.name))
        return self

    def __exit__(self, *exc):
        CALLS.append(("end_stream", self.name))


class ExternalStream(Stream):
    def __init__(self, ptr, device_id=-1):
        self.ptr, self.name = ptr, f"external:{ptr}"
        _streams[ptr] = self.name


class Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.id = next(_ids)

    def record(self, stream=None):
        CALLS.append(("record", self.id, stream.name if stream is not None else "null"))

    def synchronize(self):      # a host wait: the device path must never call it
        CALLS.append(("HOST_SYNC", self.id))


class Device:
    def __init__(self, index=0):
        self.id = index

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def from_dlpack(obj):
    return _wrap(np.from_dlpack(obj))


def asarray(obj):
    return _wrap(obj)


def empty(shape, dtype="float32"):
    return _wrap(np.empty(shape, dtype))


def asnumpy(array):
    record_host_copy("cupy.asnumpy")
    return np.array(_host(array))


# ---------------------------------------------------------------- NCCL

NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32, NCCL_INT64, NCCL_UINT64 = range(6)
NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64, NCCL_BFLOAT16 = 6, 7, 8, 9
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN = range(4)
_NP = {NCCL_INT8: np.int8, NCCL_UINT8: np.uint8, NCCL_INT32: np.int32, NCCL_UINT32: np.uint32,
       NCCL_INT64: np.int64, NCCL_UINT64: np.uint64, NCCL_FLOAT16: np.float16,
       NCCL_FLOAT32: np.float32, NCCL_FLOAT64: np.float64,
       # NCCL reduces bfloat16 as numbers, not as the uint16 bit patterns CuPy holds them in
       NCCL_BFLOAT16: ml_dtypes.bfloat16}
_REDUCE = {NCCL_SUM: np.add, NCCL_PROD: np.multiply, NCCL_MAX: np.maximum,
           NCCL_MIN: np.minimum}
_group_depth = 0
_grouped: list = []


def _memory(ptr, count, dtype) -> np.ndarray:
    nbytes = count * np.dtype(dtype).itemsize
    raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
    return np.frombuffer(raw, np.uint8).view(dtype)


def get_version():
    return 22304


def get_unique_id():
    """128 bytes, as CuPy 14 gives it (older CuPy: a tuple of signed chars)."""
    CALLS.append(("get_unique_id",))
    return os.urandom(128)


def groupStart():
    global _group_depth
    CALLS.append(("groupStart",))
    _group_depth += 1


def groupEnd():
    global _group_depth, _grouped
    CALLS.append(("groupEnd",))
    _group_depth -= 1
    if _group_depth == 0 and _grouped:
        ops, _grouped = _grouped, []
        by_comm: dict[int, list] = {}
        for comm, op in ops:
            by_comm.setdefault(id(comm), [comm, []])[1].append(op)
        for comm, comm_ops in by_comm.values():
            comm._run(comm_ops)


class NcclCommunicator:
    """Moves bytes between the worker processes through files (one per call and rank)."""

    def __init__(self, ndev, commId, rank):
        if not isinstance(commId, bytes) or len(commId) != 128:
            raise TypeError(f"commId must be the 128 bytes of get_unique_id, got {commId!r}")
        self.size, self.rank = ndev, rank
        self.key = bytes(b % 256 for b in commId).hex()[:16]
        self.seq = 0
        self.dir = os.environ["FUSE_FAKE_NCCL_DIR"]
        CALLS.append(("NcclCommunicator", ndev, rank))

    def _call(self, record, op):
        CALLS.append(record)
        if _group_depth:
            _grouped.append((self, op))
        else:
            self._run([op])

    def _exchange(self, payload):
        self.seq += 1
        path = os.path.join(self.dir, f"{self.key}.{self.seq}.{{}}")
        tmp = path.format(f"{self.rank}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(payload, f)
        os.rename(tmp, path.format(self.rank))
        old = os.path.join(self.dir, f"{self.key}.{self.seq - 2}.{self.rank}")
        if os.path.exists(old):
            os.unlink(old)
        out, deadline = [], time.monotonic() + 60
        for r in range(self.size):
            while not os.path.exists(path.format(r)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fake NCCL: rank {r} never made call {self.seq}")
                time.sleep(0.001)
            with open(path.format(r), "rb") as f:
                out.append(pickle.load(f))
        return out

    def _run(self, ops):
        """One exchange for the calls of a group; then each call takes what it needs (a
        receive: the bytes its peer sent to this rank)."""
        payloads = self._exchange([op["send"]() for op in ops])
        for i, op in enumerate(ops):
            if "recv" in op:
                recvbuf, count, dt, peer = op["recv"]
                sent = [p for p in payloads[peer] if isinstance(p, tuple) and p[0] == self.rank]
                _memory(recvbuf, count, dt)[:] = sent[0][1]
            else:
                op["finish"]([p[i] for p in payloads])

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        dt = _NP[datatype]

        def finish(parts):
            _memory(recvbuf, count, dt)[:] = _REDUCE[op].reduce(np.stack(parts), axis=0)
        self._call(("allReduce", count, datatype, op, _stream_name(stream), sendbuf),
                   {"send": lambda: _memory(sendbuf, count, dt).copy(), "finish": finish})

    def broadcast(self, sendbuf, recvbuf, count, datatype, root, stream):
        dt = _NP[datatype]

        def finish(parts):
            _memory(recvbuf, count, dt)[:] = parts[root]
        self._call(("broadcast", count, datatype, root, _stream_name(stream)),
                   {"send": lambda: (_memory(sendbuf, count, dt).copy()
                                     if self.rank == root else None), "finish": finish})

    def allGather(self, sendbuf, recvbuf, count, datatype, stream):
        dt = _NP[datatype]

        def finish(parts):
            _memory(recvbuf, count * self.size, dt)[:] = np.concatenate(parts)
        self._call(("allGather", count, datatype, _stream_name(stream)),
                   {"send": lambda: _memory(sendbuf, count, dt).copy(), "finish": finish})

    def reduceScatter(self, sendbuf, recvbuf, recvcount, datatype, op, stream):
        dt = _NP[datatype]

        def finish(parts):
            total = _REDUCE[op].reduce(np.stack(parts), axis=0)
            start = self.rank * recvcount
            _memory(recvbuf, recvcount, dt)[:] = total[start:start + recvcount]
        self._call(("reduceScatter", recvcount, datatype, op, _stream_name(stream)),
                   {"send": lambda: _memory(sendbuf, recvcount * self.size, dt).copy(),
                    "finish": finish})

    def send(self, sendbuf, count, datatype, peer, stream):
        dt = _NP[datatype]
        self._call(("send", count, datatype, peer, _stream_name(stream)),
                   {"send": lambda: (peer, _memory(sendbuf, count, dt).copy()),
                    "finish": lambda parts: None})

    def recv(self, recvbuf, count, datatype, peer, stream):
        self._call(("recv", count, datatype, peer, _stream_name(stream)),
                   {"send": lambda: None, "recv": (recvbuf, count, _NP[datatype], peer)})

    def destroy(self):
        CALLS.append(("destroy",))


# ---------------------------------------------------------------- installation

def install():
    """Make ``import cupy`` (and ``cupy.cuda.nccl``) give this stand-in; returns the module."""
    me = sys.modules[__name__]
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "0-standin"
    cuda = types.ModuleType("cupy.cuda")
    nccl = types.ModuleType("cupy.cuda.nccl")
    for name in ("from_dlpack", "asarray", "empty", "asnumpy"):
        setattr(cupy, name, getattr(me, name))
    for name in ("Stream", "ExternalStream", "Event", "Device"):
        setattr(cuda, name, getattr(me, name))
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    for name in dir(me):
        if name.startswith("NCCL_") or name in ("get_version", "get_unique_id", "groupStart",
                                               "groupEnd", "NcclCommunicator"):
            setattr(nccl, name, getattr(me, name))
    nccl.available = True
    cuda.nccl = nccl
    cupy.cuda = cuda
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl})
    return cupy
