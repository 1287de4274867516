"""Gradient compression, written once for every framework.

A compressor turns a tensor into what travels on the wire and back.  The casting itself is the
only framework-specific part: the framework's :class:`~fuse.collectives.array_ops.ArrayOps`
(``dtype_name(t)``, ``is_floating(t)``, ``cast(t, dtype_name)``), bound by subclassing::

    class FP16Compressor(compression.FP16Compressor):
        ops = TorchOps()

(``compression_for(ops)`` makes a framework's whole ``Compression`` namespace that way.)

``Compressor.compress(t) -> (wire, ctx)`` and ``decompress(wire, ctx) -> t``.
"""

from __future__ import annotations

from fuse.collectives.array_ops import ArrayOps


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, ctx)`` and ``decompress(tensor, ctx)``."""

    ops: ArrayOps | None = None     # the framework's tensor verbs (the casting compressors)

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """Send the tensor as it is."""


class _CastCompressor(Compressor):
    """Floating tensors travel as ``wire_dtype`` and come back in their own dtype; other
    tensors are untouched.  Subclasses set ``wire_dtype`` and are bound to a framework's ops."""

    wire_dtype = ""

    @classmethod
    def compress(cls, tensor):
        ops = cls.ops
        if ops is None:
            raise RuntimeError(f"{cls.__name__} is not bound to a framework")
        if not ops.is_floating(tensor):
            return tensor, None
        original = ops.dtype_name(tensor)
        if original == cls.wire_dtype:
            return tensor, None
        return ops.cast(tensor, cls.wire_dtype), original

    @classmethod
    def decompress(cls, tensor, ctx):
        if ctx is None:
            return tensor
        return cls.ops.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    """Floating tensors travel as float16."""

    wire_dtype = "float16"


class BF16Compressor(_CastCompressor):
    """Floating tensors travel as bfloat16 (float32's range, 8 bits of mantissa)."""

    wire_dtype = "bfloat16"


def compression_for(ops: ArrayOps, bf16: bool = True, powersgd: bool = False) -> type:
    """The ``Compression`` namespace a framework exports (``none``, ``fp16`` and, where the
    framework has the type, ``bf16``), with the casting compressors bound to its ``ops``;
    ``powersgd`` (:class:`fuse.collectives.powersgd.PowerSGD`) where the framework's
    distributed optimizer drives it."""

    def bound(base: type) -> type:
        return type(base.__name__, (base,), {"ops": ops, "__doc__": base.__doc__,
                                             "__module__": type(ops).__module__})

    class Compression:
        """Optional gradient compression: ``Compression.none``, ``.fp16`` and ``.bf16``."""

        none = NoneCompressor
        fp16 = bound(FP16Compressor)

    if bf16:
        Compression.bf16 = bound(BF16Compressor)
    if powersgd:
        from fuse.collectives.powersgd import PowerSGD
        Compression.powersgd = PowerSGD
    else:
        Compression.__doc__ = "Optional gradient compression: ``Compression.none`` and ``.fp16``."
    Compression.__module__ = type(ops).__module__
    return Compression
