"""Torch tensors for the collective layer: zero-copy views of CPU memory, casts, device routing."""

from __future__ import annotations

import numpy as np
import torch

from fuse.engine.protocol import DTYPE_CODES
from fuse.collectives import compression as _compression
from fuse.collectives.array_ops import ArrayOps

# torch dtype -> (fuse dtype name, torch dtype of the view numpy can export)
_DTYPES = {
    torch.uint8: ("uint8", None),
    torch.int8: ("int8", None),
    torch.int16: ("int16", None),
    torch.int32: ("int32", None),
    torch.int64: ("int64", None),
    torch.float16: ("float16", None),
    torch.float32: ("float32", None),
    torch.float64: ("float64", None),
    torch.bool: ("bool", None),
    torch.bfloat16: ("bfloat16", torch.int16),   # numpy has no bfloat16: export the bits
}
if hasattr(torch, "uint16"):
    _DTYPES[torch.uint16] = ("uint16", None)

_BY_NAME = {name: dt for dt, (name, _) in _DTYPES.items()}


def supported_dtypes() -> list:
    return list(_DTYPES)


def dtype_name(dtype) -> str:
    entry = _DTYPES.get(dtype)
    if entry is None:
        raise ValueError(f"Tensor type {dtype} is not supported.")
    return entry[0]


def host_view(tensor: torch.Tensor) -> np.ndarray:
    """A numpy array over the tensor's own CPU memory (no copy)."""
    name, view_as = _DTYPES[tensor.dtype]
    t = tensor.detach()
    if view_as is not None:
        t = t.view(view_as)
    return t.numpy()


class TorchOps(ArrayOps):
    """CPU tensors only: CUDA tensors go to the device path (.device) or are staged through
    host memory by the caller (mpi_ops._intake)."""

    name = "torch"

    def describe(self, tensor):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device.type != "cpu":
            raise ValueError(f"tensor on {tensor.device} reached the host path")
        if tensor.is_sparse:
            raise ValueError("sparse tensors are not supported here; use "
                             "sparse_allreduce_async or sparse_as_dense=True")
        if not tensor.is_contiguous():
            raise ValueError("Tensor is required to be contiguous.")
        code = DTYPE_CODES[dtype_name(tensor.dtype)]
        return host_view(tensor), code, tuple(tensor.shape)

    def empty_like(self, tensor):
        return torch.empty(tensor.shape, dtype=tensor.dtype)

    def allocator(self, like):
        dtype = like.dtype

        def allocate(shape):
            out = torch.empty(tuple(shape), dtype=dtype)
            return out, host_view(out)
        return allocate

    def from_numpy(self, array, like=None):
        return torch.from_numpy(np.ascontiguousarray(array))

    def dtype_name(self, tensor) -> str:
        return dtype_name(tensor.dtype)

    def is_floating(self, tensor) -> bool:
        return tensor.is_floating_point()

    def cast(self, tensor, name: str):
        return tensor.to(_BY_NAME[name])


Compression = _compression.compression_for(TorchOps(), powersgd=True)
