"""The framework contract's tensor half: what a framework adapter tells the shared code about
its tensors.

A framework supplies one :class:`ArrayOps` subclass: how to see a tensor's memory without a copy
(``describe``), how to make new tensors (``empty_like``, ``allocator``, ``from_numpy``) and how to
inspect and cast its dtype (``dtype_name``, ``is_floating``, ``cast``, for compression).  The
collective layer (fuse.collectives.calls) and compression (fuse.collectives.compression) call these
verbs and nothing else of the framework.  The other half is the plugin itself,
fuse.frameworks.base.FrameworkAdapter: how the framework is found and which ArrayOps it uses.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fuse.engine.protocol import DTYPE_CODES


class ArrayOps:
    """What a framework adapter tells the collective layer about its tensors."""

    name = "abstract"

    def describe(self, tensor) -> tuple[Any, int, tuple[int, ...]]:
        """``(buffer, dtype_code, shape)``: ``buffer`` exports the tensor's own memory through
        the buffer protocol (no copy).  Raises ValueError for a non-contiguous tensor or an
        unsupported dtype."""
        raise NotImplementedError

    def empty_like(self, tensor):
        raise NotImplementedError

    def allocator(self, like) -> Callable[[tuple], tuple[Any, Any]]:
        """A function ``shape -> (new tensor, its buffer)`` with ``like``'s dtype and device."""
        raise NotImplementedError

    def from_numpy(self, array: np.ndarray, like=None):
        """A framework tensor holding ``array`` (used for splits and object collectives)."""
        raise NotImplementedError

    # ---- dtypes, for compression

    def dtype_name(self, tensor) -> str:
        """``tensor``'s dtype as fuse names it ("float32", "bfloat16", ...)."""
        raise NotImplementedError

    def is_floating(self, tensor) -> bool:
        raise NotImplementedError

    def cast(self, tensor, dtype_name: str):
        """A new tensor with ``tensor``'s values in ``dtype_name`` (a fuse dtype name)."""
        raise NotImplementedError


# dtype -> engine code, filled as dtypes are seen (np.dtype(...).name costs microseconds,
# which a 4-byte allreduce notices)
_codes: dict = {}


def dtype_code(dtype: np.dtype) -> int:
    """The engine's code for a NumPy dtype; ValueError for one it cannot reduce."""
    code = _codes.get(dtype)
    if code is None:
        code = DTYPE_CODES.get(np.dtype(dtype).name)
        if code is None:
            raise ValueError(f"dtype {np.dtype(dtype)} is not supported; use one of "
                             f"{', '.join(sorted(DTYPE_CODES))}")
        _codes[dtype] = code
    return code


class NumpyOps(ArrayOps):
    """NumPy arrays, which are their own buffers: fuse's own API (fuse.allreduce, ...) and the
    object collectives below use them; framework adapters that stage through NumPy extend it."""

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

    def dtype_name(self, tensor):
        return np.dtype(tensor.dtype).name

    def is_floating(self, tensor):
        return np.issubdtype(tensor.dtype, np.floating) or self.dtype_name(tensor) == "bfloat16"

    def cast(self, tensor, dtype_name):
        if dtype_name == "bfloat16":        # NumPy has no bfloat16 of its own
            import ml_dtypes
            return tensor.astype(ml_dtypes.bfloat16)
        return tensor.astype(dtype_name)
