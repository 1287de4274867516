"""fuse.torch on real GPUs through the NCCL backend (real CuPy, real NCCL).

Skipped with the reason where there is no GPU (as on the machines fuse is developed on).  With
one GPU: every collective at size 1 against the same call on CPU tensors, two ranks sharing the
GPU with CUDA tensors staged through the host backend, a CUDA/CPU mismatch, the timeline.  With
two GPUs, also NCCL across two ranks.  Run with ``bash scripts/test_gpu.sh`` (a checkout with
GPUs) or ``bash scripts/gpu_check.sh`` (an installed wheel).  The same worker code runs on the
CPU stand-in in tests/frameworks/torch/test_gpu_standin.py; only here is it a GPU."""

import json

import pytest

import gpu_util

gpu_util.require(1)


from paths_util import SUPPORT  # noqa: E402
from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)
ENV = {"PYTHONPATH": SUPPORT}   # workers import workers_gpu
# No GPU backend: CUDA tensors are staged through the host backend (two ranks cannot share a
# GPU under NCCL).  Any name no plugin registers does it; fuse warns once with the reason.
STAGED = {**ENV, "FUSE_GPU_BACKEND": "none"}


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


def test_gpu_collectives_match_cpu_at_size_one():
    """NCCL at size 1: allreduce (sum, average, min, max, product on float16, bfloat16,
    float32, float64, int32, int64; scaled; on a process set), grouped allreduce, allgather
    with rows differing per rank, broadcast, alltoall with splits and reducescatter on CUDA
    tensors give what the same call gives on CPU tensors, and their results stay on the GPU."""
    import workers_gpu as w
    gpu_util.check_collectives_vs_cpu(run_job(w.collectives_vs_cpu, np_=1, env=ENV),
                                      w.case_labels())


def test_gpu_two_ranks_share_the_gpu_staged_through_host():
    """Two ranks on one GPU, CUDA tensors staged through the host backend: DistributedOptimizer
    training on the GPU ends with identical weights on both ranks, matching one process that
    trains on the combined batch."""
    import workers_gpu as w
    res = run_job(w.staged_training, np_=2, env=STAGED, args=(5, 4))
    assert all(out["device"] == "cuda:0" for out in res), res
    gpu_util.check_staged_training(res, w.combined_batch_training(5, 8, "cuda:0"))


@pytest.mark.timeout(120)
def test_gpu_cuda_vs_cpu_tensor_mismatch_names_tensor_and_ranks():
    """A CUDA tensor on rank 0 and a CPU tensor on rank 1 under one name fails on both ranks
    with the existing message, before NCCL; the job goes on."""
    import workers_gpu as w
    res = run_job(w.placement_mismatch, np_=2, env=ENV)
    assert res[0]["error"] == res[1]["error"]
    assert "'cuda.vs.cpu'" in res[0]["error"], res[0]["error"]
    assert "rank 0 sent a device (GPU) tensor, rank 1 a host (CPU) one" in res[0]["error"]
    assert [out["after"] for out in res] == [[2.0, 2.0]] * 2


def test_gpu_timeline_shows_device_collectives(tmp_path):
    """The timeline records a collective that ran on the GPU."""
    import workers_gpu as w
    path = tmp_path / "timeline.json"
    (out,) = run_job(w.timeline_sees_device, np_=1, env=ENV, args=(str(path),))
    assert out["device_path"]
    text = path.read_text()
    events = json.loads(text if text.rstrip().endswith("]") else text.rstrip().rstrip(",") + "]")
    assert [e for e in events if "timed.on.device" in json.dumps(e)], "no device allreduce"


def test_gpu_distributed_optimizer_two_gpus():
    """DistributedOptimizer on 2 GPUs: the replicas stay identical after 5 steps."""
    gpu_util.require(2)
    import workers_gpu as w
    res = run_job(w.training, np_=2, env=ENV)
    assert res[0] == res[1]
