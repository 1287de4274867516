"""What the real-GPU tests need (torch with CUDA, CuPy with NCCL, ``n`` devices), and the checks
they share with their stand-in runs in tests/frameworks/torch/test_gpu_standin.py."""

from __future__ import annotations

import math

import pytest

import needs


def require(n: int) -> None:
    """Skip the calling module (or fail under FUSE_TEST_REQUIRE=gpu) without a GPU; skip (never
    fail: one GPU is a machine with GPUs too) where fewer than ``n`` are visible."""
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
        pytest.skip(f"needs {n} GPUs, {count} visible", allow_module_level=True)


def check_collectives_vs_cpu(results, labels) -> None:
    """Every rank of a ``workers_gpu.collectives_vs_cpu`` job ran every case in ``labels`` on
    the device path, matched the CPU call and kept its results on the device."""
    __tracebackhide__ = True
    for r, out in enumerate(results):
        assert out["errors"] == [], (r, out["errors"])
        assert out["mismatches"] == [], (r, out["mismatches"])
        assert out["off_device"] == [], (r, out["off_device"])
        assert sorted(out["checked"]) == sorted(labels), (r, out["checked"])
        assert out["device_path"], f"rank {r}: the device path did not run"


def check_staged_training(results, combined) -> None:
    """The ranks of a ``workers_gpu.staged_training`` job end with identical weights, close to
    ``combined`` (one process, the whole batch): averaging the ranks' gradients is the same
    step up to rounding."""
    __tracebackhide__ = True
    first = results[0]["params"]
    for r, out in enumerate(results):
        assert out["params"] == first, f"rank {r}'s weights differ from rank 0's"
        assert out["staged"], f"rank {r}: CUDA tensors were not staged through the host"

    def flat(params):
        out = []
        for p in params:
            out.extend(flat(p) if isinstance(p, list) else [p])
        return out
    got, want = flat(first), flat(combined)
    assert len(got) == len(want)
    far = [(i, a, b) for i, (a, b) in enumerate(zip(got, want))
           if not math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)]
    assert not far, f"{len(far)} of {len(got)} weights differ from one process's: {far[:5]}"
