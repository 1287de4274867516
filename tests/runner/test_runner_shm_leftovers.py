"""Shared-memory segments leave nothing in /dev/shm, even when every worker of a job is killed
while they are in use (a real 2-rank job on one host, SIGKILLed)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from mpi_util import require_mpi
from runner_util import fuserun_argv, wait_dead

pytestmark = pytest.mark.timeout(120)

WORKER = """
import os, sys, time
import numpy as np
import fuse
fuse.init()
assert fuse.allreduce(np.ones(1 << 20, np.float32), op=fuse.Sum, name="big")[0] == 2
open(os.path.join(sys.argv[1], str(fuse.rank())), "w").write(str(os.getpid()))
time.sleep(120)
"""


def _fuse_files():
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("fuse-"))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_killed_workers_leave_no_segment_files(script, tmp_path):
    before = _fuse_files()
    proc = subprocess.Popen(fuserun_argv("-np", "2", sys.executable, script(WORKER),
                                         str(tmp_path)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len([n for n in os.listdir(tmp_path) if n.isdigit()]) < 2:
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "the workers did not get going"
            time.sleep(0.05)
        pids = [int((tmp_path / str(r)).read_text()) for r in range(2)]
        assert _fuse_files() == before          # in use, and still no name in /dev/shm
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        assert wait_dead(pids) == []
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert _fuse_files() == before


MAKER = """
import sys, time
from fuse.engine import shm
fd, path = shm.new_segment()
print(path, flush=True)
time.sleep(120)        # killed here: between making a segment and the peers opening it
"""


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_a_process_killed_right_after_making_a_segment_leaves_nothing():
    before = _fuse_files()
    proc = subprocess.Popen([sys.executable, "-c", MAKER], stdout=subprocess.PIPE, text=True)
    try:
        path = proc.stdout.readline().strip()
        assert path, "the segment was not made"
        assert os.path.exists(path)             # peers can open it while its maker lives
    finally:
        proc.kill()
        proc.wait()
    assert _fuse_files() == before


MPI_WORKER = """
import os, signal
import numpy as np
import fuse
fuse.init()
fuse.allreduce(np.ones(1 << 20, np.float32), name="big")
if fuse.rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
import time; time.sleep(60)
"""


def _mpi_files():
    return {n for n in os.listdir("/dev/shm") if n.startswith("mpich_shm_")}


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_fuserun_mpi_removes_what_mpi_left_after_a_killed_rank(script):
    require_mpi()
    before = _mpi_files()
    r = subprocess.run(fuserun_argv("--mpi", "-np", "2", sys.executable, script(MPI_WORKER)),
                       capture_output=True, timeout=90)
    assert r.returncode != 0, r.stderr.decode()
    assert _mpi_files() - before == set()
