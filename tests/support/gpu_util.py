"""What the real-GPU tests need: torch with CUDA, CuPy with NCCL, and ``n`` devices."""

from __future__ import annotations

import needs


def require(n: int) -> None:
    """Skip the calling module (or fail under FUSE_TEST_REQUIRE=gpu) without ``n`` GPUs."""
    __tracebackhide__ = True
    torch = needs.module("torch")
    from fuse.backends.nccl.library import unavailable_reason
    why = unavailable_reason()
    if why:
        needs.missing("gpu", why)
    if not torch.cuda.is_available():
        needs.missing("gpu", "torch.cuda.is_available() is False (a CPU build of torch?)")
    count = torch.cuda.device_count()
    if count < n:
        needs.missing("gpu", f"needs {n} GPUs, {count} visible")
