"""fuse on the MPI backend against raw mpi4py, in the same job: 4-byte allreduce latency and
64 MiB float32 allreduce bandwidth.

    python bench/studies/mpi.py [-np 2] [--rounds 9] [--big-mib 64] [--json out.json]

A thin command over bench/suite/allreduce.py (``--mpi``): it starts itself under ``mpiexec -n NP``
with FUSE_BACKEND=mpi, alternates fuse and ``comm.Allreduce(IN_PLACE, ...)`` in rounds with a
barrier before each measurement, and prints medians and ratios.  Engine knobs come from the
environment as usual (FUSE_INLINE_THRESHOLD=0 sends the 4-byte allreduce through MPI instead of
the negotiation).
"""

import argparse
import os
import sys

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import allreduce  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--big-mib", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sys.argv = [allreduce.__file__,
                "--mpi", "-np", str(args.np), "--rounds", str(args.rounds),
                "--sizes", f"4,{args.big_mib}M"] + (["--json", args.json] if args.json else [])
    return allreduce.main()


if __name__ == "__main__":
    sys.exit(main())
