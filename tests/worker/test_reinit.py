"""The engine re-forms in the same process, as an elastic job's survivors do: ``shutdown()``
then ``init()`` with a new rendezvous generation and a new rank and size, twenty times, with
collectives (shared memory, or the twin connection and a timeline), a process set and the
control channel made anew each time (the job state counts one more engine generation each
time); afterwards the process holds as many threads, file
descriptors and shared-memory mappings as after the first round, and has no file in /dev/shm."""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine_util import run_job

pytestmark = pytest.mark.timeout(240)

ROUNDS = 20


def _resources() -> dict:
    with open("/proc/self/maps") as f:
        shm_maps = sum("fuse-shm" in line for line in f)
    pid = os.getpid()
    shm_files = [n for n in os.listdir("/dev/shm") if str(pid) in n] \
        if os.path.isdir("/dev/shm") else []
    return {"threads": len(os.listdir("/proc/self/task")),
            "fds": len(os.listdir("/proc/self/fd")), "shm_maps": shm_maps,
            "shm_files": len(shm_files)}


def _reform_many_times():
    import fuse
    from fuse.worker import state as job_state

    fuse.init()
    me = fuse.rank()            # the launcher's rank: this process's identity here
    n = fuse.size()
    # (init returns on a rank once its own connections are up; a collective before the
    # shutdown lets the slowest rank finish connecting to everyone)
    fuse.allreduce(np.zeros(1), name="started")
    seen = []
    baseline = None
    for gen in range(ROUNDS + 1):
        fuse.shutdown()
        if gen == 1:
            baseline = _resources()
        # even rounds: every process, ranks rotated; odd rounds: all but the last process
        size = n if gen % 2 == 0 else n - 1
        if me >= size:
            seen.append(None)
            continue
        rank = (me + gen) % size
        pset = fuse.ProcessSet([0, 1]) if size > 2 else None     # (2: the global set)
        engines_before = job_state.engine_generation()
        fuse.init(rank=rank, size=size, local_rank=rank, local_size=size,
                  rendezvous_generation=gen, process_sets=[pset] if pset else None)
        assert (fuse.rank(), fuse.size(), job_state.rendezvous_generation()) == (rank, size, gen)
        # what the torch optimizer watches to drop the old engine's handles: one new engine
        assert job_state.engine_generation() == engines_before + 1
        total = fuse.allreduce(np.full(300_000, rank + 1.0, np.float32), op=fuse.Sum,
                               name="big")
        assert total[0] == size * (size + 1) / 2, total[:3]
        small = fuse.allreduce(np.array([float(rank)]), op=fuse.Sum)    # an automatic name
        gathered = fuse.allgather(np.array([rank]), name="who")
        assert sorted(gathered.tolist()) == list(range(size))
        if pset is not None and rank in (0, 1):
            pair = fuse.allreduce(np.array([1.0]), op=fuse.Sum, name="pair", process_set=pset)
            assert pair[0] == 2.0
        seen.append((rank, size, float(small[0])))
    fuse.shutdown()
    return seen, baseline, _resources()


@pytest.mark.parametrize("env", [
    {},
    {"FUSE_SHM_THRESHOLD": "0", "FUSE_SPLIT_THRESHOLD": "65536", "FUSE_TIMELINE": "{tmp}"},
], ids=["shared-memory", "twin-connection-and-timeline"])
def test_twenty_reforms_leak_nothing(tmp_path, env):
    env = {k: v.format(tmp=tmp_path / "timeline.json") for k, v in env.items()}
    results = run_job(_reform_many_times, 3, env=env, timeout=200)
    for ident, (seen, baseline, after) in enumerate(results):
        assert after == baseline, f"process {ident}: {baseline} after the first round, " \
                                  f"{after} after {ROUNDS} more"
        assert after["shm_files"] == 0
        for gen, entry in enumerate(seen):
            size = 3 if gen % 2 == 0 else 2
            if ident >= size:
                assert entry is None
                continue
            assert entry == ((ident + gen) % size, size, size * (size - 1) / 2), (gen, entry)
    if env:
        assert (tmp_path / "timeline.json").stat().st_size > 0
