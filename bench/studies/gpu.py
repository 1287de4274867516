"""fuse on one GPU: the engine's cost per CUDA allreduce, the fusion buffer's copies, and
DistributedOptimizer's overhead on a ResNet-50 training step.  Needs a CUDA GPU, CuPy with
NCCL and torch with CUDA; one process, size 1 (no launcher).

    python bench/studies/gpu.py [--rounds 3 --json out.json]

1. allreduce (float32, Sum), 4 B to 256 MiB: fuse.torch's ``allreduce_`` on a CUDA tensor
   (NCCL through CuPy, at size 1) against a raw NCCL allreduce through CuPy on the same stream
   kind and against torch.distributed's NCCL at world size 1.  Each measurement is a run of
   back-to-back calls ended by ``torch.cuda.synchronize()``: at small sizes the per-call time
   is the engine's own cost (negotiation, cycle, stream events), at large ones NCCL's copy.
2. fusion buffer: a grouped allreduce of tensors that do not lie back to back (so the device
   executor packs them into its fusion buffer and unpacks the result) against one allreduce of
   the same bytes; the difference is the packing and unpacking, two copies of the bytes, whose
   throughput is compared with a device-to-device copy (``Tensor.copy_``) of the same bytes.
   Goal: >= 80 % of the copy's throughput.  The difference also holds the per-tensor engine
   work, so this is a lower bound on the copies' throughput.
3. a ResNet-50 training step (torchvision's, or the same network from torch.nn when torchvision
   is missing), batch 64, bf16 autocast, SGD, channels-last: with DistributedOptimizer (size 1:
   the gradients still go through the engine and NCCL) against the same loop without fuse.
   Goal: overhead <= 3 %.

Each comparison alternates its sides round by round (bench/suite/common.py).  The record names
the GPU, its driver, CUDA, torch, CuPy and NCCL.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)

MIB = 1 << 20
SIZES = [4, 64, 1 << 10, 16 << 10, 256 << 10, 4 * MIB, 64 * MIB, 256 * MIB]


def gpu_versions(torch) -> dict:
    """The GPU, its driver and the CUDA, torch, CuPy and NCCL versions, as this process sees
    them."""
    import cupy
    from cupy.cuda import nccl
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        driver = str(cupy.cuda.runtime.driverGetVersion())
    return {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "gpus_visible": torch.cuda.device_count(), "driver": driver,
            "cuda_torch": torch.version.cuda,
            "cuda_runtime_cupy": cupy.cuda.runtime.runtimeGetVersion(),
            "torch": torch.__version__, "cupy": cupy.__version__,
            "nccl_cupy": nccl.get_version(),
            "nccl_torch": nccl_text(torch.cuda.nccl.version())}


def nccl_text(version) -> str:
    """torch.cuda.nccl.version(): a (major, minor, patch) tuple, an int in older torch."""
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def timed(torch, fn, calls: int) -> float:
    """Seconds per call of ``calls`` back-to-back calls of ``fn``, the device's work included."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def calls_for(nbytes: int) -> int:
    """Enough calls that one measurement takes milliseconds, few at the large sizes."""
    return max(3, min(200, (256 * MIB) // max(nbytes, 1) // 16))


def allreduce_rows(torch, hvd, rounds: int) -> list[dict]:
    import torch.distributed as dist
    from common import alternating_rounds, comparison, format_bytes, free_port
    from cupy.cuda import nccl

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}",
                            world_size=1, rank=0, device_id=torch.device("cuda", 0))
    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    rows = []
    for nbytes in SIZES:
        t = torch.ones(max(nbytes // 4, 1), device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        calls = calls_for(nbytes)

        def fuse_call():
            hvd.allreduce_(t, op=hvd.Sum, name="bench.allreduce")

        def nccl_call():
            comm.allReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl.NCCL_FLOAT32,
                           nccl.NCCL_SUM, stream)

        def torch_call():
            dist.all_reduce(t)

        for fn in (fuse_call, nccl_call, torch_call):    # warm: communicators, caches
            timed(torch, fn, 2)
        samples = alternating_rounds({"fuse": lambda: timed(torch, fuse_call, calls),
                                      "nccl_cupy": lambda: timed(torch, nccl_call, calls),
                                      "torch_nccl": lambda: timed(torch, torch_call, calls)},
                                     rounds, torch.cuda.synchronize)
        row = comparison(f"allreduce {format_bytes(nbytes)}", samples, "s/call",
                         competitor="nccl_cupy", bytes=nbytes, calls=calls)
        row["ratio_torch"] = row["median"]["fuse"] / row["median"]["torch_nccl"]
        row["engine_cost_s"] = row["median"]["fuse"] - row["median"]["nccl_cupy"]
        rows.append(row)
        print(f"  {row['case']:>22}: fuse {row['median']['fuse'] * 1e6:9.1f} us  "
              f"raw NCCL {row['median']['nccl_cupy'] * 1e6:9.1f} us  "
              f"torch.distributed {row['median']['torch_nccl'] * 1e6:9.1f} us", flush=True)
        del t
    dist.destroy_process_group()
    return rows


def fusion_rows(torch, hvd, rounds: int) -> list[dict]:
    """Packing into and out of the fusion buffer against a device-to-device copy."""
    from common import alternating_rounds, comparison, format_bytes, resnet50_shapes
    rows = []
    cases = [("16 tensors of 2 MiB", [(512 * 1024,)] * 16),
             ("ResNet-50's 161 gradients", resnet50_shapes())]
    for label, shapes in cases:
        numels = [int(torch.Size(s).numel()) for s in shapes]
        total = sum(numels)
        # each tensor a row of a wider matrix: not back to back, so the executor packs them
        backing = torch.ones(len(numels), max(numels) + 64, device="cuda")
        parts = [backing[i, :k] for i, k in enumerate(numels)]
        whole = torch.ones(total, device="cuda")
        copy_dst = torch.empty(total, device="cuda")

        def grouped():
            hvd.grouped_allreduce_(parts, op=hvd.Sum, name="bench.fused")

        def single():
            hvd.allreduce_(whole, op=hvd.Sum, name="bench.whole")

        def copy():
            copy_dst.copy_(whole)

        calls = 20
        for fn in (grouped, single, copy):
            timed(torch, fn, 2)
        samples = alternating_rounds({"grouped": lambda: timed(torch, grouped, calls),
                                      "single": lambda: timed(torch, single, calls),
                                      "d2d_copy": lambda: timed(torch, copy, calls)},
                                     rounds, torch.cuda.synchronize)
        row = comparison(f"fusion buffer, {label} ({format_bytes(total * 4)})", samples,
                         "s/call", fuse="grouped", competitor="single", bytes=total * 4,
                         tensors=len(numels))
        med = row["median"]
        packing = med["grouped"] - med["single"]        # two copies of the bytes
        copy_rate = total * 4 / med["d2d_copy"]
        pack_rate = 2 * total * 4 / packing if packing > 0 else float("inf")
        row.update(pack_unpack_bytes_per_s=pack_rate, d2d_copy_bytes_per_s=copy_rate,
                   fraction_of_copy=pack_rate / copy_rate, goal_fraction=0.8)
        rows.append(row)
        print(f"  {row['case']}: pack+unpack {pack_rate / 1e9:.0f} GB/s, d2d copy "
              f"{copy_rate / 1e9:.0f} GB/s: {pack_rate / copy_rate:.0%} (goal >= 80 %)",
              flush=True)
        del backing, parts, whole, copy_dst
    return rows


def resnet50(torch):
    """torchvision's ResNet-50, or the same network from torch.nn alone."""
    try:
        import torchvision
        return torchvision.models.resnet50(), "torchvision.models.resnet50"
    except ImportError:
        pass
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(True), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = (nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers), "ResNet-50 from torch.nn (no torchvision)"


def resnet_rows(torch, hvd, rounds: int, steps: int, batch: int) -> list[dict]:
    from common import alternating_rounds, comparison
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def loop(distributed: bool):
        torch.manual_seed(0)
        model, source = resnet50(torch)
        model = model.cuda().to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if distributed:
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return step, source

    fuse_step, source = loop(True)
    plain_step, _ = loop(False)
    for fn in (fuse_step, plain_step):
        timed(torch, fn, 3)     # cuDNN's choices, the gradient layout, the allocator
    samples = alternating_rounds({"fuse": lambda: timed(torch, fuse_step, steps),
                                  "no_fuse": lambda: timed(torch, plain_step, steps)},
                                 rounds, torch.cuda.synchronize)
    row = comparison(f"ResNet-50 step, batch {batch}, bf16 autocast", samples, "s/step",
                     model=source, steps=steps, batch=batch, goal_overhead=0.03)
    row["overhead"] = row["ratio"] - 1
    print(f"  {row['case']}: fuse {row['median']['fuse'] * 1e3:.1f} ms, without "
          f"{row['median']['no_fuse'] * 1e3:.1f} ms: overhead {row['overhead']:+.1%} "
          f"(goal <= 3 %)", flush=True)
    return [row]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="ResNet-50 steps per measurement")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--parts", default="allreduce,fusion,resnet50",
                        help="which of allreduce, fusion, resnet50 to run")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    if not torch.cuda.is_available():
        sys.exit("bench/studies/gpu.py needs a CUDA GPU: torch.cuda.is_available() is False")
    from common import job_record, write_json
    from machine import describe

    import fuse.torch as hvd
    hvd.init()
    torch.cuda.set_device(0)
    gpu = gpu_versions(torch)
    print("device: " + ", ".join(f"{k} {v}" for k, v in gpu.items()), flush=True)
    parts = set(args.parts.split(","))
    rows = []
    if "allreduce" in parts:
        rows += allreduce_rows(torch, hvd, args.rounds)
    if "fusion" in parts:
        rows += fusion_rows(torch, hvd, args.rounds)
    if "resnet50" in parts:
        rows += resnet_rows(torch, hvd, args.rounds, args.steps, args.batch)
    machine = {**describe(), **gpu}
    write_json(args.json, job_record("gpu", rows, machine, vars(args),
                                     command=" ".join([sys.executable] + sys.argv)))
    hvd.shutdown()


if __name__ == "__main__":
    main()
