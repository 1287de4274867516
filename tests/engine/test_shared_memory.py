"""The same-host shared-memory allreduce (fuse/engine/shm.py, fuse/engine/csrc/shm_allreduce.h) on
segments made by hand, in one process: what needs no job.  The path itself runs in real jobs
in tests/collectives/test_allreduce.py (Gloo) and tests/backends/mpi (MPI)."""

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

from fuse.engine.segments import SharedSegments
from fuse.engine import shm


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
                    % shm.host_id().encode()]
        return [data, b"0"]

    config = SimpleNamespace(rank=0, size=2, local_size=2, shm_threshold=1 << 18)
    assert shm.connect(config, exchange) is None
    import json
    assert not os.path.exists(json.loads(made[0])["path"])


@pytest.fixture
def small_shm_dir(tmp_path, monkeypatch):
    """A 1 MiB tmpfs standing in for /dev/shm (mounting one needs root)."""
    where = tmp_path / "smallfs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root (mount -t tmpfs): "
                    + mounted.stderr.decode(errors="replace").strip())
    monkeypatch.setattr(shm, "_shm_dir", lambda: str(where))
    monkeypatch.setattr(shm, "_memfd_create", None)     # the fallback: files in /dev/shm
    yield where
    subprocess.run(["umount", str(where)], check=True)


def test_no_room_in_dev_shm_means_no_segment_rather_than_sigbus_later(small_shm_dir):
    """A segment bigger than what /dev/shm has left is refused when it is made (its pages
    are reserved), not mapped sparse to raise SIGBUS when training first touches it."""
    assert shm.new_segment(8 << 20, header=False) == (-1, None)
    assert os.listdir(small_shm_dir) == []
    fd, path = shm.new_segment(64 << 10, header=False)     # what fits still works
    assert fd >= 0 and os.path.getsize(path) == 64 << 10
    os.close(fd)
    os.unlink(path)


def test_shared_regions_fall_back_everywhere_when_one_rank_has_no_room(small_shm_dir):
    """This rank cannot make its 8 MiB gradient region; its peer could.  Both learn it from the
    allgather and get None: nothing is registered with the engine, no file is left."""
    registered = []
    engine = SimpleNamespace(shared_memory=object(), rank=0,
                             add_shared_region=lambda *a: registered.append(a))
    calls = []

    def allgather(obj):
        calls.append(obj)
        if len(calls) == 1:
            return [obj, {"paths": ["/dev/shm/peer-region"], "sizes": [8 << 20]}]
        return [obj, True]

    assert shm.share_regions(engine, [8 << 20], allgather) is None
    assert calls[0]["paths"] == [None] and calls[1] is False
    assert registered == [] and os.listdir(small_shm_dir) == []


def test_segments_have_no_name_to_leave_behind():
    """A segment is a memfd: nothing in /dev/shm, reachable by peers through /proc, gone with
    the last descriptor and mapping."""
    if shm._memfd_create is None:
        pytest.skip("this Python has no os.memfd_create (segments are /dev/shm files here)")
    before = set(os.listdir("/dev/shm"))
    fd, path = shm.new_segment()
    try:
        assert path == f"/proc/{os.getpid()}/fd/{fd}"
        assert set(os.listdir("/dev/shm")) == before
        with open(path, "r+b") as f:        # as a peer opens it
            m = mmap.mmap(f.fileno(), shm.SEGMENT_BYTES)
        assert struct.unpack_from("<q", m, shm.PID_OFFSET)[0] == os.getpid()
        m.close()
    finally:
        shm.discard(fd, path)
    assert not os.path.exists(path)


def test_a_stopped_peer_is_warned_about_then_named_as_a_stall(tmp_path, caplog):
    """"Rank 1" is alive but never arrives (as a stopped or hung process): rank 0 warns after
    the warning time and gives up after the failure time, naming the rank, instead of waiting
    as long as the process lives."""
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        segments = SharedSegments(_segments(tmp_path, [os.getpid(), alive.pid]), 0,
                                  shm.CHUNK_BYTES)
        segments.set_patience(0.5, 2.0)
        t0 = time.monotonic()
        with caplog.at_level("WARNING", logger="fuse"):
            with pytest.raises(RuntimeError, match=rf"stall: .*rank 1 \(pid {alive.pid}\) has "
                                                   r"not arrived for 2 seconds while rank 0"):
                segments.allreduce(np.ones(1000, np.float32), "float32", "sum")
        assert 1.9 < time.monotonic() - t0 < 30
        assert alive.poll() is None
        assert any("rank 1" in r.getMessage() and "has not arrived" in r.getMessage()
                   for r in caplog.records), caplog.text
    finally:
        alive.kill()
        alive.wait()
