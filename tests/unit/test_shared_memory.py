"""The same-host shared-memory allreduce (fuse/common/shm.py, fuse/csrc/shm_allreduce.h) on
segments made by hand, in one process: what needs no job.  The path itself runs in real jobs
in tests/parallel/test_allreduce.py (Gloo) and tests/mpi (MPI)."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from fuse._executor import SharedSegments
from fuse.common import shm


def _segments(tmp_path, pids):
    maps = []
    for k, pid in enumerate(pids):
        path = tmp_path / f"seg{k}"
        header = bytes(shm.PID_OFFSET) + struct.pack("<q", pid)
        path.write_bytes(header + bytes(shm.SEGMENT_BYTES - len(header)))
        with open(path, "r+b") as f:
            maps.append(mmap.mmap(f.fileno(), shm.SEGMENT_BYTES))
    return maps


def test_a_dead_peer_is_named_instead_of_waited_for(tmp_path):
    """Rank 0 waits in the first barrier for "rank 1", a process that has exited: it raises
    within seconds, naming the rank and its pid."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    segments = SharedSegments(_segments(tmp_path, [os.getpid(), int(gone.stdout)]), 0,
                              shm.CHUNK_BYTES)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 \(pid \d+\) exited while rank 0 waited"):
        segments.allreduce(np.ones(1000, np.float32), "float32", "sum")
    assert time.monotonic() - t0 < 10


def test_segments_must_hold_a_header_and_two_chunks(tmp_path):
    small = mmap.mmap(-1, shm.SEGMENT_BYTES - 1)
    with pytest.raises(ValueError, match="smaller than its header"):
        SharedSegments([small, small], 0, shm.CHUNK_BYTES)


@pytest.mark.parametrize("fields", [
    {"shm_threshold": 0, "size": 2, "local_size": 2},       # turned off
    {"shm_threshold": 1 << 18, "size": 1, "local_size": 1},   # alone
    {"shm_threshold": 1 << 18, "size": 4, "local_size": 2},   # two hosts
])
def test_no_segments_unless_every_rank_is_on_this_host(fields):
    def exchange(data):
        raise AssertionError("must not exchange anything")
    assert shm.connect(SimpleNamespace(rank=0, **fields), exchange) is None


def test_a_rank_that_cannot_map_a_segment_turns_it_off_for_everyone():
    """Rank 1 reports a segment path nobody can open: every rank agrees on None and the files
    are gone afterwards."""
    made = []

    def exchange(data):
        if not made:
            made.append(data)
            return [data, b'{"path": "/nonexistent/fuse-shm", "host": "%s"}'
                    % shm._host_id().encode()]
        return [data, b"0"]

    config = SimpleNamespace(rank=0, size=2, local_size=2, shm_threshold=1 << 18)
    assert shm.connect(config, exchange) is None
    import json
    assert not os.path.exists(json.loads(made[0])["path"])
