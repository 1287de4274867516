"""fuse.torch on real GPUs through the NCCL backend (real CuPy, real NCCL): 1 and 2 GPUs.

Skipped with the reason where there is no GPU (as on the machines fuse is developed on: none
of this has run on a GPU yet).  Run with ``bash scripts/test_gpu.sh`` on a machine with GPUs."""

import pytest

import gpu_util

gpu_util.require(1)


from paths_util import SUPPORT  # noqa: E402
from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)
ENV = {"PYTHONPATH": SUPPORT}   # workers import workers_gpu


def _expected(n):
    return {
        "allreduce": [x + (n - 1) / 2 for x in range(6)],
        "grouped": [[n * (n + 1) / 2] * 3, [[10.0 * n * (n - 1) / 2] * 2] * 2],
        "allgather": [[r, r] for r in range(n) for _ in range(r + 1)],
        "broadcast": [float(n - 1)] * 4,
    }


@pytest.mark.parametrize("n", [1, 2])
def test_gpu_every_collective(n):
    """On n GPUs: every collective reduces on the device, right values, results on the GPU,
    and a result used at once on the current stream is already complete."""
    gpu_util.require(n)
    import workers_gpu as w
    res = run_job(w.collectives, np_=n, env=ENV)
    want = _expected(n)
    for r, out in enumerate(res):
        assert out["device_path"] and out["allreduce_on_device"] and out["stream_order"]
        for key, value in want.items():
            assert out[key] == value, (key, out[key], value)
        rows, received = out["alltoall"]
        assert received == [2] * n
        assert rows == [float(2 * r + k + 10 * s) for s in range(n) for k in range(2)]
        assert out["reducescatter"] == [[n * (n + 1) / 2] * 2] * 2


def test_gpu_distributed_optimizer_two_gpus():
    """DistributedOptimizer on 2 GPUs: the replicas stay identical after 5 steps."""
    gpu_util.require(2)
    import workers_gpu as w
    res = run_job(w.training, np_=2, env=ENV)
    assert res[0] == res[1]
