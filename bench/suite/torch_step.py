"""Gradient synchronisation of a ResNet-50-shaped parameter set: fuse vs torch DDP (gloo).

Run with 2 workers:  fuserun -np 2 python bench/suite/torch_step.py [--compression fp16] [--json f]
(fuse on MPI, DDP still on gloo:  FUSE_BACKEND=mpi mpiexec -n 2 python bench/suite/torch_step.py)

The model (``models.ShapedModel``) holds ResNet-50's 161 parameter tensors (25.6 M float32
values) and nothing else, so the step is dominated by gradient synchronisation.
Step = zero_grad + forward + backward + optimizer step (SGD with momentum).

``--compression fp16|bf16`` gives fuse's DistributedOptimizer ``Compression.fp16/bf16`` and DDP
the matching comm hook (``default_hooks.fp16_compress_hook``/``bf16_compress_hook``), so both
send half-width gradients.  Fusion is set from the environment as usual
(FUSE_FUSION_THRESHOLD=0: fusion off).

Reported (rank 0): median step time of fuse's DistributedOptimizer and of
DistributedDataParallel, measured in alternating rounds in the same run, and their ratio; and
the backward pass with the optimizer's hooks attached (allreduces overlapping backward) next to
DDP's backward (which waits for its last bucket).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import machine  # noqa: E402
from models import ShapedModel  # noqa: E402

import fuse.torch as hvd  # noqa: E402
from fuse.worker import lifecycle  # noqa: E402


def init_torch_distributed():
    """torch.distributed (gloo) beside fuse, on a port rank 0 picks and fuse broadcasts."""
    import torch.distributed as dist
    port = hvd.broadcast_object(common.free_port() if hvd.rank() == 0 else None, 0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=hvd.rank(),
                            world_size=hvd.size())
    return dist


def ddp_compression_hook(name: str):
    """DDP's comm hook matching fuse's Compression.<name> (None for no compression)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def bf16_compress_hook_gloo(state, bucket):
        # DDP refuses a hook *named* bf16_compress_hook unless NCCL >= 2.10 is built in; the
        # hook itself only casts and calls all_reduce, which Gloo does in bfloat16 on CPU.
        return default_hooks.bf16_compress_hook(state, bucket)

    return {"none": None, "fp16": default_hooks.fp16_compress_hook,
            "bf16": bf16_compress_hook_gloo}[name]


def step_times(fn, steps):
    """Per-step wall times of ``steps`` calls of ``fn``."""
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5, help="steps per side per round")
    ap.add_argument("--compression", choices=("none", "fp16", "bf16"), default="none")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    dist = init_torch_distributed()
    x = torch.randn(32, 8) + rank

    fuse_model = ShapedModel()
    ddp_base = ShapedModel()
    ddp_base.load_state_dict(fuse_model.state_dict())
    ddp_model = torch.nn.parallel.DistributedDataParallel(ddp_base)
    hook = ddp_compression_hook(args.compression)
    if hook is not None:
        ddp_model.register_comm_hook(None, hook)
    fuse_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(fuse_model.parameters(), lr=1e-4, momentum=0.9),
        named_parameters=fuse_model.named_parameters(),
        compression=getattr(hvd.Compression, args.compression))
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=1e-4, momentum=0.9)

    def fuse_step():
        fuse_opt.zero_grad()
        fuse_model(x).backward()
        fuse_opt.step()

    def ddp_step():
        ddp_opt.zero_grad()
        ddp_model(x).backward()
        ddp_opt.step()

    def fuse_backward_hooked():
        fuse_opt.zero_grad()
        t0 = time.perf_counter()
        fuse_model(x).backward()
        dt = time.perf_counter() - t0
        fuse_opt.synchronize()
        with fuse_opt.skip_synchronize():
            fuse_opt.step()
        return dt

    def ddp_backward():
        ddp_opt.zero_grad()
        t0 = time.perf_counter()
        ddp_model(x).backward()   # DDP waits for its last bucket at the end of backward
        dt = time.perf_counter() - t0
        ddp_opt.step()
        return dt

    for _ in range(3):
        fuse_step()
        ddp_step()
    # a round's measurement is the median of its steps; the report, the median over rounds
    steps = common.alternating_rounds(
        {"fuse": lambda: common.median(step_times(fuse_step, args.steps)),
         "DDP": lambda: common.median(step_times(ddp_step, args.steps))},
        args.rounds, hvd.barrier)
    backward = common.alternating_rounds(
        {"fuse": lambda: common.median([fuse_backward_hooked() for _ in range(args.steps)]),
         "DDP": lambda: common.median([ddp_backward() for _ in range(args.steps)])},
        args.rounds, hvd.barrier)

    # the two models must still agree (same data, same updates)
    diff = max((a - b).abs().max().item()
               for a, b in zip(fuse_model.parameters(), ddp_model.module.parameters()))
    fusion = os.environ.get("FUSE_FUSION_THRESHOLD", "default")
    backend = lifecycle.backend_name()
    label = f"fusion {'off' if fusion == '0' else 'on'}, compression {args.compression}"
    if backend != "gloo":
        label = f"fuse on {backend.upper()}, {label}"
    rows = [common.comparison(f"step, {label}", steps, unit="s", fusion_threshold=fusion,
                              compression=args.compression),
            common.comparison(f"backward with hooks, {label}", backward, unit="s",
                              fusion_threshold=fusion, compression=args.compression)]
    n_values = sum(p.numel() for p in fuse_model.parameters())
    if rank == 0:
        med = rows[0]["median"]
        print(f"ResNet-50-shaped set: {len(list(fuse_model.parameters()))} tensors, "
              f"{n_values / 1e6:.2f} M float32 values, {size} workers, {label}")
        print(f"step   fuse DistributedOptimizer  median {med['fuse'] * 1e3:8.1f} ms")
        print(f"step   torch DDP (gloo)           median {med['DDP'] * 1e3:8.1f} ms")
        print(f"step   ratio fuse/DDP             {rows[0]['ratio']:8.3f}")
        bmed = rows[1]["median"]
        print(f"backward with fuse hooks (overlapping allreduce) {bmed['fuse'] * 1e3:8.1f} ms; "
              f"DDP backward (includes its allreduce wait) {bmed['DDP'] * 1e3:8.1f} ms")
        print(f"max |fuse - DDP| parameter difference after the run: {diff:.2e}")
        common.write_json(args.json, common.job_record(
            f"torch_step_{'' if backend == 'gloo' else backend + '_'}"
            f"{'nofusion' if fusion == '0' else 'fusion'}_{args.compression}", rows,
            machine.describe(), vars(args) | {"workers": size, "fusion_threshold": fusion,
                                              "backend": backend,
                                              "tensors": len(list(fuse_model.parameters())),
                                              "values": n_values},
            max_parameter_difference=diff))
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
