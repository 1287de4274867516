"""The thread budget's arithmetic: usable cores from affinity and cgroup quotas, the share per
worker, which variables a worker gets, and the sh version the launchers send to other hosts
(run here by a real ``sh`` over the same cgroup files, so the two cannot drift apart)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from fuse.cluster import thread_budget as tb

AFFINITY = len(os.sched_getaffinity(0))


def _tree(tmp_path, proc_lines: str, files: dict[str, str]):
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc_cgroup"
    proc.write_text(proc_lines)
    return str(root), str(proc)


V2_NESTED = ("0::/job/step\n", {
    "cpu.max": "max 100000\n",               # the root allows everything
    "job/cpu.max": "300000 100000\n",        # 3 cores for the job
    "job/step/cpu.max": "150000 100000\n",   # 1.5 for this step: the tightest level wins
})
V2_NONE = ("0::/a\n", {"a/cpu.max": "max 100000\n"})
V1_QUOTA = ("4:memory:/x\n3:cpu,cpuacct:/slice/job\n0::/\n", {
    "cpu,cpuacct/slice/job/cpu.cfs_quota_us": "50000\n",   # half a core
    "cpu,cpuacct/slice/job/cpu.cfs_period_us": "100000\n",
    "cpu,cpuacct/slice/cpu.cfs_quota_us": "-1\n",
    "cpu,cpuacct/slice/cpu.cfs_period_us": "100000\n",
})
V1_NONE = ("3:cpu,cpuacct:/\n", {
    "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})


@pytest.mark.parametrize("tree, limit", [(V2_NESTED, 1.5), (V2_NONE, None), (V1_QUOTA, 0.5),
                                         (V1_NONE, None)],
                         ids=["v2-nested", "v2-none", "v1-quota", "v1-none"])
def test_cgroup_limit(tmp_path, tree, limit):
    root, proc = _tree(tmp_path, *tree)
    assert tb.cgroup_cpu_limit(root, proc) == limit


def test_usable_cores_rounds_a_quota_up_and_never_exceeds_the_affinity_mask():
    assert tb.usable_cores(limit=1.5) == min(AFFINITY, 2)
    assert tb.usable_cores(limit=0.5) == 1
    assert tb.usable_cores(limit=10_000.0) == AFFINITY


@pytest.mark.parametrize("cores, workers, share", [
    (2, 1, 2), (2, 2, 1), (2, 3, 1), (8, 3, 2), (16, 4, 4), (1, 1, 1)])
def test_share_per_worker(cores, workers, share):
    assert tb.threads_per_worker(workers, cores) == share


def test_budget_env_fills_only_what_the_user_left_unset():
    assert tb.budget_env({}, 2, cores=8) == {name: "4" for name in tb.BUDGET_VARIABLES}
    # the user's OMP_NUM_THREADS is the budget for the rest, and is itself left alone
    assert tb.budget_env({"OMP_NUM_THREADS": "3"}, 2, cores=8) == {
        "MKL_NUM_THREADS": "3", "TF_NUM_INTRAOP_THREADS": "3"}
    assert tb.budget_env({"MKL_NUM_THREADS": "5"}, 2, cores=8) == {
        "OMP_NUM_THREADS": "4", "TF_NUM_INTRAOP_THREADS": "4"}
    assert tb.budget_env({name: "7" for name in tb.BUDGET_VARIABLES}, 2, cores=8) == {}


def _sh_budget(environ, workers, root, proc, cpus=None):
    script = tb.shell_budget(environ, str(workers), cgroup_root=root, proc_cgroup=proc)
    script += 'printf "%s %s %s\\n" "$OMP_NUM_THREADS" "$MKL_NUM_THREADS" ' \
              '"$TF_NUM_INTRAOP_THREADS"\n'
    argv = ["sh", "-c", script]
    if cpus is not None:
        argv = ["taskset", "-c", cpus] + argv
    env = {k: v for k, v in os.environ.items() if k not in tb.BUDGET_VARIABLES}
    env.update(environ)
    return subprocess.run(argv, env=env, capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.mark.parametrize("tree", [V2_NESTED, V2_NONE, V1_QUOTA, V1_NONE],
                         ids=["v2-nested", "v2-none", "v1-quota", "v1-none"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_shell_budget_agrees_with_python(tmp_path, tree, workers):
    root, proc = _tree(tmp_path, *tree)
    cores = tb.usable_cores(limit=tb.cgroup_cpu_limit(root, proc))
    want = str(tb.threads_per_worker(workers, cores))
    assert _sh_budget({}, workers, root, proc) == [want] * 3


@pytest.mark.skipif(not shutil.which("taskset"), reason="taskset (util-linux) is not installed")
def test_shell_budget_honours_the_affinity_mask(tmp_path):
    root, proc = _tree(tmp_path, *V2_NONE)
    assert _sh_budget({}, 1, root, proc, cpus="0") == ["1"] * 3


def test_shell_budget_keeps_the_users_values(tmp_path):
    root, proc = _tree(tmp_path, *V2_NONE)
    assert _sh_budget({"OMP_NUM_THREADS": "3"}, 2, root, proc) == ["3", "3", "3"]
    assert _sh_budget({"TF_NUM_INTRAOP_THREADS": "6"}, 1, root, proc) == [
        str(AFFINITY), str(AFFINITY), "6"]
    assert tb.shell_budget({name: "1" for name in tb.BUDGET_VARIABLES}, "2") == ""


def test_oversubscription_warning_names_the_numbers_and_the_fix(monkeypatch):
    monkeypatch.setattr(tb, "_probes", {})     # no framework imported: OpenMP's view
    text = tb.oversubscription_warning(2, {"OMP_NUM_THREADS": "4"}, cores=4)
    assert text is not None
    assert "2 workers" in text and "4 compute threads" in text and "8 threads on 4" in text
    assert "OMP_NUM_THREADS=2" in text
    assert tb.oversubscription_warning(2, {"OMP_NUM_THREADS": "2"}, cores=4) is None
    assert tb.oversubscription_warning(1, {"OMP_NUM_THREADS": "64"}, cores=4) is None
    # unset: OpenMP's default is one thread per usable core
    assert tb.oversubscription_warning(2, {}, cores=4) is not None


def test_a_registered_probe_wins_over_the_environment(monkeypatch):
    monkeypatch.setattr(tb, "_probes", {})
    tb.register_thread_probe("small pool", lambda: 1)
    tb.register_thread_probe("test pool", lambda: 3)       # the largest pool counts
    assert tb.intra_op_threads({"OMP_NUM_THREADS": "8"}, cores=8) == (3, "test pool")
    text = tb.oversubscription_warning(3, {"OMP_NUM_THREADS": "1"}, cores=8)
    assert text is not None and "test pool" in text and "9 threads on 8" in text
    tb.register_thread_probe("broken pool", lambda: 1 // 0)  # a failing probe is ignored
    assert tb.intra_op_threads({}, cores=8) == (3, "test pool")


def test_a_nested_openmp_setting_gives_the_others_its_outer_level(tmp_path):
    assert tb.budget_env({"OMP_NUM_THREADS": "4,2"}, 2, cores=8) == {
        "MKL_NUM_THREADS": "4", "TF_NUM_INTRAOP_THREADS": "4"}
    root, proc = _tree(tmp_path, *V2_NONE)
    assert _sh_budget({"OMP_NUM_THREADS": "4,2"}, 2, root, proc) == ["4,2", "4", "4"]
