"""Allreduce latency and bandwidth from 4 B to 256 MiB: fuse against a competitor, same job.

    fuserun -np 2 python bench/suite/allreduce.py [--json out.json]   # Gloo vs torch.distributed
    python bench/suite/allreduce.py --mpi [--json out.json]           # MPI backend vs mpi4py

With ``--mpi`` the script starts itself under ``mpiexec -n 2`` with FUSE_BACKEND=mpi (unless an
MPI launcher started it) and compares fuse's MPI backend with raw ``comm.Allreduce``; otherwise
it compares fuse (Gloo backend) with ``torch.distributed`` (gloo).  Both sides reduce float32
zeros (``--dtype float16``: half floats) in place with a sum.  After a warm-up pass, each
round times every size on both sides (sides alternating, a barrier before each); a
measurement is the median of ``calls`` back-to-back allreduces timed one by one, fewer calls
for bigger sizes (see ``sweep``).  Reported per size: the median over rounds, algorithm
bandwidth (bytes / time), the ratio fuse/competitor of the times, and whether fuse's curve
rises with the size (``monotonic_breaks``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

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


def call_times(fn, calls: int) -> list[float]:
    """Wall time of each of ``calls`` back-to-back calls of ``fn``."""
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def sweep(sizes: list[int], rounds: int, make_sides, barrier, max_calls: int = 200,
          itemsize: int = 4, what: str = "allreduce") -> list[dict]:
    """Every size on every side, ``rounds`` times over; one row per size.

    ``make_sides(n_elements)`` returns {label: fn} where fn() does one collective (``what``,
    the rows' name) of ``n_elements`` values.  What makes the small sizes' figures hold still (without it, 4 B
    came out slower than 32 B in one run, by tens of us):

    * a warm-up pass over every size and side before anything is timed, so no size pays for
      the job's first calls (connections, first-touch pages, the engine's first negotiation);
    * rounds outermost, the sizes in turn inside each round (forward, then backward in the
      next), so a change of the machine's load reaches every size alike instead of the sizes
      that happen to run during it;
    * the sides' order alternating from size to size and round to round, a barrier before each
      measurement, and a few untimed calls after every switch;
    * each call timed on its own and a measurement taken as the median call: the mean of a
      few hundred calls of 20-50 us moves by tens of us when the scheduler takes the core away
      once (other processes on a shared machine), the median does not.

    A row's samples are the per-round medians; its median, the median over rounds.  The
    per-round means stay in the row (``mean_s``) for the tail that the medians leave out.
    """
    bufs = {nbytes: make_sides(max(1, nbytes // itemsize)) for nbytes in sizes}
    calls = {nbytes: calls_for(nbytes, max_calls) for nbytes in sizes}
    for nbytes in sizes:                                # warm-up: everything once
        for fn in bufs[nbytes].values():
            call_times(fn, min(calls[nbytes], 5))
    labels = list(bufs[sizes[0]])
    medians = {n: {label: [] for label in labels} for n in sizes}
    means = {n: {label: [] for label in labels} for n in sizes}
    for rnd in range(rounds):
        for i, nbytes in enumerate(sizes if rnd % 2 == 0 else sizes[::-1]):
            order = labels if (rnd + i) % 2 == 0 else labels[::-1]
            for label in order:
                fn = bufs[nbytes][label]
                barrier()
                call_times(fn, max(1, calls[nbytes] // 20))
                t = call_times(fn, calls[nbytes])
                medians[nbytes][label].append(statistics.median(t))
                means[nbytes][label].append(sum(t) / len(t))
    rows = []
    for nbytes in sizes:
        row = common.comparison(f"{what} {common.format_bytes(nbytes)}", medians[nbytes],
                                unit="s", size_bytes=nbytes, calls=calls[nbytes],
                                statistic="median call per round, median over rounds",
                                mean_s=means[nbytes])
        row["bandwidth_GBps"] = {label: nbytes / t / 1e9 for label, t in row["median"].items()}
        rows.append(row)
    return rows


def monotonic_breaks(rows: list[dict], label: str) -> list[str]:
    """Where a larger size took less time than a smaller one on side ``label`` (sizes in
    order): each as text, saying whether the gap is beyond the rounds' spread of the two."""
    out = []
    for a, b in zip(rows, rows[1:]):
        ta, tb = a["median"][label], b["median"][label]
        if ta > tb:
            spread = max(max(r["samples"][label]) - min(r["samples"][label]) for r in (a, b))
            out.append(f"{common.format_bytes(a['size_bytes'])} {ta * 1e6:.1f} us > "
                       f"{common.format_bytes(b['size_bytes'])} {tb * 1e6:.1f} us ("
                       + ("within" if ta - tb <= spread else "beyond") + " the rounds' spread)")
    return out


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
    breaks = monotonic_breaks(rows, "fuse")
    extra = {"mpi_library": mpi_library_version()} if args.mpi else {}
    if fuse.rank() == 0:
        backend = "mpi" if args.mpi else "gloo"
        print_rows(rows, f"{args.dtype} allreduce sweep, fuse ({backend}) vs "
                         f"{rows[0]['competitor']}, {fuse.size()} ranks, {args.rounds} rounds, "
                         "medians")
        beyond = [b for b in breaks if "beyond" in b]
        print("fuse's curve: " + ("not monotonic: " + "; ".join(beyond) if beyond else
                                  "monotonic" + (" but for ties within the rounds' spread: "
                                                 + "; ".join(breaks) if breaks else "")))
        record = common.job_record(f"allreduce_{backend}", rows, machine.describe(),
                                   vars(args) | {"sizes": sizes, "workers": fuse.size(),
                                                 "fuse_backend": backend},
                                   monotonic_breaks=breaks, **extra)
        common.write_json(args.json, record)
    close()
    fuse.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
