"""Where an added host's join time goes: an elastic fuse.torch job of 2 workers on network-namespace
hosts, grown to 3 by its discovery script ``--runs`` times (and shrunk back after each).

    python bench/studies/elastic_join.py [--runs 10] [--keep DIR]

The job and its worker are the soak's (tests/support/soak_util.py, workers_elastic_soak.py:
fuserun --verbose on host 1, a 1 MiB allreduce and a commit every step); host 3 is added to the
discovery script's answer, and each run prints, from that moment: when the driver's discovery
saw it, when the driver published the generation with it (its stderr lines carry their time),
when the added worker's process started (before its imports) and when it had joined
(``fuse.init()`` returned), its first commit, and the running workers' last commit before it
(they stop training from there on: the stall a join costs them).  Needs root, iproute2, iptables
and openssh-server, as the soak does.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "support"))

import cluster_util  # noqa: E402
from soak_util import SoakJob, worker_records  # noqa: E402

GENERATION_OF_3 = re.compile(r"generation \d+: 3 workers")


def first_line_after(job: SoakJob, t: float, pattern) -> float | None:
    """When the launcher first wrote a line matching ``pattern`` after ``t`` (seconds after)."""
    for line in job.launcher_err().splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            when = float(stamp)
        except ValueError:
            continue
        if when > t and re.search(pattern, rest):
            return when - t
    return None


def join_once(job: SoakJob, new_host: str) -> dict:
    t = time.time()
    job.list_hosts([1, 2, 3])
    job.wait_until(lambda cs: any(c.time > t and c.size == 3 for c in cs), 120, "the join")
    commits = job.commits()
    first = next(c for c in commits if c.time > t and c.size == 3)
    last_old = max([c.time for c in commits if c.time < first.time and c.size == 2] or [t])
    rec = next((r for r in worker_records(job.out).values()
                if r["host"] == new_host and r["started"] > t), {})
    row = {"discovered_s": first_line_after(job, t, "discovery:"),
           "published_s": first_line_after(job, t, GENERATION_OF_3),
           "process_started_s": rec.get("started", t) - t,
           "joined_s": rec.get("initialized", t) - t,
           "first_commit_s": first.time - t,
           "running_workers_last_commit_s": last_old - t}
    row["stall_s"] = row["first_commit_s"] - row["running_workers_last_commit_s"]
    shrink_at = time.time()
    job.list_hosts([1, 2])
    job.wait_until(lambda cs: sum(c.time > shrink_at and c.size == 2 for c in cs) >= 10, 120,
                   "10 commits after the shrink")
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--keep", default=None, help="a directory to keep the job's files in")
    args = p.parse_args()
    out = Path(args.keep or tempfile.mkdtemp(prefix="fuse-join-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with cluster_util.cluster(out, 3) as c:
        job = SoakJob(c, out / "job", cooldown=(1, 2), env={"STEP_SLEEP": "0.05"}, verbose=True)
        job.list_hosts([1, 2])
        job.start(np=2)
        try:
            job.wait_commits(10, 180, size=2)
            for i in range(args.runs):
                row = join_once(job, c.addresses[2])
                rows.append(row)
                print(f"run {i + 1}: " + ", ".join(
                    f"{k[:-2]} {v:.2f} s" for k, v in row.items() if v is not None), flush=True)
            rc = job.stop(120)
        finally:
            job.kill()
    assert rc == 0, job.launcher_err()[-3000:]
    job.check()
    for key in rows[0]:
        values = [r[key] for r in rows if r[key] is not None]
        if values:
            print(f"median {key[:-2]}: {statistics.median(values):.2f} s "
                  f"(max {max(values):.2f} s)")


if __name__ == "__main__":
    main()
