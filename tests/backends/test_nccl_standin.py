"""The NCCL backend (fuse.backends.nccl) checked on a STAND-IN for CuPy's NCCL binding: the
wiring, not a GPU.  There is no GPU here.  The stand-in (tests/support/fake_cupy.py) keeps
"device" memory in NumPy and moves it between two real worker processes (fuse.run) through
files; it records every call.  What is checked: the communicator is made from one unique id
drawn by rank 0 and sent through fuse's CPU broadcast, every collective gives the right bytes,
the variable-size ones are grouped NCCL calls, all run on the stream they are given, and
nothing copies to the host.  Without the stand-in, the backend must say why it cannot run."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(os.path.dirname(HERE), "support")
sys.path[:0] = [HERE, SUPPORT]

pytestmark = pytest.mark.timeout(180)


def _job_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    env.update(FUSE_BACKEND="gloo", FUSE_FAKE_NCCL_DIR=str(tmp_path), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([HERE, SUPPORT, env.get("PYTHONPATH", "")]))
    return env


def test_standin_wiring_nccl_group_collectives(tmp_path):
    """Stand-in (no GPU): every NCCLGroup collective on 2 real workers."""
    import fuse
    import workers_nccl_standin as w
    res = fuse.run(w.group_collectives, np=2, env=_job_env(tmp_path))
    for r, out in enumerate(res):
        assert out["rank_size"] == (r, 2)
        assert out["allreduce"] == [1.0, 3.0, 5.0, 7.0]
        assert out["min"] == [0, 4]
        assert out["allgatherv"] == [7, 8, 8]
        assert out["allgather"] == [0.0, 0.0, 1.0, 1.0]
        assert out["broadcast"] == [1, 1, 1]
        assert out["alltoallv_calls"][0] == "groupStart"
        assert out["alltoallv_calls"][-1] == "groupEnd"
        assert set(out["alltoallv_calls"][1:-1]) == {"send", "recv"}
        assert out["reducescatter"] == ([0.0, 3.0] if r == 0 else [6.0, 9.0])
        assert out["reducescatter_uneven"] == ([0.0, 1.0] if r == 0 else [2.0])
        assert len(out["streams"]) == 1 and not out["streams"][0].startswith("external")
        assert out["host_copies"] == []
    assert res[0]["alltoallv"] == [0.0, 10.0, 11.0]
    assert res[1]["alltoallv"] == [1.0, 2.0, 12.0]
    assert [c[0] for c in res[0]["uid_calls"]] == ["get_unique_id", "NcclCommunicator"]
    assert [c[0] for c in res[1]["uid_calls"]] == ["NcclCommunicator"]


def test_nccl_unavailable_here_says_why(monkeypatch):
    """Real environment (no CuPy, no GPU): the backend is listed, does not load, and says why;
    nccl_built() is 0.  With a CuPy that sees no device, the reason names that instead."""
    import fuse
    from fuse.backends import describe_device_backends
    from fuse.backends.nccl import NCCLBackend
    monkeypatch.setitem(sys.modules, "cupy", None)     # as if CuPy were not installed
    ok, why = NCCLBackend.is_available()
    assert not ok and "CuPy is not installed" in why and "fuse-dl[nccl]" in why
    assert fuse.nccl_built() == 0 and fuse.cuda_built() is False
    (row,) = [r for r in describe_device_backends() if r.name == "nccl"]
    assert not row.loads and "CuPy" in row.reason

    import fake_cupy
    names = ("cupy", "cupy.cuda", "cupy.cuda.nccl")
    saved = {name: sys.modules.pop(name, None) for name in names}
    try:
        fake_cupy.install().cuda.runtime.getDeviceCount = lambda: 0
        ok, why = NCCLBackend.is_available()
    finally:
        for name in names:
            sys.modules.pop(name, None)
            if saved[name] is not None:
                sys.modules[name] = saved[name]
    assert not ok and why == "no CUDA device is visible"


def test_nccl_as_cpu_backend_says_use_fuse_gpu_backend():
    """Real environment: FUSE_BACKEND=nccl is refused with a pointer to FUSE_GPU_BACKEND."""
    from fuse.backends import load_backend
    from fuse.exceptions import BackendUnavailable
    with pytest.raises(BackendUnavailable, match="select it with FUSE_GPU_BACKEND"):
        load_backend("nccl")


def test_info_tells_where_cuda_tensors_go():
    """Real environment (no GPU): ``python -m fuse.info`` lists nccl and says CUDA tensors are
    staged through host memory, and why."""
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    out = subprocess.run([sys.executable, "-m", "fuse.info"], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    assert "nccl" in out
    # here: no CuPy (scripts/setup.sh installs none), or CuPy without a CUDA driver/device
    assert ("CUDA tensors: staged through host memory (nccl: CuPy is not installed" in out
            or "CUDA tensors: staged through host memory (nccl: no CUDA device" in out), out
