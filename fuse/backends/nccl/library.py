"""CuPy and its NCCL binding, imported on first use and only here.

Everything the NCCL backend needs from CuPy passes through :func:`cupy_modules`, so ``import
fuse`` never imports CuPy, and the stand-in of the tests (``tests/support/fake_cupy.py``, NumPy
memory that records every call) replaces the real thing by being put in ``sys.modules``.
"""

from __future__ import annotations


def cupy_modules():
    """``(cupy, cupy.cuda.nccl)``; ImportError saying what is missing."""
    try:
        import cupy
    except ImportError as err:
        raise ImportError("CuPy is not installed (pip install fuse-dl[nccl], which pulls "
                          "cupy-cuda12x and nvidia-nccl-cu12; fuse-dl[nccl-cu13] for CUDA "
                          "13: cupy-cuda13x and nvidia-nccl-cu13)") from err
    try:
        from cupy.cuda import nccl
    except ImportError as err:
        raise ImportError(f"CuPy {getattr(cupy, '__version__', '?')} has no NCCL binding "
                          "(pip install nvidia-nccl-cu12, or -cu13 beside cupy-cuda13x)") from err
    if not getattr(nccl, "available", True):
        raise ImportError("CuPy cannot load libnccl (pip install nvidia-nccl-cu12, or -cu13 "
                          "beside cupy-cuda13x)")
    return cupy, nccl


def unavailable_reason() -> str:
    """Why NCCL cannot run here ("" when it can): no CuPy, no NCCL, or no CUDA device."""
    try:
        cupy, _nccl = cupy_modules()
    except ImportError as err:
        return str(err)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:    # no driver: CUDARuntimeError, whatever CuPy wraps it in
        return f"no CUDA device: {type(err).__name__}: {err}"
    if count < 1:
        return "no CUDA device is visible"
    return ""
