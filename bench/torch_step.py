"""Gradient synchronisation of a ResNet-50-shaped parameter set: fuse vs torch DDP (gloo).

Run with 2 workers:  fuserun -np 2 python bench/torch_step.py [--rounds 6 --steps 5]

The model holds ResNet-50's 161 parameter tensors (25.6 M float32 values) and nothing else;
its forward is ``s * sum_p p.sum() * w_p`` with ``s`` from the rank's batch, so the backward
pass writes a full gradient into every parameter (in reverse order) at little compute cost.
Step = zero_grad + forward + backward + optimizer step (SGD with momentum).

Reported (rank 0): median step time of fuse's DistributedOptimizer and of
DistributedDataParallel, measured in alternating rounds in the same run, and their ratio; the
backward pass alone before and after ``hvd.init()`` (fuse idle) and with the optimizer's hooks
attached (allreduces overlapping backward).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import fuse.torch as hvd


def resnet50_shapes() -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []

    def conv_bn(cout, cin, k):
        shapes.append((cout, cin, k, k))
        shapes.extend([(cout,), (cout,)])

    conv_bn(64, 3, 7)
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            conv_bn(width, cin, 1)
            conv_bn(width, width, 3)
            conv_bn(width * 4, width, 1)
            if b == 0:
                conv_bn(width * 4, cin, 1)
            cin = width * 4
    shapes.extend([(1000, 2048), (1000,)])
    return shapes


class ShapedModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.params = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(s) * 0.01) for s in resnet50_shapes())
        self.register_buffer("w", torch.linspace(0.5, 1.5, len(self.params)))

    def forward(self, x):
        s = x.mean()
        total = x.new_zeros(())
        for k, p in enumerate(self.params):
            total = total + p.sum() * self.w[k]
        return total * s


def timed(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--backward-reps", type=int, default=30)
    ap.add_argument("--port", type=int, default=0, help="torch.distributed port (0: pick)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    model = ShapedModel()
    n_values = sum(p.numel() for p in model.parameters())
    x = torch.randn(32, 8) + float(os.environ.get("FUSE_RANK", "0"))

    def backward_only():
        model.zero_grad(set_to_none=False)
        model(x).backward()

    timed(backward_only, 5)
    bw_plain = timed(backward_only, args.backward_reps)

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    timed(backward_only, 5)
    bw_fuse_idle = timed(backward_only, args.backward_reps)

    # torch.distributed for DDP, port agreed through fuse
    import socket
    import torch.distributed as dist
    port = args.port
    if not port and rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = hvd.broadcast_object(port, 0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)

    fuse_model = model
    ddp_base = ShapedModel()
    ddp_base.load_state_dict(model.state_dict())
    ddp_model = torch.nn.parallel.DistributedDataParallel(ddp_base)
    fuse_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(fuse_model.parameters(), lr=1e-4, momentum=0.9),
        named_parameters=fuse_model.named_parameters())
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

    def ddp_backward_hooked():
        ddp_opt.zero_grad()
        t0 = time.perf_counter()
        ddp_model(x).backward()   # DDP waits for its last bucket at the end of backward
        dt = time.perf_counter() - t0
        ddp_opt.step()
        return dt

    for _ in range(3):
        fuse_step()
        ddp_step()
    fuse_times, ddp_times, hooked, ddp_hooked = [], [], [], []
    for r in range(args.rounds):
        order = (("fuse", fuse_step), ("ddp", ddp_step))
        if r % 2:
            order = order[::-1]
        for label, fn in order:
            hvd.barrier()
            (fuse_times if label == "fuse" else ddp_times).extend(timed(fn, args.steps))
        hvd.barrier()
        hooked.extend(fuse_backward_hooked() for _ in range(args.steps))
        hvd.barrier()
        ddp_hooked.extend(ddp_backward_hooked() for _ in range(args.steps))

    # the two models must still agree (same data, same updates)
    diff = max((a - b).abs().max().item()
               for a, b in zip(fuse_model.parameters(), ddp_model.module.parameters()))

    med = statistics.median
    if rank == 0:
        print(f"parameter set: {len(list(model.parameters()))} tensors, {n_values / 1e6:.2f} M "
              f"float32 values, {size} workers, torch {torch.__version__}")
        print(f"step   fuse DistributedOptimizer  median {med(fuse_times) * 1e3:8.1f} ms "
              f"(n={len(fuse_times)})")
        print(f"step   torch DDP (gloo)           median {med(ddp_times) * 1e3:8.1f} ms "
              f"(n={len(ddp_times)})")
        print(f"step   ratio fuse/DDP             {med(fuse_times) / med(ddp_times):8.3f}")
        print(f"backward without fuse             median {med(bw_plain) * 1e3:8.1f} ms")
        print(f"backward with fuse initialized    median {med(bw_fuse_idle) * 1e3:8.1f} ms "
              f"(ratio {med(bw_fuse_idle) / med(bw_plain):.3f})")
        print(f"backward with fuse hooks (overlapping allreduce) median "
              f"{med(hooked) * 1e3:8.1f} ms (ratio {med(hooked) / med(bw_plain):.3f})")
        print(f"backward of DDP (includes its allreduce wait) median "
              f"{med(ddp_hooked) * 1e3:8.1f} ms")
        print(f"max |fuse - DDP| parameter difference after the run: {diff:.2e}")
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
