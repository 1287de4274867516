"""fuse's core collectives against torch.distributed (gloo): 4-byte latency, 64 MiB bandwidth and
the CPU of an idle engine.

    fuserun -np 2 python bench/studies/core.py [--rounds 7] [--idle-seconds 5] [--json out.json]

A thin command over the suite's pieces: the allreduce comparison of bench/suite/allreduce.py at two
sizes (alternating rounds, medians, ratio fuse/torch) and the idle measurement of
bench/suite/overhead.py.
"""

import argparse
import os
import sys

import numpy as np

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import allreduce  # noqa: E402
import common  # noqa: E402
import machine  # noqa: E402
from overhead import idle_cpu  # noqa: E402

import fuse  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--bandwidth-mib", type=int, default=64)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    fuse.init()
    make_sides, close = allreduce.gloo_sides(fuse)
    rows = allreduce.sweep([4, args.bandwidth_mib * common.MIB], args.rounds, make_sides,
                           fuse.barrier)
    idle = idle_cpu(args.idle_seconds)
    idle_all = fuse.allgather(np.array([idle["engine_thread"]]), name="idle")
    if fuse.rank() == 0:
        allreduce.print_rows(rows, f"fuse (gloo) vs torch.distributed (gloo), {fuse.size()} "
                                   f"ranks, {args.rounds} rounds, medians")
        print("idle engine thread: " + ", ".join(f"{x * 100:.3f}% of a core" for x in idle_all))
        common.write_json(args.json, common.job_record(
            "core", rows, machine.describe(), vars(args),
            idle_engine_core_fraction=[float(x) for x in idle_all]))
    close()
    fuse.shutdown()


if __name__ == "__main__":
    main()
