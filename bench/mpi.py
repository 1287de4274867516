"""fuse on the MPI backend against raw mpi4py, in the same job: 64 MiB float32 allreduce
bandwidth and 4-byte allreduce latency.

    python bench/mpi.py [-np 2] [--rounds 9] [--big-mib 64] [--latency-calls 2000]

Starts itself under ``mpiexec -n NP`` (unless already running under an MPI launcher).  Each
round times fuse then raw ``comm.Allreduce`` on the same arrays (rounds alternate, so drift
hits both), with a barrier before every measurement; rank 0 prints the medians and the
ratios.  Both sides reduce in place (``fuse.allreduce_`` / ``Allreduce(IN_PLACE, ...)``);
the out-of-place pair (``fuse.allreduce`` / ``Allreduce(x, y)`` into a preallocated ``y``) is
printed too.  Engine knobs come from the environment as usual (FUSE_INLINE_THRESHOLD=0 sends
the 4-byte allreduce through MPI instead of the negotiation).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

import numpy as np

LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def _timed(fn, barrier) -> float:
    barrier()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--big-mib", type=int, default=64)
    ap.add_argument("--latency-calls", type=int, default=2000)
    args = ap.parse_args()

    if not any(os.environ.get(v) for v in LAUNCHER_VARS):
        mpiexec = shutil.which("mpiexec") or shutil.which("mpirun")
        if not mpiexec:
            sys.exit("bench/mpi.py: no mpiexec on PATH (pip install 'fuse[mpi]')")
        env = dict(os.environ, FUSE_BACKEND="mpi")
        os.execve(mpiexec, [mpiexec, "-n", str(args.np), sys.executable, *sys.argv], env)

    import fuse
    from mpi4py import MPI

    fuse.init()
    comm = MPI.COMM_WORLD
    rank, size = fuse.rank(), fuse.size()
    assert fuse.mpi_enabled(), "run with FUSE_BACKEND=mpi"
    n_big = args.big_mib * (1 << 18)
    big = np.zeros(n_big, dtype=np.float32)         # zeros: sums stay finite over every round
    out = np.empty_like(big)
    small = np.ones(1, dtype=np.float32)
    small_out = np.empty_like(small)
    k = args.latency_calls

    def fuse_big_inplace():
        fuse.allreduce_(big, name="big", op=fuse.Sum)

    def raw_big_inplace():
        comm.Allreduce(MPI.IN_PLACE, big, MPI.SUM)

    def fuse_big():
        fuse.allreduce(big, name="big.out", op=fuse.Sum)

    def raw_big():
        comm.Allreduce(big, out, MPI.SUM)

    def fuse_small():
        for _ in range(k):
            fuse.allreduce(small, name="small", op=fuse.Sum)

    def raw_small():
        for _ in range(k):
            comm.Allreduce(small, small_out, MPI.SUM)

    pairs = {"big in place": (fuse_big_inplace, raw_big_inplace),
             "big out of place": (fuse_big, raw_big),
             "4 B": (fuse_small, raw_small)}
    for fz, raw in pairs.values():      # warm-up: caches, fusion buffer, MPI connections
        fz()
        raw()
    times: dict[str, dict[str, list[float]]] = {key: {"fuse": [], "mpi4py": []} for key in pairs}
    for _ in range(args.rounds):
        for key, (fz, raw) in pairs.items():
            times[key]["fuse"].append(_timed(fz, comm.Barrier))
            times[key]["mpi4py"].append(_timed(raw, comm.Barrier))
    med = {key: {side: statistics.median(v) for side, v in d.items()} for key, d in times.items()}
    if rank == 0:
        print(f"fuse MPI backend vs raw mpi4py, {size} ranks, {MPI.Get_library_version().splitlines()[0]}, "
              f"thread level {MPI.Query_thread()}, {args.rounds} alternating rounds, medians")
        mib = args.big_mib
        for key in ("big in place", "big out of place"):
            f, r = med[key]["fuse"], med[key]["mpi4py"]
            print(f"  {mib} MiB allreduce ({key}): fuse {f * 1e3:8.2f} ms = "
                  f"{mib / 1024 / f:5.2f} GiB/s | mpi4py {r * 1e3:8.2f} ms = "
                  f"{mib / 1024 / r:5.2f} GiB/s | bandwidth ratio fuse/mpi4py {r / f:.3f}")
        f, r = med["4 B"]["fuse"] / k, med["4 B"]["mpi4py"] / k
        print(f"  4 B allreduce latency: fuse {f * 1e6:7.1f} us | mpi4py {r * 1e6:7.1f} us | "
              f"fuse/mpi4py {f / r:.1f}x  (FUSE_INLINE_THRESHOLD="
              f"{os.environ.get('FUSE_INLINE_THRESHOLD', 'default')})")
    fuse.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
