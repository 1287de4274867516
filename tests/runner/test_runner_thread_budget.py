"""The launchers give every worker its share of the host's cores (OMP_NUM_THREADS and friends),
never touch a value the user set, say what they chose once; init() warns when a job started
another way (a plain mpiexec) runs more compute threads than the host has cores."""

import json
import os
import re
import shutil
import subprocess
import sys

import needs
import pytest

from fuse.cluster import thread_budget as tb
from mpi_util import mpiexec, require_mpi
from runner_util import fuserun_argv, lines_of, run_fuserun

pytestmark = pytest.mark.timeout(120)

PY = sys.executable
CORES = tb.usable_cores()       # the launcher is our child: same affinity mask and cgroup
VARS = tb.BUDGET_VARIABLES

SHOW_ENV = """
import json, os
print(json.dumps({k: os.environ.get(k) for k in %r}))
""" % (VARS,)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    env.update(extra)
    return env


def worker_values(stdout) -> dict[int, dict]:
    return {rank: json.loads(lines[0]) for rank, lines in lines_of(stdout).items()}


def budget_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if "thread budget:" in line]


@pytest.mark.parametrize("np", [1, 2, 3])
def test_each_worker_gets_its_share(script, np):
    r = run_fuserun("-np", str(np), PY, script(SHOW_ENV), env=clean_env())
    assert r.returncode == 0, r.stderr.decode()
    share = str(max(1, CORES // np))
    assert worker_values(r.stdout) == {rank: {k: share for k in VARS} for rank in range(np)}
    notice = budget_lines(r.stderr)
    assert len(notice) == 1, r.stderr.decode()
    assert notice[0].startswith("fuserun: thread budget:")
    assert f"{CORES} usable cores / {np} worker" in notice[0] and "OMP_NUM_THREADS" in notice[0]


@pytest.mark.skipif(not shutil.which("taskset"), reason="taskset (util-linux) is not installed")
@pytest.mark.parametrize("np", [1, 2])
def test_the_affinity_mask_limits_the_share(script, np):
    argv = ["taskset", "-c", "0"] + fuserun_argv("-np", str(np), PY, script(SHOW_ENV))
    r = subprocess.run(argv, capture_output=True, env=clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert all(v == {k: "1" for k in VARS} for v in worker_values(r.stdout).values())
    assert "1 usable cores" in budget_lines(r.stderr)[0]


def test_local_host_names_share_one_machine(script):
    # localhost and 127.0.0.1 are two "hosts" of the job but one set of cores
    r = run_fuserun("-np", "3", "-H", "localhost:2,127.0.0.1:1", PY, script(SHOW_ENV),
                    env=clean_env())
    assert r.returncode == 0, r.stderr.decode()
    share = str(max(1, CORES // 3))
    assert all(v == {k: share for k in VARS} for v in worker_values(r.stdout).values())


def test_the_users_values_pass_through_unchanged(script):
    r = run_fuserun("-np", "2", PY, script(SHOW_ENV), env=clean_env(OMP_NUM_THREADS="3"))
    assert r.returncode == 0, r.stderr.decode()
    # OMP_NUM_THREADS is the user's, and it is the budget for the other two as well
    assert all(v == {k: "3" for k in VARS} for v in worker_values(r.stdout).values())
    assert "your OMP_NUM_THREADS" in budget_lines(r.stderr)[0]

    r = run_fuserun("-np", "2", PY, script(SHOW_ENV), env=clean_env(MKL_NUM_THREADS="5"))
    share = str(max(1, CORES // 2))
    assert all(v == {"OMP_NUM_THREADS": share, "MKL_NUM_THREADS": "5",
                     "TF_NUM_INTRAOP_THREADS": share}
               for v in worker_values(r.stdout).values())

    every = {k: "2" for k in VARS}
    r = run_fuserun("-np", "2", PY, script(SHOW_ENV), env=clean_env(**every))
    assert all(v == every for v in worker_values(r.stdout).values())
    assert budget_lines(r.stderr) == []          # nothing was chosen, nothing to say


def _env_of_worker():
    import os
    from fuse.cluster.thread_budget import BUDGET_VARIABLES
    return {k: os.environ.get(k) for k in BUDGET_VARIABLES}


def test_fuse_run_workers_get_the_budget(capfd):
    import fuse
    values = fuse.run(_env_of_worker, np=2, env=clean_env())
    share = str(max(1, CORES // 2))
    assert values == [{k: share for k in VARS}] * 2
    assert len(budget_lines(capfd.readouterr().err.encode())) == 1


def test_fuserun_mpi_workers_get_the_budget(script):
    require_mpi()
    r = run_fuserun("--mpi", "-np", "2", PY, script(SHOW_ENV), env=clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    share = str(max(1, CORES // 2))
    # mpiexec's rank labels may land inside another rank's line: take the JSON objects alone
    values = [json.loads(m) for m in re.findall(r"\{[^{}]*\}", r.stdout.decode())]
    assert values == [{k: share for k in VARS}] * 2
    assert len(budget_lines(r.stderr)) == 1


INIT = """
import fuse
fuse.init()
fuse.allreduce(__import__("numpy").ones(4), name="x")
fuse.shutdown()
print("done", fuse.__name__)
"""


def _warnings(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines()
            if "compute threads" in line and "usable cores" in line]


def test_init_warns_once_under_a_plain_mpiexec_with_too_many_threads(script):
    require_mpi()
    path = script(INIT)
    too_many = clean_env(OMP_NUM_THREADS=str(CORES))      # x2 workers > cores
    r = subprocess.run([mpiexec(), "-n", "2", PY, path], capture_output=True, env=too_many,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    warned = _warnings(r.stderr)
    assert len(warned) == 1, r.stderr.decode()          # the host's first rank, once
    assert f"each run {CORES} compute threads (OMP_NUM_THREADS)" in warned[0]
    assert f"OMP_NUM_THREADS={max(1, CORES // 2)}" in warned[0]

    fits = clean_env(OMP_NUM_THREADS=str(max(1, CORES // 2)))
    r = subprocess.run([mpiexec(), "-n", "2", PY, path], capture_output=True, env=fits,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    if CORES >= 2:
        assert _warnings(r.stderr) == []


def test_init_asks_torch_for_its_pool(script):
    require_mpi()
    needs.module("torch")
    # torch.set_num_threads after start-up is what counts, not the environment
    path = script("""
import torch, fuse.torch as hvd
torch.set_num_threads(%d)
hvd.init()
hvd.shutdown()
""" % (CORES,))
    r = subprocess.run([mpiexec(), "-n", "2", PY, path], capture_output=True,
                       env=clean_env(OMP_NUM_THREADS="1"), timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    warned = _warnings(r.stderr)
    assert len(warned) == 1 and "torch.get_num_threads()" in warned[0], r.stderr.decode()


def test_no_warning_under_fuserun(script):
    r = run_fuserun("-np", "2", PY, script(INIT), env=clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert _warnings(r.stderr) == []
