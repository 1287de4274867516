"""Where a small allreduce on the MPI backend spends its time: fuse's 4-byte allreduce and its
barrier (negotiation alone, no data) against mpi4py's ``Allreduce`` and against a bare loopback
TCP round trip between the same two processes, the transport fuse negotiates over.

    python bench/studies/mpi_small.py [--rounds 7] [--calls 500] [--json out.json]

It starts itself under ``mpiexec -n 2`` with FUSE_BACKEND=mpi.  Each side runs ``--calls``
calls per round after 50 untimed ones, with an MPI barrier before each; the sides alternate
their order from round to round; a round's figure is its median call, the row's figure the
median over rounds, also as a multiple of mpi4py's.

The TCP round trip is rank 0 sending 16 bytes and rank 1 answering, from Python, once with
the receiver polling (``MSG_DONTWAIT`` in a loop: what a rank driving its own collective
does) and once with a blocking ``recv`` (a thread woken by the data).  A fuse allreduce that
goes to rank 0 and back cannot take less than the polling round trip; what it takes beyond is
the engine's own work and its Python call.  The shared-memory round trip is the same exchange
through a counter each in a page both processes map, the receiver polling it, also from
Python: the transport fuse negotiates over on one host when its mailbox is on (FUSE_MAILBOX,
the default; set it to 0 to time the sockets).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)
import allreduce  # noqa: E402
import common  # noqa: E402
import machine  # noqa: E402


def tcp_pair(comm):
    """A connected loopback TCP socket between rank 0 and rank 1 (Nagle off)."""
    if comm.Get_rank() == 0:
        server = socket.create_server(("127.0.0.1", 0))
        comm.bcast(server.getsockname()[1], 0)
        sock, _ = server.accept()
        server.close()
    else:
        sock = socket.create_connection(("127.0.0.1", comm.bcast(None, 0)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def round_trips(sock, first: bool):
    """(polling, blocking) round trip functions; ``first``: this rank sends first."""
    msg = b"x" * 16

    def poll_recv():
        while True:
            try:
                if sock.recv(64, socket.MSG_DONTWAIT):
                    return
            except BlockingIOError:
                pass

    def polling():
        if first:
            sock.sendall(msg)
            poll_recv()
        else:
            poll_recv()
            sock.sendall(msg)

    def blocking():
        if first:
            sock.sendall(msg)
            sock.recv(64)
        else:
            sock.recv(64)
            sock.sendall(msg)
    return polling, blocking


def shm_round_trip(comm):
    """A polling round trip through a shared page: rank 0 bumps its counter and waits for rank
    1's to follow; rank 1 waits for rank 0's, then bumps its own."""
    import mmap
    import struct
    import tempfile
    if comm.Get_rank() == 0:
        fd, path = tempfile.mkstemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.ftruncate(fd, mmap.PAGESIZE)
        comm.bcast(path, 0)
    else:
        path = comm.bcast(None, 0)
        fd = os.open(path, os.O_RDWR)
    page = mmap.mmap(fd, mmap.PAGESIZE)
    os.close(fd)
    comm.Barrier()
    if comm.Get_rank() == 0:
        os.unlink(path)
    mine, theirs = (0, 64) if comm.Get_rank() == 0 else (64, 0)
    count = [0]

    def wait_for(value):
        while struct.unpack_from("q", page, theirs)[0] < value:
            pass

    def trip():
        count[0] += 1
        if comm.Get_rank() == 0:
            struct.pack_into("q", page, mine, count[0])
            wait_for(count[0])
        else:
            wait_for(count[0])
            struct.pack_into("q", page, mine, count[0])
    return trip, page


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not any(os.environ.get(v) for v in allreduce.LAUNCHER_VARS):
        allreduce.reexec_under_mpiexec(2)

    import numpy as np

    import fuse
    fuse.init()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    sock = tcp_pair(comm)
    polling, blocking = round_trips(sock, comm.Get_rank() == 0)
    shm_trip, page = shm_round_trip(comm)
    ours, theirs = np.zeros(1, np.float32), np.zeros(1, np.float32)
    sides = {"mpi4py Allreduce 4 B": lambda: comm.Allreduce(MPI.IN_PLACE, theirs, MPI.SUM),
             "fuse allreduce 4 B": lambda: fuse.allreduce_(ours, op=fuse.Sum, name="small"),
             "fuse barrier": fuse.barrier,
             "TCP round trip, polling": polling,
             "TCP round trip, blocking": blocking,
             "shared-memory round trip": shm_trip}
    samples = {label: [] for label in sides}
    for rnd in range(args.rounds):
        for label in (list(sides) if rnd % 2 == 0 else list(sides)[::-1]):
            fn = sides[label]
            comm.Barrier()
            allreduce.call_times(fn, 50)
            comm.Barrier()
            samples[label].append(statistics.median(allreduce.call_times(fn, args.calls)))
    if comm.Get_rank() == 0:
        base = statistics.median(samples["mpi4py Allreduce 4 B"])
        rows = []
        for label, values in samples.items():
            med = statistics.median(values)
            rows.append({"what": label, "median_s": med, "samples_s": values,
                         "vs_mpi4py": med / base})
            print(f"{label:26s} {med * 1e6:7.1f} us  {med / base:5.2f}x mpi4py  (rounds: "
                  + ", ".join(f"{v * 1e6:.1f}" for v in values) + ")", flush=True)
        common.write_json(args.json, common.job_record(
            "mpi_small", rows, machine.describe(),
            vars(args) | {"workers": 2, "mpi_library": allreduce.mpi_library_version()}))
    sock.close()
    page.close()
    fuse.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
