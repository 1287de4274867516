"""fuse.torch's CUDA path checked on a STAND-IN for CuPy/NCCL and torch.cuda: the wiring, not
a GPU.  There is no GPU here.  Two real workers (fuse.run, the real Gloo backend for the
negotiation) drive CPU tensors, which the stand-in (tests/support/fake_torch_cuda.py) routes
through the device path as if they were CUDA tensors, onto the recorded NCCL of
tests/support/fake_cupy.py.  What is checked: the results, which NCCL calls are made, the order
of stream and event calls, errors naming tensor and ranks, and that nothing on the path copies to
the host or waits on the host for the device.  tests/gpu holds the same checks on a real GPU."""


import needs
import pytest

torch = needs.module("torch")

from paths_util import SUPPORT  # noqa: E402
from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)


# Every way to read "device" memory on the host, and device-side work that is not one, each
# done once from a module of fuse and once from a test's own module: run in a fresh interpreter,
# since installing the stand-in patches torch.Tensor for good.
TRAP_PROBE = """
import json, sys
import numpy as np
import torch
import fake_cupy, fake_torch_cuda
fake_torch_cuda.install()
cupy = sys.modules["cupy"]
COPIES = ["tensor.cpu()", "tensor.numpy()", "tensor.to('cpu')", "tensor.tolist()",
          "np.asarray(tensor)", "np.array(tensor)", "np.add(tensor, 1)",
          "cupy.asnumpy(device)", "device.get()", "device.tolist()", "np.asarray(device)",
          "np.array(device)", "np.concatenate([device, device])", "np.add(device, 1)"]
ON_DEVICE = ["cupy.from_dlpack(tensor)", "cupy.asarray(device)", "device[1:]",
             "device.view(np.uint8)", "device.copy()", "device.__setitem__(slice(None), device)",
             "tensor.to(torch.float64)"]
seen = {}
for expr in COPIES + ON_DEVICE:
    for caller in ("fuse.frameworks.torch.device", "workers_torch_gpu_standin"):
        del fake_cupy.HOST_COPIES[:]
        eval(expr, {"__name__": caller, "np": np, "torch": torch, "cupy": cupy,
                    "tensor": torch.ones(3), "device": cupy.asarray(np.ones(3, np.float32))})
        seen[f"{expr} from {caller.split('.')[0]}"] = list(fake_cupy.HOST_COPIES)
print(json.dumps({"copies": COPIES, "on_device": ON_DEVICE, "seen": seen}))
"""


def test_the_trap_catches_every_host_copy_fuse_makes():
    """The stand-ins record each way of reading device memory on the host when fuse's code does
    it, not device-side work, and not the tests' own reads of their results."""
    import json
    import os
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SUPPORT, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", TRAP_PROBE], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    probe = json.loads(out.stdout.splitlines()[-1])
    seen = probe["seen"]
    missed = [e for e in probe["copies"] if not seen[f"{e} from fuse"]]
    assert not missed, f"host copies made by fuse that the trap misses: {missed}"
    wrong = {k: v for k, v in seen.items()
             if v and (k.endswith("from workers_torch_gpu_standin")
                       or k[:-len(" from fuse")] in probe["on_device"])}
    assert not wrong, f"recorded as host copies by mistake: {wrong}"


def _run(fn, tmp_path, **env):
    return run_job(fn, env={"PYTHONPATH": SUPPORT,
                            "FUSE_FAKE_NCCL_DIR": str(tmp_path), **env})


def test_standin_wiring_every_collective_without_host_copies(tmp_path):
    """Stand-in (no GPU): every collective goes through the device path and the stand-in NCCL
    with the right results; the grouped allreduce is one fused NCCL call; no host copy."""
    import workers_torch_gpu_standin as w
    res = _run(w.collectives, tmp_path)
    for r, out in enumerate(res):
        assert out["allreduce"] == [x + 0.5 for x in range(6)]
        assert out["grouped"] == [[3.0] * 3, [[10.0, 10.0], [10.0, 10.0]]]
        assert out["grouped_nccl_calls"] == 1, "the grouped allreduce is fused into one call"
        assert out["max"] == [1, 0]
        assert out["allgather"] == [[0, 0], [1, 1], [1, 1]]
        assert out["broadcast"] == [1.0] * 4
        assert out["reducescatter"] == ([[3.0, 3.0], [3.0, 3.0]] if r == 0 else [[3.0, 3.0]])
        assert out["scaled"] == [1.0, 1.0]
        assert out["host_copies"] == [] and out["host_syncs"] == []
    assert res[0]["alltoall"] == ([0.0, 10.0, 11.0], [1, 2])
    assert res[1]["alltoall"] == ([1.0, 2.0, 12.0], [2, 1])


def test_standin_wiring_one_engine_fuses_with_live_threshold_and_timeline(tmp_path):
    """Stand-in (no GPU): device tensors go through the one coordinator: its fusion threshold
    in force (lowered at run time, as the autotuner does) decides how a grouped allreduce is
    fused into NCCL calls, and the engine's timeline records device collectives."""
    import json

    import workers_torch_gpu_standin as w
    path = tmp_path / "timeline.json"
    res = run_job(w.one_engine, args=(str(path),),
                  env={"PYTHONPATH": SUPPORT,
                       "FUSE_FAKE_NCCL_DIR": str(tmp_path)})
    for out in res:
        assert out["wide"] == 1, "three 16-byte tensors fused into one call"
        assert out["narrow"] == 2, "a 32-byte threshold: two tensors, then one"
        assert out["values"] == [[4.0] * 4] * 3
    text = path.read_text()
    events = json.loads(text if text.rstrip().endswith("]") else text.rstrip().rstrip(",") + "]")
    named = [e for e in events if "timed.on.device" in json.dumps(e)]
    assert named, "the timeline shows the device allreduce"


def test_standin_wiring_stream_and_event_order(tmp_path):
    """Stand-in (no GPU): the producer's stream records an event at submission, the collective
    stream waits for it before the NCCL call and records its own event after, and the
    consumer's stream waits for that event at synchronize: ordering by events only."""
    import workers_torch_gpu_standin as w
    for calls in _run(w.order_of_calls, tmp_path):
        producer = "external:%d" % 0x7777
        (ready,) = [c for c in calls if c[0] == "record" and c[2] == producer]
        i_ready = calls.index(ready)
        (wait,) = [i for i, c in enumerate(calls) if c[0] == "wait_event" and c[2] == ready[1]]
        collective = calls[wait][1]
        assert collective != producer
        (nccl,) = [i for i, c in enumerate(calls) if c[0] == "allReduce"]
        assert calls[nccl][4] == collective
        (done,) = [i for i, c in enumerate(calls) if c[0] == "record" and c[2] == collective]
        (consume,) = [i for i, c in enumerate(calls) if c[0] == "wait_event"
                      and c[1] == producer and c[2] == calls[done][1]]
        assert i_ready < wait < nccl < done < consume, calls


def test_standin_wiring_mismatch_names_tensor_and_ranks(tmp_path):
    """Stand-in (no GPU): device tensors are checked by the one coordinator with every other
    tensor: a shape that differs across ranks, or a tensor on the device on one rank and on the
    host on the other, fails on every rank with the tensor's name, both ranks and both values,
    instead of reaching NCCL, and the job goes on; a name only one rank submits ends the job
    after FUSE_STALL_SHUTDOWN_TIME_SECONDS with a StallError naming the rank that lacks it, as
    for host tensors."""
    import workers_torch_gpu_standin as w
    res = _run(w.mismatches, tmp_path, FUSE_STALL_CHECK_TIME_SECONDS=1,
               FUSE_STALL_SHUTDOWN_TIME_SECONDS=2)
    assert res[0]["shape"] == res[1]["shape"]
    assert "MismatchError" in res[0]["shape"] and "'bad.shape'" in res[0]["shape"]
    assert "rank 0 sent [2], rank 1 sent [3]" in res[0]["shape"], res[0]["shape"]
    assert res[0]["placement"] == res[1]["placement"]
    assert "'bad.placement'" in res[0]["placement"], res[0]["placement"]
    assert "rank 0 sent a device (GPU) tensor, rank 1 a host (CPU) one" in res[0]["placement"]
    for r, out in enumerate(res):
        assert out["after"] == [2.0, 2.0]
        assert "StallError" in out["stall"], out["stall"]
        assert f"rank {1 - r} (host localhost): [only.on.{r}]" in out["stall"], out["stall"]


def test_standin_wiring_distributed_optimizer(tmp_path):
    """Stand-in (no GPU): DistributedOptimizer's gradients go through the device path (NCCL
    calls made, no host copy), laid out back to back on the device and reduced in place
    there, and the replicas stay identical."""
    import workers_torch_gpu_standin as w
    res = _run(w.optimizer_step, tmp_path)
    assert res[0]["params"] == res[1]["params"]
    for out in res:
        assert out["nccl"] >= 1 and out["host_copies"] == []
        # the gradients got a device-side layout, and once it is built NCCL reduces them
        # where they lie in it (not through the device fusion buffer)
        assert out["flats"] == 1 and out["in_place"] and all(out["in_place"]), out


def test_standin_wiring_collectives_match_the_cpu_call(tmp_path):
    """Stand-in (no GPU): the worker of tests/gpu's every-collective check (every op on every
    dtype, grouped, uneven allgather, broadcast, alltoall with splits, reducescatter, a process
    set) on two ranks, "device" calls on the stand-in NCCL against the same calls on the host
    backend.  On a GPU the same worker runs at size 1 on real NCCL."""
    import gpu_util
    import workers_gpu as w
    gpu_util.check_collectives_vs_cpu(_run(w.collectives_vs_cpu, tmp_path,
                                           GPU_TEST_DEVICE="standin"), w.case_labels())


def test_cpu_run_of_the_shared_gpu_training_check():
    """CPU tensors, no GPU: the worker of tests/gpu's two-ranks-on-one-GPU check (staged through
    the host backend there) gives identical weights on both ranks, matching one process trained
    on the combined batch; what staging CUDA tensors adds is checked only on a GPU."""
    import gpu_util
    import workers_gpu as w
    res = run_job(w.staged_training, args=(5, 4),
                  env={"PYTHONPATH": SUPPORT, "GPU_TEST_DEVICE": "cpu"})
    gpu_util.check_staged_training(res, w.combined_batch_training(5, 8, "cpu"))
