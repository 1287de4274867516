"""A soak: an elastic fuse.torch job on 4 network-namespace hosts under a random fault every
20-60 s, for minutes; checks that every committed step was applied exactly once, that the
final weights equal a replay, that the job finishes and that no worker outlives it, and
reports each fault's recovery time.

    python bench/studies/soak.py [--minutes 20] [--seed N] [--md bench/results/studies/soak.md]
                                 [--json bench/results/studies/soak.json]

Needs root, iproute2, iptables, tc and openssh-server (scripts/cluster.sh makes the hosts; the
tests' cluster_util.py runs it).  The job and the faults are tests/support/soak_util.py's: the
launcher and one worker on host 1, a worker on each of hosts 2-4, a discovery script listing all
four, ``--blacklist-cooldown-range 10 40`` so that a host that failed comes back.  After a pause
drawn from 20-60 s (the seed, printed, draws everything), one fault:

* SIGKILL of a worker, or of its guard (the worker's parent), on any host;
* SIGSTOP of a worker for 20 s;
* a worker host cut off for 30 s; two worker hosts cut from each other for 30 s;
* 5 % packet loss on a worker host for 30 s;
* a worker host taken out of discovery for 30 s, then put back.

A fault that takes a host out is drawn only while the job runs on 3 or more hosts (else another
is).  When the time is up the workers finish after their next step and the checks run.  Each
fault's recovery is the time from its injection to the first commit of a generation formed after
it (or, where it caused none, to the first commit after it was lifted); the longest time without
a commit while it lasted and, for discovery, the time from putting the host back to the first
commit with it are reported too.  Not a quiet-machine figure: the report names the load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "support"))
sys.path.insert(0, str(HERE.parent / "suite"))

import cluster_util  # noqa: E402
import common  # noqa: E402
import machine  # noqa: E402
from soak_util import KINDS, SoakJob  # noqa: E402

HOSTS = 4
HOLD_S = {"stop_worker": 20.0, "cut_host": 30.0, "cut_pair": 30.0, "packet_loss": 30.0,
          "discovery": 30.0}
TAKES_A_HOST_OUT = {"kill_worker", "kill_guard", "stop_worker", "cut_host", "cut_pair",
                    "discovery"}


def draw(rng: random.Random, job: SoakJob) -> tuple[str, list[int]]:
    """The next fault and the hosts it hits."""
    running = job.hosts_with_workers()
    kinds = [k for k in KINDS if k not in TAKES_A_HOST_OUT or len(running) >= 3]
    kind = rng.choice(kinds)
    remote = [h for h in running if h != 1] or [2]
    if kind in ("kill_worker", "kill_guard", "stop_worker"):
        return kind, [rng.choice(running)]
    if kind == "cut_pair":              # drawn only with 3 or more hosts: 2 of them remote
        return kind, sorted(rng.sample(remote, 2))
    return kind, [rng.choice(remote)]


def soak(minutes: float, seed: int, out: Path, log) -> tuple[SoakJob, dict, int]:
    rng = random.Random(seed)
    with cluster_util.cluster(out, HOSTS) as c:
        job = SoakJob(c, out / "job", cooldown=(10, 40), env={"STEP_SLEEP": "0.05"})
        job.start()
        rc = None
        try:
            job.wait_until(lambda cs: len(cs) >= 20 and cs[-1].size == HOSTS, 180,
                           f"20 commits on {HOSTS} hosts")
            end = time.monotonic() + minutes * 60
            while True:
                pause = rng.uniform(20, 60)
                if time.monotonic() + pause >= end:
                    break
                time.sleep(pause)
                kind, hosts = draw(rng, job)
                log(f"{time.strftime('%H:%M:%S')} {kind} on hosts {hosts}")
                job.inject(kind, hosts, lambda: time.sleep(HOLD_S.get(kind, 0.0)))
                job.wait_commits(1, 300)
            rc = job.stop(timeout=300)
        finally:
            job.kill()
            leftover = job.leftover_workers()
        assert rc == 0, f"the launcher ended with code {rc}:\n{job.launcher_err()[-4000:]}"
        assert not leftover, f"worker processes outlived the job: {leftover}"
        job.measure()
        summary = job.check()
    return job, summary, rc


def report(job: SoakJob, summary: dict, args, seed: int, started: str, load: dict) -> dict:
    rows = [dict(kind=f.kind, hosts=f.hosts, at_s=round(f.started - job.faults[0].started, 1)
                 if job.faults else 0, recovery_s=_r(f.recovery_s), reformed=f.reformed,
                 longest_gap_s=_r(f.longest_gap_s), rejoin_s=_r(f.rejoin_s))
            for f in job.faults]
    by_kind = {}
    for kind in KINDS:
        times = [r["recovery_s"] for r in rows if r["kind"] == kind and r["recovery_s"]]
        if times:
            by_kind[kind] = {"faults": len(times), "median_s": _r(statistics.median(times)),
                             "max_s": _r(max(times))}
    return common.job_record("soak", rows, machine.describe(),
                             dict(minutes=args.minutes, seed=seed, hosts=HOSTS,
                                  cooldown="10 40", step_sleep_s=0.05, allreduce_bytes=1 << 20),
                             summary=summary, by_kind=by_kind, started_utc=started,
                             load_average_start=load["start"],
                             load_average_end=load["end"])


def markdown(record: dict, command: str) -> str:
    m, cfg, s = record["machine"], record["config"], record["summary"]
    lines = [
        f"## Soak: {cfg['minutes']:g} minutes, seed {cfg['seed']} ({record['started_utc']})",
        "",
        f"`{command}`: an elastic fuse.torch job on {cfg['hosts']} network-namespace hosts of "
        f"one machine ({m['cores']} cores, {m['cpu']}, Linux {m['kernel']}; torch "
        f"{m['torch']}), 1 slot each, a 1 MiB allreduce and a commit every step (~"
        f"{cfg['step_sleep_s']} s of sleep), blacklist cool-down 10-40 s. Load average "
        f"{record['load_average_start']} at the start, {record['load_average_end']} at the end "
        "(a shared machine: other jobs ran beside it).",
        "",
        f"Result: the job finished (exit code 0) after {s['batches']} committed batches in "
        f"{s['generations']} generations, on {s['final_size']} workers; every batch applied "
        "exactly once and the weights equal to a replay, bit for bit; no worker outlived the "
        "job.",
        "",
        "| kind | faults | median recovery (s) | max (s) |",
        "|---|---|---|---|",
    ]
    for kind, k in record["by_kind"].items():
        lines.append(f"| {kind} | {k['faults']} | {k['median_s']} | {k['max_s']} |")
    lines += ["", "| at (s) | fault | hosts | recovery (s) | re-formed | longest gap (s) | "
              "rejoin (s) |", "|---|---|---|---|---|---|---|"]
    for r in record["rows"]:
        lines.append(f"| {r['at_s']} | {r['kind']} | {','.join(map(str, r['hosts']))} | "
                     f"{r['recovery_s']} | {'yes' if r['reformed'] else 'no'} | "
                     f"{r['longest_gap_s']} | {r['rejoin_s'] if r['rejoin_s'] else ''} |")
    return "\n".join(lines) + "\n"


def _r(x):
    return None if x is None else round(x, 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None, help="write the record here")
    p.add_argument("--md", default=None, help="append the report to this Markdown file")
    p.add_argument("--keep", default=None, help="a directory to keep the job's files in")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"soak: seed {seed} (--seed {seed} repeats the draw)", flush=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = {"start": machine.load_average()}
    out = Path(args.keep or tempfile.mkdtemp(prefix="fuse-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    job, summary, _rc = soak(args.minutes, seed, out, lambda s: print(s, flush=True))
    load["end"] = machine.load_average()
    record = report(job, summary, args, seed, started, load)
    command = "python bench/studies/soak.py " + " ".join(
        a for a in sys.argv[1:]) if sys.argv[1:] else "python bench/studies/soak.py"
    text = markdown(record, command)
    print(text)
    print(json.dumps(record["by_kind"]))
    if args.json:
        records = []
        if os.path.exists(args.json):
            with open(args.json) as f:
                old = json.load(f)
            records = old if isinstance(old, list) else [old]
        records.append(record)
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
            f.write("\n")
    if args.md:
        with open(args.md, "a") as f:
            f.write(("\n" if os.path.exists(args.md) and os.path.getsize(args.md) else "") + text)


if __name__ == "__main__":
    main()
