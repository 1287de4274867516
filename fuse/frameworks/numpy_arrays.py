"""NumPy arrays for the collective layer: the arrays are their own buffers."""

from __future__ import annotations

import numpy as np

from fuse import _core
from fuse.common.collectives import ArrayOps


# dtype -> engine code, filled as dtypes are seen (np.dtype(...).name costs microseconds,
# which a 4-byte allreduce notices)
_codes: dict = {}


def dtype_code(dtype: np.dtype) -> int:
    code = _codes.get(dtype)
    if code is None:
        code = _core.DTYPE_CODES.get(np.dtype(dtype).name)
        if code is None:
            raise ValueError(f"dtype {np.dtype(dtype)} is not supported; use one of "
                             f"{', '.join(sorted(_core.DTYPE_CODES))}")
        _codes[dtype] = code
    return code


class NumpyOps(ArrayOps):
    name = "numpy"

    def describe(self, tensor):
        if not isinstance(tensor, np.ndarray):
            raise TypeError(f"expected a numpy array, got {type(tensor).__name__}")
        if not tensor.flags.c_contiguous:
            raise ValueError("array is required to be C-contiguous "
                             "(use np.ascontiguousarray)")
        return tensor, dtype_code(tensor.dtype), tensor.shape

    def empty_like(self, tensor):
        return np.empty_like(tensor)

    def allocator(self, like):
        dtype = like.dtype

        def allocate(shape):
            out = np.empty(shape, dtype=dtype)
            return out, out
        return allocate

    def from_numpy(self, array, like=None):
        return array
