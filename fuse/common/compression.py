"""Gradient compression, written once for every framework.

A compressor turns a tensor into what travels on the wire and back.  The casting itself is the
only framework-specific part: a framework supplies a :class:`CastHook` (``dtype_name(t)``,
``is_floating(t)``, ``cast(t, dtype_name)``) and binds it by subclassing::

    class FP16Compressor(compression.FP16Compressor):
        hook = TorchCast()

``Compressor.compress(t) -> (wire, ctx)`` and ``decompress(wire, ctx) -> t``.
"""

from __future__ import annotations


class CastHook:
    """How a framework inspects and casts its tensors (the only per-framework piece)."""

    def dtype_name(self, tensor) -> str:
        raise NotImplementedError

    def is_floating(self, tensor) -> bool:
        raise NotImplementedError

    def cast(self, tensor, dtype_name: str):
        """A new tensor with ``tensor``'s values in ``dtype_name`` (a fuse dtype name)."""
        raise NotImplementedError


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, ctx)`` and ``decompress(tensor, ctx)``."""

    hook: CastHook | None = None

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
    tensors are untouched.  Subclasses set ``wire_dtype`` and are bound to a hook."""

    wire_dtype = ""

    @classmethod
    def compress(cls, tensor):
        hook = cls.hook
        if hook is None:
            raise RuntimeError(f"{cls.__name__} is not bound to a framework")
        if not hook.is_floating(tensor):
            return tensor, None
        original = hook.dtype_name(tensor)
        if original == cls.wire_dtype:
            return tensor, None
        return hook.cast(tensor, cls.wire_dtype), original

    @classmethod
    def decompress(cls, tensor, ctx):
        if ctx is None:
            return tensor
        return cls.hook.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    """Floating tensors travel as float16."""

    wire_dtype = "float16"


class BF16Compressor(_CastCompressor):
    """Floating tensors travel as bfloat16 (float32's range, 8 bits of mantissa)."""

    wire_dtype = "bfloat16"


def compression_for(hook: CastHook, bf16: bool = True) -> type:
    """The ``Compression`` namespace a framework exports (``none``, ``fp16`` and, where the
    framework has the type, ``bf16``), with the casting compressors bound to its ``hook``."""

    def bound(base: type) -> type:
        return type(base.__name__, (base,), {"hook": hook, "__doc__": base.__doc__,
                                             "__module__": type(hook).__module__})

    class Compression:
        """Optional gradient compression: ``Compression.none``, ``.fp16`` and ``.bf16``."""

        none = NoneCompressor
        fp16 = bound(FP16Compressor)

    if bf16:
        Compression.bf16 = bound(BF16Compressor)
    else:
        Compression.__doc__ = "Optional gradient compression: ``Compression.none`` and ``.fp16``."
    Compression.__module__ = type(hook).__module__
    return Compression
