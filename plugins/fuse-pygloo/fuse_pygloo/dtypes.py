"""Which fuse wire types and reductions pygloo can reduce, in pygloo's own names.

pygloo 0.2.1 knows nine element types (glooDataType_t).  fuse's ``int16``, ``uint16``,
``bool`` and ``bfloat16`` are not among them: an allreduce of one is refused with an error
naming the type and the backend.  Collectives that only move bytes (allgather, broadcast,
alltoall) carry every type, as uint8.
"""

from __future__ import annotations

BACKEND = "pygloo"

# fuse's wire type name -> the glooDataType_t member name
_DTYPES = {
    "int8": "glooInt8",
    "uint8": "glooUint8",
    "int32": "glooInt32",
    "uint32": "glooUint32",
    "int64": "glooInt64",
    "uint64": "glooUint64",
    "float16": "glooFloat16",
    "float32": "glooFloat32",
    "float64": "glooFloat64",
}

_OPS = {"sum": "SUM", "min": "MIN", "max": "MAX", "product": "PRODUCT"}

REDUCIBLE = tuple(_DTYPES)


class UnsupportedDtype(TypeError):
    """An allreduce of a type pygloo has no reduction for."""


def gloo_dtype(pygloo, dtype: str):
    """pygloo's element type for fuse's wire type ``dtype``, or UnsupportedDtype."""
    try:
        return getattr(pygloo.glooDataType_t, _DTYPES[dtype])
    except KeyError:
        raise UnsupportedDtype(
            f"{BACKEND} backend: cannot reduce {dtype} tensors: pygloo has no {dtype} type "
            f"(it reduces {', '.join(REDUCIBLE)}); use FUSE_BACKEND=gloo for {dtype}, or cast "
            "the tensor") from None


def gloo_op(pygloo, op: str):
    """pygloo's ReduceOp for fuse's reduction name ``op``."""
    try:
        return getattr(pygloo.ReduceOp, _OPS[op])
    except KeyError:
        raise ValueError(f"{BACKEND} backend: unknown reduction {op!r} "
                         f"(expected one of {', '.join(_OPS)})") from None
