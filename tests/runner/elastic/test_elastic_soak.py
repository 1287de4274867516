"""The soak's short version (bench/studies/soak.py runs it for minutes under random faults): an
elastic fuse.torch job on 4 network-namespace hosts, one fault of each kind that recovers fast,
each at a fixed point of the training (after so many commits), never at a time:

* SIGKILL of the worker on host 3;
* SIGKILL of the guard of the worker on host 2 (its parent: the ssh session's shell): the
  worker dies with it instead of training on as a ghost (test_elastic_guard.py kills the
  launcher's own guard of a local worker);
* 5 % packet loss on host 2 for 10 commits.

The guard is killed once the job re-formed without host 3, while host 3 (its cool-down is
1 s) rejoins; after that the job must be back at 4 workers.  A
host leaving and rejoining through discovery is left to test_elastic_numpy's
test_discovery_grows_and_shrinks_the_job: each rejoin here costs a new worker's start-up.
Then the workers stop after their next step: the launcher exits 0, every batch was committed
exactly once and the weights equal a replay bit for bit, and no worker process is left."""

from __future__ import annotations

import shutil

import cluster_util
import needs
import pytest

from soak_util import SoakJob

pytestmark = pytest.mark.timeout(240)


def test_an_elastic_job_survives_one_fault_of_each_fast_kind(tmp_path):
    for tool in ("iptables", "tc"):
        if not shutil.which(tool):
            needs.missing("ssh", f"{tool} is missing (scripts/setup.sh installs it with sshd)")
    with cluster_util.cluster(tmp_path, 4) as c:
        job = SoakJob(c, tmp_path / "job", cooldown=(1, 1), env={"STEP_SLEEP": "0.02"})
        job.start()
        try:
            job.wait_commits(10, 120, size=4)

            def back_to_four():
                job.wait_commits(3, 60, size=4)

            # the second kill once the job re-formed without host 3, while host 3 rejoins:
            # one rejoin's wait (a worker's start-up) for both
            job.inject("kill_worker", [3], hold=None)
            job.wait_commits(1, 60, size=3)
            job.inject("kill_guard", [2], hold=None)
            back_to_four()
            job.inject("packet_loss", [2], hold=lambda: job.wait_commits(10, 60))
            job.wait_commits(3, 60)
            rc = job.stop(timeout=60)
        finally:
            job.kill()
        leftover = job.leftover_workers()
    err = job.launcher_err()
    assert rc == 0, err[-4000:]
    assert leftover == [], f"workers outlived the job: {leftover}"
    summary = job.check()
    job.measure()
    for f in job.faults:
        assert f.recovery_s is not None, f"no commit after {f.describe()}"
        if f.kind in ("kill_worker", "kill_guard"):
            assert f.reformed, f"{f.describe()}: the job did not re-form"
    assert summary["final_size"] == 4
    # the killed worker and the one whose guard was killed: each its host's failure
    for host in (3, 2):
        assert f"worker {c.addresses[host - 1]}:0 exited with code" in err, err[-3000:]
