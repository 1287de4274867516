"""Worker side of the real-GPU tests: each rank on its own GPU (local rank), real CuPy/NCCL."""

from __future__ import annotations

import contextlib
import os

import torch

import fuse.torch as hvd


def _device():
    hvd.init()
    torch.cuda.set_device(hvd.local_rank())
    return torch.device("cuda", hvd.local_rank())


def collectives():
    """Every collective on CUDA tensors; results on the host only after the checks' end."""
    from fuse.worker import device_path
    dev = _device()
    r, n = hvd.rank(), hvd.size()
    out = {"device_path": device_path.get() is not None}
    t = torch.arange(6, dtype=torch.float32, device=dev) + r
    red = hvd.allreduce(t, name="ar")
    out["allreduce_on_device"] = red.is_cuda
    out["allreduce"] = red.tolist()
    g = [torch.full((3,), float(r + 1), device=dev), torch.full((2, 2), 10.0 * r, device=dev)]
    hvd.grouped_allreduce_(g, op=hvd.Sum, name="gar")
    out["grouped"] = [x.tolist() for x in g]
    out["allgather"] = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int32, device=dev),
                                     name="ag").tolist()
    b = torch.full((4,), float(r), device=dev)
    hvd.broadcast_(b, root_rank=n - 1, name="bc")
    out["broadcast"] = b.tolist()
    rows, received = hvd.alltoall(torch.arange(2 * n, dtype=torch.float64, device=dev) + 10 * r,
                                  splits=[2] * n, name="a2a")
    out["alltoall"] = (rows.tolist(), received.tolist())
    out["reducescatter"] = hvd.reducescatter(torch.ones(2 * n, 2, device=dev) * (r + 1),
                                             op=hvd.Sum, name="rs").tolist()
    # a result used right away on the current stream must already hold the reduction
    x = torch.ones(1 << 20, device=dev)
    y = hvd.allreduce(x, op=hvd.Sum, name="big") * 2
    out["stream_order"] = float(y[0].item()) == 2.0 * n
    return out


def training():
    """DistributedOptimizer with the model on the GPU: the replicas stay identical."""
    dev = _device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1)).to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(5):
        x = torch.randn(4, 8, device=dev) + hvd.rank()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return [p.detach().cpu().tolist() for p in model.parameters()]


# -- shared by the GPU tests (tests/gpu) and their stand-in runs (tests/frameworks/torch) -------
#
# GPU_TEST_DEVICE says where "device" tensors live: "cuda" (default: this rank's GPU, real CuPy
# and NCCL), "standin" (CPU tensors routed through the device path onto the recorded NCCL of
# tests/support/fake_cupy.py: the checks' logic, not a GPU) or "cpu" (plain CPU tensors on the
# host backend).  Only "cuda" says anything about a GPU.

def _mode() -> str:
    return os.environ.get("GPU_TEST_DEVICE", "cuda")


def _target(shared_gpu: bool = False):
    """Where this rank's "device" tensors go; installs the stand-in when asked for.
    ``shared_gpu``: every rank on GPU 0 (two ranks sharing one GPU)."""
    mode = _mode()
    if mode == "standin":
        import fake_torch_cuda
        fake_torch_cuda.install()      # before init: the device path loads the stand-in
    hvd.init(process_sets="dynamic")   # collectives_vs_cpu adds a process set
    if mode in ("standin", "cpu"):
        return torch.device("cpu")
    index = 0 if shared_gpu else hvd.local_rank()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


@contextlib.contextmanager
def _host_path():
    """Calls inside run on the host path: CPU tensors are that already, except under the
    stand-in, which takes every CPU tensor for a device tensor until told otherwise."""
    if _mode() != "standin":
        yield
        return
    from fuse.frameworks.torch import device
    device.cuda.device_type = "none"
    try:
        yield
    finally:
        device.cuda.device_type = "cpu"


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6,
              torch.float64: 1e-12}


def _cases(r: int, n: int, ps):
    """(label, call) pairs: ``call(make)`` runs one collective on tensors put where ``make``
    puts them and returns its results as a list of tensors.  Names are made unique by the
    caller's suffix."""
    cases = []

    def allreduce(dtype, op, **kw):
        def call(make, sfx):
            base = torch.arange(1, 7, dtype=torch.float64).reshape(2, 3) * (r + 1)
            if op == hvd.Product:       # small values: no overflow in float16 or int32
                base = torch.tensor([[1, 2, 1], [3, 1, 2]], dtype=torch.float64) + (r % 2)
            if "process_set" in kw and not kw["process_set"].included():
                return []       # not a member: nothing to compare on this rank
            return [hvd.allreduce(make(base.to(dtype)), op=op, name=f"ar.{sfx}", **kw)]
        return call

    ops = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
           "product": hvd.Product}
    for dtype in (*_FLOATS, torch.int32, torch.int64):
        for op_name, op in ops.items():
            if op_name == "average" and dtype in (torch.bfloat16, torch.int32, torch.int64):
                continue    # averaging bfloat16 or integers raises on the device (README)
            cases.append((f"allreduce {op_name} {str(dtype)[6:]}", allreduce(dtype, op)))
    cases.append(("allreduce scaled float32",
                  allreduce(torch.float32, hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)))
    cases.append(("allreduce process set", allreduce(torch.float32, hvd.Sum, process_set=ps)))

    def grouped(make, sfx):
        g = [make(torch.full((3,), float(r + 1))), make(torch.full((2, 2), 10.0 * r)),
             make(torch.arange(5, dtype=torch.float32) * (r + 1))]
        hvd.grouped_allreduce_(g, op=hvd.Sum, name=f"gar.{sfx}")
        return g
    cases.append(("grouped allreduce_", grouped))

    def grouped_average(make, sfx):
        return hvd.grouped_allreduce([make(torch.ones(4, dtype=torch.float64) * r),
                                      make(torch.arange(3, dtype=torch.float64) + r)],
                                     op=hvd.Average, name=f"gavg.{sfx}")
    cases.append(("grouped allreduce average", grouped_average))

    for dtype in (torch.float32, torch.float16, torch.int32):
        def allgather(make, sfx, dtype=dtype):   # rows differ from rank to rank
            rows = torch.arange((r + 2) * 3, dtype=torch.float64).reshape(r + 2, 3) + 100 * r
            return [hvd.allgather(make(rows.to(dtype)), name=f"ag.{sfx}")]
        cases.append((f"allgather uneven {str(dtype)[6:]}", allgather))

    def broadcast(make, sfx):
        b = make(torch.arange(4, dtype=torch.float32) + 10 * r)
        hvd.broadcast_(b, root_rank=n - 1, name=f"bc.{sfx}")
        return [b, hvd.broadcast(make(torch.full((2,), r, dtype=torch.int64)), root_rank=0,
                                 name=f"bc2.{sfx}")]
    cases.append(("broadcast", broadcast))

    def alltoall(make, sfx):
        splits = [(r + k) % 2 + 1 for k in range(n)]
        t = torch.arange(sum(splits) * 2, dtype=torch.float32).reshape(-1, 2) + 100 * r
        rows, received = hvd.alltoall(make(t), splits=splits, name=f"a2a.{sfx}")
        return [rows, received]
    cases.append(("alltoall with splits", alltoall))

    for op in (hvd.Sum, hvd.Average):
        def reducescatter(make, sfx, op=op):
            t = torch.arange(2 * n * 3, dtype=torch.float32).reshape(2 * n, 3) * (r + 1)
            return [hvd.reducescatter(make(t), op=op, name=f"rs.{sfx}")]
        cases.append((f"reducescatter {'sum' if op == hvd.Sum else 'average'}", reducescatter))
    return cases


def collectives_vs_cpu():
    """Every collective of fuse.torch on "device" tensors and on CPU tensors, same inputs:
    which cases ran, which differed (label, device value, CPU value), which raised, and which
    results did not stay on the device."""
    dev = _target()
    r, n = hvd.rank(), hvd.size()
    ps = hvd.add_process_set([0]) if n > 1 else hvd.global_process_set
    out = {"checked": [], "mismatches": [], "errors": [], "off_device": [],
           "device_path": None}
    for i, (label, call) in enumerate(_cases(r, n, ps)):
        try:
            on_dev = call(lambda t: t.to(dev), f"{i}.dev")
            with _host_path():
                on_cpu = call(lambda t: t, f"{i}.cpu")
        except Exception as err:
            out["errors"].append(f"{label}: {type(err).__name__}: {err}")
            continue
        out["checked"].append(label)
        for k, (a, b) in enumerate(zip(on_dev, on_cpu)):
            if a.device.type != dev.type:
                out["off_device"].append(f"{label}[{k}] on {a.device}")
            a = a.detach().to("cpu")
            same = (a.dtype == b.dtype and a.shape == b.shape and
                    (torch.allclose(a.double(), b.double(), rtol=_TOLERANCE[a.dtype], atol=0)
                     if a.dtype in _TOLERANCE else torch.equal(a, b)))
            if not same:
                out["mismatches"].append((label, k, a.tolist(), b.tolist()))
    from fuse.worker import device_path
    out["device_path"] = device_path.get() is not None
    if n > 1:
        hvd.remove_process_set(ps)
    return out


def _training_data(rows: int):
    g = torch.Generator().manual_seed(1)
    return torch.randn(rows, 8, generator=g), torch.randn(rows, 1, generator=g)


def _training_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _train(model, opt, x, y, steps):
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().to("cpu").double().tolist() for p in model.parameters()]


def staged_training(steps: int, batch: int):
    """DistributedOptimizer with every rank's model on GPU 0 (run with no GPU backend, so
    CUDA tensors are staged through the host backend): rank r trains on rows
    [r*batch, (r+1)*batch) of the combined batch.  Returns the weights and where they were."""
    dev = _target(shared_gpu=True)
    r, n = hvd.rank(), hvd.size()
    model = _training_model().to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = _training_data(batch * n)
    x, y = x[r * batch:(r + 1) * batch].to(dev), y[r * batch:(r + 1) * batch].to(dev)
    params = _train(model, opt, x, y, steps)
    from fuse.worker import device_path
    return {"params": params, "device": str(next(model.parameters()).device),
            "staged": device_path.get() is None}


def combined_batch_training(steps: int, rows: int, device: str):
    """The same model and data in one process without fuse: the whole batch at once."""
    model = _training_model().to(device)
    x, y = _training_data(rows)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return _train(model, opt, x.to(device), y.to(device), steps)


def placement_mismatch():
    """Rank 0 allreduces a CUDA tensor, rank 1 a CPU tensor of the same name: the error each
    rank gets, then a collective that still works."""
    dev = _target(shared_gpu=True)
    r = hvd.rank()
    t = torch.ones(2, device=dev) if r == 0 else torch.ones(2)
    try:
        hvd.allreduce(t, name="cuda.vs.cpu")
        error = "no error"
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
    after = hvd.allreduce(torch.ones(2), name="after", op=hvd.Sum).tolist()
    return {"error": error, "after": after}


def timeline_sees_device(path: str):
    """One device allreduce with the timeline on: is it in the timeline?"""
    dev = _target()
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(1 << 10, device=dev), name="timed.on.device")
    hvd.barrier()
    hvd.stop_timeline()
    from fuse.worker import device_path
    return {"device_path": device_path.get() is not None}


def case_labels() -> list[str]:
    """The labels :func:`collectives_vs_cpu` reports as checked when every case runs."""
    return [label for label, _ in _cases(0, 1, None)]
