"""Keep freed gradient memory in the process instead of returning it to the kernel every step.

A training step allocates its gradients and frees them again (autograd's fresh tensors, which the
optimizer's hooks copy into their buffers; the large ones at ``zero_grad``).  glibc's malloc picks
its thresholds as it goes: a block above the mmap threshold is its own mapping, unmapped when it
is freed, and free memory at the top of the heap beyond the trim threshold goes back to the
kernel.  Both adapt to the sizes freed so far, so what a step does depends on the order of the
frees; fuse's engine threads and hooks change that order, and in about half of the runs of
bench's ResNet-50-shaped step (25.6 M float32, 2 ranks) every step took its gradients' memory
back from the kernel as fresh pages: 4500-6500 page faults and about 10 ms of CPU a step more
(a run either does it at every step or never; plain PyTorch in the same loop never did).

So :func:`keep_freed_memory` fixes the two thresholds once, at ``init``: blocks up to 32 MiB (the
largest mmap threshold glibc itself adapts to) come from the heap, and up to
``FUSE_MALLOC_TRIM_THRESHOLD`` bytes (128 MiB) of free heap stay with the process.  Nothing
changes when the user tuned malloc already (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES`` naming ``glibc.malloc``), when the C library is not
glibc, or with ``FUSE_MALLOC_TRIM_THRESHOLD=0``.
"""

from __future__ import annotations

import ctypes
import os
from typing import Mapping

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024

# the variables a user tunes glibc's malloc with (GLIBC_TUNABLES too, when it names glibc.malloc)
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def user_tuned_malloc(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the process was started with malloc settings of its own."""
    return (any(name in environ for name in USER_SETTINGS)
            or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""))


def glibc():
    """This process's C library if it is glibc (musl's mallopt does nothing), else None."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None


def keep_freed_memory(trim_threshold: int, environ: Mapping[str, str] = os.environ) -> bool:
    """Fix glibc's mmap and trim thresholds (see the module's doc).  Returns whether it did."""
    if trim_threshold <= 0 or user_tuned_malloc(environ):
        return False
    libc = glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    trim = min(trim_threshold, 2**31 - 1)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim))
