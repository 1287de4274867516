"""fuse's core collectives against torch.distributed (gloo) on the same machine, same run.

    fuserun -np 2 python bench/core.py [--json out.json]

Each worker initialises both fuse and torch.distributed (gloo).  Measurements alternate between
the two in rounds, so that both see the same machine conditions; the report gives medians over
rounds and the ratio fuse/torch.  Measured:

* latency of a 4-byte float32 allreduce (time per call, lower is better);
* bandwidth of a 64 MiB float32 allreduce (algorithm bandwidth: bytes / time, higher is better);
* CPU used by an idle engine (fuse initialised, nothing pending) as a fraction of one core.
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np


def timed(fn, iters):
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def thread_cpu_seconds(native_id):
    """CPU time of one thread of this process, from /proc."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks   # utime + stime


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--latency-iters", type=int, default=300)
    parser.add_argument("--bandwidth-iters", type=int, default=5)
    parser.add_argument("--bandwidth-mib", type=int, default=64)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    import fuse
    from fuse.common import basics

    fuse.init()
    rank, size = fuse.rank(), fuse.size()
    port = int(fuse.broadcast_object(_free_port() if rank == 0 else None, root_rank=0))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    torch.set_num_threads(1)

    small_np = np.ones(1, np.float32)
    small_t = torch.ones(1, dtype=torch.float32)
    n = args.bandwidth_mib * 1024 * 1024 // 4
    big_np = np.ones(n, np.float32)
    big_t = torch.ones(n, dtype=torch.float32)

    cases = {
        "latency_4B": (
            lambda: fuse.allreduce_(small_np, op=fuse.Sum, name="lat"),
            lambda: dist.all_reduce(small_t),
            args.latency_iters),
        f"allreduce_{args.bandwidth_mib}MiB": (
            lambda: fuse.allreduce_(big_np, op=fuse.Sum, name="bw"),
            lambda: dist.all_reduce(big_t),
            args.bandwidth_iters),
    }
    results = {name: {"fuse": [], "torch": []} for name in cases}
    for name, (f, t, iters) in cases.items():      # warm up both
        timed(f, max(2, iters // 10))
        timed(t, max(2, iters // 10))
    for rnd in range(args.rounds):
        for name, (f, t, iters) in cases.items():
            order = [("fuse", f), ("torch", t)] if rnd % 2 == 0 else [("torch", t), ("fuse", f)]
            for who, fn in order:
                fuse.barrier()
                results[name][who].append(timed(fn, iters))

    # Idle engine: nothing pending; how much CPU does the background thread burn?
    engine = basics.engine()
    fuse.barrier()
    before = thread_cpu_seconds(engine.thread_native_id)
    time.sleep(args.idle_seconds)
    idle_cpu = (thread_cpu_seconds(engine.thread_native_id) - before) / args.idle_seconds
    idle_all = fuse.allgather(np.array([idle_cpu]), name="idle")

    summary = {}
    for name, r in results.items():
        f_med, t_med = statistics.median(r["fuse"]), statistics.median(r["torch"])
        entry = {"fuse_s": f_med, "torch_s": t_med, "ratio_time_fuse_over_torch": f_med / t_med,
                 "fuse_all": r["fuse"], "torch_all": r["torch"]}
        if name.startswith("allreduce_"):
            nbytes = args.bandwidth_mib * 1024 * 1024
            entry["fuse_GBps"] = nbytes / f_med / 1e9
            entry["torch_GBps"] = nbytes / t_med / 1e9
            entry["ratio_bandwidth_fuse_over_torch"] = t_med / f_med
        summary[name] = entry
    summary["idle_engine_core_fraction"] = [float(x) for x in idle_all]
    summary["machine"] = {"cores": os.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__, "numpy": np.__version__,
                          "fuse": fuse.__version__, "workers": size,
                          "cpu": platform.processor() or platform.machine()}
    if rank == 0:
        lat = summary["latency_4B"]
        bw = summary[f"allreduce_{args.bandwidth_mib}MiB"]
        print(f"4-byte allreduce latency: fuse {lat['fuse_s'] * 1e6:.1f} us, torch "
              f"{lat['torch_s'] * 1e6:.1f} us, ratio {lat['ratio_time_fuse_over_torch']:.2f}x")
        print(f"{args.bandwidth_mib} MiB allreduce: fuse {bw['fuse_GBps']:.3f} GB/s, torch "
              f"{bw['torch_GBps']:.3f} GB/s, bandwidth ratio "
              f"{bw['ratio_bandwidth_fuse_over_torch']:.2f}x")
        print("idle engine thread: " + ", ".join(f"{x * 100:.3f}% of a core"
                                                 for x in summary["idle_engine_core_fraction"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=2)
    dist.destroy_process_group()
    fuse.shutdown()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
