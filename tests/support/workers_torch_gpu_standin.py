"""Worker side of test_gpu_standin.py: fuse.torch's device path on the CuPy/NCCL stand-in.

These check the wiring (which calls, in which order, no host copy), NOT a GPU: "device"
tensors are CPU tensors that the stand-in routes through the device path."""

from __future__ import annotations

import torch

import fake_cupy
import fake_torch_cuda

import fuse.torch as hvd


def _setup():
    fake_torch_cuda.install()
    hvd.init()
    del fake_cupy.CALLS[:]
    del fake_cupy.HOST_COPIES[:]


def _calls(kinds):
    return [c for c in fake_cupy.CALLS if c[0] in kinds]


def collectives():
    """Every collective of fuse.torch on the device path: results, NCCL calls, host copies."""
    _setup()
    r, n = hvd.rank(), hvd.size()
    out = {}
    t = torch.arange(6, dtype=torch.float32) + r
    out["allreduce"] = hvd.allreduce(t, name="ar").tolist()
    g = [torch.full((3,), float(r + 1)), torch.full((2, 2), float(10 * r))]
    hvd.grouped_allreduce_(g, op=hvd.Sum, name="gar")
    out["grouped"] = [x.tolist() for x in g]
    out["grouped_nccl_calls"] = len(_calls({"allReduce"})) - 1
    out["max"] = hvd.allreduce(torch.tensor([r, -r], dtype=torch.int64), op=hvd.Max,
                               name="mx").tolist()
    out["allgather"] = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int32),
                                     name="ag").tolist()
    b = torch.full((4,), float(r))
    hvd.broadcast_(b, root_rank=1, name="bc")
    out["broadcast"] = b.tolist()
    rows, received = hvd.alltoall(torch.arange(3, dtype=torch.float64) + 10 * r,
                                  splits=[1, 2] if r == 0 else [2, 1], name="a2a")
    out["alltoall"] = (rows.tolist(), received.tolist())
    out["reducescatter"] = hvd.reducescatter(torch.ones(3, 2) * (r + 1), op=hvd.Sum,
                                             name="rs").tolist()
    out["scaled"] = hvd.allreduce(torch.ones(2, dtype=torch.float64), op=hvd.Sum,
                                  prescale_factor=2.0, postscale_factor=0.25,
                                  name="scaled").tolist()
    out["host_copies"] = list(fake_cupy.HOST_COPIES)
    out["host_syncs"] = _calls({"HOST_SYNC"})
    assert n == 2
    return out


def one_engine(timeline_path):
    """What the device path shares with host tensors now that one coordinator negotiates both:
    the fusion threshold in force (rank 0 lowers it the way the autotuner does) splits a
    grouped allreduce into more NCCL calls, and the timeline records device collectives."""
    _setup()
    from fuse.worker import state
    engine = state.engine()
    g = [torch.ones(4) for _ in range(3)]          # 16 bytes each
    hvd.grouped_allreduce_(g, op=hvd.Sum, name="wide")
    wide = len(_calls({"allReduce"}))
    if hvd.rank() == 0:
        engine.tuning.set(32, *engine.tuning.values()[1:])
    hvd.barrier()                                   # the new threshold is in force on rank 0
    mark = len(_calls({"allReduce"}))
    hvd.grouped_allreduce_(g, op=hvd.Sum, name="narrow")
    narrow = len(_calls({"allReduce"})) - mark
    hvd.start_timeline(timeline_path)
    hvd.allreduce(torch.ones(3), name="timed.on.device")
    hvd.barrier()
    hvd.stop_timeline()
    return {"wide": wide, "narrow": narrow, "values": [x.tolist() for x in g]}


def order_of_calls():
    """The stream/event/NCCL calls of one allreduce, in order."""
    _setup()
    h = hvd.allreduce_async_(torch.ones(5) * hvd.rank(), name="ordered", op=hvd.Sum)
    hvd.synchronize(h)
    return [c for c in fake_cupy.CALLS if c[0] in
            ("record", "wait_event", "allReduce", "use_stream", "end_stream")]


def _error(fn):
    try:
        fn()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return "no error"


def mismatches():
    """A shape that differs between ranks, a tensor on the device on one rank and on the host
    on the other, a collective that works afterwards, then names no other rank submits (run
    with stall times of 1 and 2 s): every rank's errors."""
    _setup()
    r = hvd.rank()
    shape = _error(lambda: hvd.allreduce(torch.ones(2 + r), name="bad.shape"))
    from fuse.frameworks.torch import device
    if r == 1:          # this rank's "device" tensors take the host path for one call
        device.cuda.device_type = "none"
    placement = _error(lambda: hvd.allreduce(torch.ones(2), name="bad.placement"))
    device.cuda.device_type = "cpu"
    after = hvd.allreduce(torch.ones(2), name="after", op=hvd.Sum).tolist()
    stall = _error(lambda: hvd.allreduce(torch.ones(2), name=f"only.on.{r}"))
    return {"shape": shape, "placement": placement, "after": after, "stall": stall}


def optimizer_step():
    """DistributedOptimizer on the device path: averaged gradients, no host copy."""
    _setup()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.full((2, 4), float(hvd.rank() + 1))
    for step in range(3):
        if step == 2:       # the layout is built after the first step
            mark = len(fake_cupy.CALLS)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    flats = [(f.data_ptr(), f.numel() * f.element_size()) for f in opt._layout._flats]
    last = [c for c in fake_cupy.CALLS[mark:] if c[0] == "allReduce"]
    return {"params": [p.detach().tolist() for p in model.parameters()],
            "nccl": len(_calls({"allReduce"})), "flats": len(flats),
            "in_place": [any(a <= c[5] < a + n for a, n in flats) for c in last],
            "host_copies": list(fake_cupy.HOST_COPIES)}
