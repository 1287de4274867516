"""Allreduce latency and bandwidth from 4 B to 256 MiB: fuse against a competitor, same job.

    fuserun -np 2 python bench/allreduce.py [--json out.json]   # Gloo vs torch.distributed
    python bench/allreduce.py --mpi [--json out.json]           # MPI backend vs mpi4py

With ``--mpi`` the script starts itself under ``mpiexec -n 2`` with FUSE_BACKEND=mpi (unless an
MPI launcher started it) and compares fuse's MPI backend with raw ``comm.Allreduce``; otherwise
it compares fuse (Gloo backend) with ``torch.distributed`` (gloo).  Both sides reduce float32
zeros (``--dtype float16``: half floats) in place with a sum.  For each size, rounds alternate
the two sides (barrier before each); a measurement is the mean time of ``calls`` back-to-back
allreduces, fewer calls for bigger sizes.  Reported per size: median time per call, algorithm
bandwidth (bytes / time) and the ratio fuse/competitor of the times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import machine  # noqa: E402

LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def default_sizes(step: int = 8, top: int = 256 * common.MIB) -> list[int]:
    """4 B, then x``step`` while below ``top``, then ``top`` itself."""
    sizes, n = [], 4
    while n < top:
        sizes.append(n)
        n *= step
    return sizes + [top]


def calls_for(nbytes: int, max_calls: int = 200) -> int:
    """Calls per measurement: about 16 MiB of traffic, at least 2 and at most ``max_calls``."""
    return max(2, min(max_calls, 16 * common.MIB // nbytes))


def parse_sizes(text: str) -> list[int]:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for item in text.split(","):
        item = item.strip().upper().removesuffix("IB").removesuffix("B")
        unit = item[-1] if item and item[-1] in units else ""
        out.append(int(float(item[:len(item) - len(unit)]) * units[unit]))
    return out


def sweep(sizes: list[int], rounds: int, make_sides, barrier, max_calls: int = 200,
          itemsize: int = 4) -> list[dict]:
    """For each size, alternating rounds of the sides ``make_sides(n_elements)`` returns.

    ``make_sides`` returns {label: fn} where fn() does one allreduce of ``n_elements`` values.
    """
    rows = []
    for nbytes in sizes:
        sides = make_sides(max(1, nbytes // itemsize))
        calls = calls_for(nbytes, max_calls)
        for fn in sides.values():                      # warm-up: connections, buffers, cache
            common.time_per_call(fn, min(calls, 5))
        samples = common.alternating_rounds(
            {label: (lambda fn=fn: common.time_per_call(fn, calls)) for label, fn in sides.items()},
            rounds, barrier)
        row = common.comparison(f"allreduce {common.format_bytes(nbytes)}", samples, unit="s",
                                size_bytes=nbytes, calls=calls)
        row["bandwidth_GBps"] = {label: nbytes / t / 1e9 for label, t in row["median"].items()}
        rows.append(row)
    return rows


def gloo_sides(fuse, dtype="float32"):
    """fuse (its configured backend) vs torch.distributed gloo, which this initialises."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        port = fuse.broadcast_object(common.free_port() if fuse.rank() == 0 else None, 0)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=fuse.rank(), world_size=fuse.size())
    torch.set_num_threads(1)

    def make(n):
        a = np.zeros(n, dtype)
        t = torch.zeros(n, dtype=getattr(torch, dtype))
        return {"fuse": lambda: fuse.allreduce_(a, op=fuse.Sum, name=f"sweep.{n}"),
                "torch.distributed": lambda: dist.all_reduce(t)}
    return make, dist.destroy_process_group


def mpi_sides(fuse, dtype="float32"):
    """fuse's MPI backend vs raw mpi4py ``Allreduce`` in place."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD

    def make(n):
        a = np.zeros(n, dtype)
        b = np.zeros(n, dtype)
        return {"fuse": lambda: fuse.allreduce_(a, op=fuse.Sum, name=f"sweep.{n}"),
                "mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, b, MPI.SUM)}
    return make, lambda: None


def mpi_library_version() -> str:
    from mpi4py import MPI
    return MPI.Get_library_version().splitlines()[0].strip()


def reexec_under_mpiexec(np_: int) -> None:
    """Start this script again under ``mpiexec -n np_`` with FUSE_BACKEND=mpi (does not return)."""
    mpiexec = shutil.which("mpiexec") or shutil.which("mpirun")
    if not mpiexec:
        sys.exit("bench: no mpiexec on PATH (pip install 'fuse[mpi]')")
    env = dict(os.environ, FUSE_BACKEND="mpi")
    os.execve(mpiexec, [mpiexec, "-n", str(np_), sys.executable, *sys.argv], env)


def print_rows(rows: list[dict], title: str) -> None:
    print(title)
    for row in rows:
        (fl, cl) = row["fuse"], row["competitor"]
        f, c = row["median"][fl], row["median"][cl]
        bw = row["bandwidth_GBps"]
        print(f"  {common.format_bytes(row['size_bytes']):>9}: {fl} {f * 1e6:10.1f} us "
              f"{bw[fl]:7.3f} GB/s | {cl} {c * 1e6:10.1f} us {bw[cl]:7.3f} GB/s | "
              f"time ratio {row['ratio']:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpi", action="store_true", help="MPI backend vs mpi4py, under mpiexec")
    ap.add_argument("-np", type=int, default=2, help="ranks, with --mpi")
    ap.add_argument("--sizes", type=parse_sizes, default=None,
                    help="comma-separated byte sizes (4,64K,256M); default 4 B x8 .. 256 MiB")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-calls", type=int, default=200)
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                    help="element type (float16: fuse's own reduction kernel against Gloo's/MPI's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.mpi and not any(os.environ.get(v) for v in LAUNCHER_VARS):
        reexec_under_mpiexec(args.np)

    import fuse
    fuse.init()
    sizes = args.sizes or default_sizes()
    make_sides, close = (mpi_sides if args.mpi else gloo_sides)(fuse, args.dtype)
    rows = sweep(sizes, args.rounds, make_sides, fuse.barrier, args.max_calls,
                 np.dtype(args.dtype).itemsize)
    extra = {"mpi_library": mpi_library_version()} if args.mpi else {}
    if fuse.rank() == 0:
        backend = "mpi" if args.mpi else "gloo"
        print_rows(rows, f"{args.dtype} allreduce sweep, fuse ({backend}) vs "
                         f"{rows[0]['competitor']}, {fuse.size()} ranks, {args.rounds} rounds, "
                         "medians")
        record = common.job_record(f"allreduce_{backend}", rows, machine.describe(),
                                   vars(args) | {"sizes": sizes, "workers": fuse.size(),
                                                 "fuse_backend": backend}, **extra)
        common.write_json(args.json, record)
    close()
    fuse.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
