"""MXNet NDArrays for the collective layer: zero-copy views of CPU memory, casts, compression.

How an NDArray reaches the engine without a copy: MXNet's C API gives the address of an
NDArray's data (``MXNDArrayGetData``, the offset of a slice included), and a numpy array is
laid over that address through ``__array_interface__``.  The numpy array's ``base`` is a small
object that holds the NDArray, so the memory stays alive as long as the engine holds the view.

MXNet runs its operators asynchronously on its own engine, so an NDArray's memory may still be
pending a write (or a read) when Python gets hold of it.  :func:`ready_for_read` and
:func:`ready_for_write` wait for the right condition before fuse touches the memory; see
their docstrings for which is used when.
"""

from __future__ import annotations

import ctypes

import mxnet as mx
import numpy as np
from mxnet.base import _LIB, check_call

from fuse.engine.protocol import DTYPE_CODES
from fuse.collectives import compression as _compression
from fuse.collectives.array_ops import ArrayOps

# The dtypes MXNet's classic NDArray has on CPU and the engine moves (MXNet has no int16,
# uint16; its bfloat16 has no numpy type to view it through).
_DTYPES = ("uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool")
_FLOATING = ("float16", "float32", "float64")


def supported_dtypes() -> list[str]:
    return list(_DTYPES)


def dtype_name(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in _DTYPES:
        raise ValueError(f"NDArray type {name} is not supported; use one of "
                         f"{', '.join(_DTYPES)}")
    return name


def check_ndarray(tensor, what: str = "tensor") -> mx.nd.NDArray:
    """``tensor`` if it is a dense CPU NDArray, else a clear error."""
    if not isinstance(tensor, mx.nd.NDArray):
        raise TypeError(f"{what}: expected an mxnet NDArray, got {type(tensor).__name__}")
    if tensor.stype != "default":
        raise ValueError(f"{what}: {tensor.stype} NDArrays are not supported; convert with "
                         "tostype('default')")
    if tensor.context.device_type not in ("cpu", "cpu_pinned", "cpu_shared"):
        raise ValueError(f"{what}: NDArray on {tensor.context}; fuse.mxnet moves CPU NDArrays "
                         "only (no GPU backend is wired in)")
    dtype_name(tensor.dtype)
    return tensor


def ready_for_read(tensor: mx.nd.NDArray) -> None:
    """Wait until every pending MXNet write to ``tensor`` has finished (pending reads may go
    on: fuse only reads an input, so both can read the memory at once)."""
    tensor.wait_to_read()


def ready_for_write(tensor: mx.nd.NDArray) -> None:
    """Wait until no MXNet operator reads or writes ``tensor`` any more, so that fuse's engine
    thread can write into its memory without racing one (``MXNDArrayWaitToWrite``: pending
    reads and writes both finish).  Used for every NDArray fuse writes: in-place calls and
    outputs.  Nothing marks the NDArray as written afterwards because nothing needs to: the
    calls of :mod:`fuse.frameworks.mxnet.mpi_ops` return only after fuse has finished writing,
    so no operator that reads the result can be pushed to MXNet before the data is there."""
    check_call(_LIB.MXNDArrayWaitToWrite(tensor.handle))


def data_address(tensor: mx.nd.NDArray) -> int:
    """The address of ``tensor``'s first element (MXNet allocates lazily: this allocates)."""
    ptr = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayGetData(tensor.handle, ctypes.byref(ptr)))
    return ptr.value or 0


class _Memory:
    """The owner of a view: keeps the NDArray alive and describes its memory to numpy."""

    __slots__ = ("ndarray", "__array_interface__")

    def __init__(self, ndarray, address, shape, typestr, writable):
        self.ndarray = ndarray
        self.__array_interface__ = {"data": (address, not writable), "shape": shape,
                                    "typestr": typestr, "version": 3}


def host_view(tensor: mx.nd.NDArray, writable: bool = True) -> np.ndarray:
    """A numpy array over the NDArray's own memory (no copy).  The caller has made the
    NDArray ready (:func:`ready_for_read` / :func:`ready_for_write`)."""
    shape = tuple(tensor.shape)
    dtype = np.dtype(tensor.dtype)
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return np.empty(shape, dtype)
    owner = _Memory(tensor, data_address(tensor), shape, dtype.str, writable)
    return np.asarray(owner)


def new_ndarray(shape, dtype, ctx=None) -> mx.nd.NDArray:
    """An uninitialised CPU NDArray whose memory exists now (not lazily)."""
    return mx.nd.empty(tuple(shape), ctx=ctx or mx.cpu(), dtype=dtype)


class MxnetOps(ArrayOps):
    """Dense CPU NDArrays.  ``describe`` expects the NDArray to be ready already (the calls in
    mpi_ops wait for it first), so that the wait is made once, before the engine sees it."""

    name = "mxnet"

    def describe(self, tensor):
        check_ndarray(tensor)
        code = DTYPE_CODES[dtype_name(tensor.dtype)]
        return host_view(tensor), code, tuple(tensor.shape)

    def empty_like(self, tensor):
        return new_ndarray(tensor.shape, tensor.dtype, tensor.context)

    def allocator(self, like):
        dtype, ctx = like.dtype, like.context

        def allocate(shape):
            # Called by the engine once negotiation knows the size; a fresh NDArray has no
            # pending operator, so there is nothing to wait for.
            out = new_ndarray(shape, dtype, ctx)
            return out, host_view(out)
        return allocate

    def from_numpy(self, array, like=None):
        return mx.nd.array(np.ascontiguousarray(array), dtype=array.dtype)

    def dtype_name(self, tensor) -> str:
        return dtype_name(tensor.dtype)

    def is_floating(self, tensor) -> bool:
        return np.dtype(tensor.dtype).name in _FLOATING

    def cast(self, tensor, name: str):
        return tensor.astype(name)


# MXNet 1.9 has no bfloat16 that numpy can view, so no bf16 compressor (as in Horovod).
Compression = _compression.compression_for(MxnetOps(), bf16=False)
