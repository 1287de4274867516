"""A slow worker, named and removed: an elastic job of 4 workers where one becomes 3x slower,
under ``--straggler-policy remove``, beside a clean job of the 3 others.

    python bench/studies/straggler.py [--runs 3] [--json bench/results/studies/straggler.json]

Each worker runs on a host of its own (localhost, 127.0.0.1, 127.0.0.2, 127.0.0.3: distinct
hosts to the driver, all on this machine).  A step is ``--compute`` seconds of "compute" (a
sleep: it stands for a GPU-bound forward and backward and leaves the 2 cores to the engine
and the neighbours), a 1 MiB allreduce of the gradients and a commit.  From step
``--slow-from`` on, the worker on 127.0.0.2 sleeps twice its own measured compute time more,
so its steps take 3x as long.  Rank 0 logs each commit (wall time, generation, size).

With ``--outside`` the slowdown comes from outside the process instead, as a job that knows
nothing of it would meet one: the steps are CPU work (``--compute`` seconds on a quiet core),
and from step ``--slow-from`` on (counted in rank 0's commits) this script stops and resumes
the worker on 127.0.0.2 (SIGSTOP 60 ms, SIGCONT 30 ms, over and over), so it runs a third of
the time.

Reported: steps per second before the slowdown, while the slow worker is in the job, and after
it was removed (from 2 s after the re-formed job's first commit), beside a clean 3-worker job
(the same script without the slowdown); the time from the slow worker's first slow step to
the driver's removal (its log line) and to the re-formed job's first commit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import common  # noqa: E402

SLOW_HOST = "127.0.0.2"

WORKER = f"""
import os, sys
sys.path.insert(0, {BENCH_DIR!r})
from straggler import train
train(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
"""


def busy(iterations: int) -> float:
    """CPU-bound "compute": a fixed amount of work, the same on every worker, that competes
    for the cores with the other workers and the neighbours, as a CPU training step does."""
    x = 1.0
    for _ in range(iterations):
        x = x * 1.0000001 + 1e-9
    return x


def calibrate(seconds: float) -> int:
    """The iterations of busy() that take ``seconds`` on one core of this machine now."""
    n = 200_000
    t0 = time.perf_counter()
    busy(n)
    return max(1, int(n * seconds / (time.perf_counter() - t0)))


def train(out: str, steps: int, compute: float, slow_from: int, cpu: int = 0) -> None:
    """``cpu``: iterations of busy() per step instead of sleeping ``compute`` seconds."""
    import numpy as np

    import fuse
    import fuse.elastic
    from fuse.worker.state import config, rendezvous_generation

    fuse.init()
    me = config().hostname
    state = fuse.elastic.ObjectState(step=0, w=np.zeros(1 << 18, dtype=np.float32))
    grad = np.ones(1 << 18, dtype=np.float32)       # 1 MiB

    @fuse.elastic.run
    def loop(state):
        while state.step < steps:
            t0 = time.perf_counter()
            if cpu:
                busy(cpu)
            else:
                time.sleep(compute)
            own = time.perf_counter() - t0
            if me == SLOW_HOST and slow_from >= 0 and state.step >= slow_from:
                mark = os.path.join(out, "slowed")
                if not os.path.exists(mark):
                    with open(mark, "w") as f:
                        f.write(repr(time.time()))
                time.sleep(2 * own)     # 3x its own step time
            state.w += fuse.allreduce(grad, name="grad", op=fuse.Average)
            state.step += 1
            state.commit()
            if fuse.rank() == 0:
                with open(os.path.join(out, "commits"), "a") as f:
                    f.write(f"{time.time()!r} {rendezvous_generation()} {fuse.size()}\n")
                report = fuse.straggler_report()
                if report["complete"]:
                    worst = max(report["ranks"], key=lambda r: r["behind"])
                    seen[0] = max(seen[0], worst["behind"])

    seen = [1.0]       # rank 0: the highest median "behind" of any rank over the job
    loop(state)
    if fuse.rank() == 0:
        with open(os.path.join(out, "max_behind"), "w") as f:
            f.write(repr(seen[0]))


def worker_on(proc_pid: int, host: str) -> int | None:
    """The pid of the worker that fuserun (``proc_pid``) started for ``host`` (its
    FUSE_HOSTNAME): only fuserun's descendants, never another job's processes."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    mine = {proc_pid}
    grew = True
    while grew:
        found = {pid for pid, pp in parent.items() if pp in mine} - mine
        mine |= found
        grew = bool(found)
    matching = []
    for pid in sorted(mine - {proc_pid}):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if f"FUSE_HOSTNAME={host}".encode() in env and b"worker.py" in cmd:
            matching.append(pid)
    # the worker itself, not a wrapper that started it (fuserun's orphan guard)
    leaves = [pid for pid in matching if not any(parent.get(q) == pid for q in matching)]
    return leaves[0] if leaves else None


def stop_and_go(tmp: str, proc: subprocess.Popen, slow_from: int, done: threading.Event,
                stop_s: float = 0.06, run_s: float = 0.03) -> None:
    """From rank 0's commit ``slow_from`` on, hold the worker on SLOW_HOST to a third of the
    time from outside (SIGSTOP/SIGCONT), until it exits or the job ends."""
    commits = os.path.join(tmp, "commits")
    while not done.is_set():
        if os.path.exists(commits):
            with open(commits) as f:
                if sum(1 for _ in f) >= slow_from:
                    break
        time.sleep(0.05)
    pid = worker_on(proc.pid, SLOW_HOST)
    if pid is None or done.is_set():
        return
    with open(os.path.join(tmp, "slowed"), "w") as f:
        f.write(repr(time.time()))
    try:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep(run_s)
    except ProcessLookupError:      # removed: it exited
        return
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def rate(times: list[float]) -> float | None:
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else None


def one_job(tmp: str, workers: int, steps: int, compute: float, slow_from: int,
            window: float, cpu: bool = False, policy: str = "remove",
            factor: float | None = None, neighbours: int = 0, outside: bool = False) -> dict:
    script = os.path.join(tmp, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    hosts = ["localhost"] + [f"127.0.0.{i}" for i in range(1, workers)]
    argv = [sys.executable, "-m", "fuse.runner.launch", "-np", str(workers), "--min-np", "2",
            "-H", ",".join(f"{h}:1" for h in hosts), "--straggler-policy", policy,
            sys.executable, script, tmp, str(steps), str(compute),
            str(-1 if outside else slow_from),
            str(calibrate(compute) if cpu else 0)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    env["FUSE_STRAGGLER_WINDOW"] = str(window)
    if factor is not None:
        env["FUSE_STRAGGLER_FACTOR"] = str(factor)
    start = time.time()
    busy_procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                  for _ in range(neighbours)]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        done = threading.Event()
        if outside and slow_from >= 0:
            threading.Thread(target=stop_and_go, args=(tmp, proc, slow_from, done),
                             daemon=True).start()
        removed_at = None
        err_lines = []
        for line in proc.stderr:           # the driver's log: when it decided
            err_lines.append(line)
            if removed_at is None and "removing straggler" in line:
                removed_at = time.time()
        proc.wait(timeout=600)
        done.set()
    finally:
        for b in busy_procs:
            b.kill()
            b.wait()
    if proc.returncode != 0:
        raise RuntimeError("the job failed:\n" + "".join(err_lines[-40:]))
    commits = []
    with open(os.path.join(tmp, "commits")) as f:
        for line in f:
            t, g, n = line.split()
            commits.append((float(t), int(g), int(n)))
    slowed = None
    if os.path.exists(os.path.join(tmp, "slowed")):
        with open(os.path.join(tmp, "slowed")) as f:
            slowed = float(f.read())
    first_gen = [t for t, g, n in commits if g == 0]
    later = [t for t, g, n in commits if g > 0]
    res = {"workers": workers, "elapsed_s": time.time() - start,
           "generations": max(g for _t, g, _n in commits) + 1,
           "final_size": commits[-1][2],
           "warnings": sum("straggler:" in line for line in err_lines),
           "removals": sum("removing straggler" in line for line in err_lines)}
    said = [line.strip() for line in err_lines if "straggler" in line]
    res["log"] = said[:3]       # the first warning and decision, as the job logged them
    with open(os.path.join(tmp, "max_behind")) as f:
        res["max_median_behind"] = float(f.read())
    if slowed is None:
        res["steps_per_s"] = rate([t for t, _g, _n in commits][5:])
        return res
    res["before_steps_per_s"] = rate([t for t in first_gen if t < slowed][5:])
    res["slow_steps_per_s"] = rate([t for t in first_gen if t >= slowed + 1.0])
    if later:
        res["after_steps_per_s"] = rate([t for t in later if t >= later[0] + 2.0])
        res["slowdown_to_first_commit_s"] = later[0] - slowed
    if removed_at is not None:
        res["slowdown_to_removal_s"] = removed_at - slowed
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--compute", type=float, default=0.05,
                   help="seconds of compute per step (default 0.05)")
    p.add_argument("--slow-from", type=int, default=60)
    p.add_argument("--window", type=float, default=10.0, help="FUSE_STRAGGLER_WINDOW")
    p.add_argument("--equal-runs", type=int, default=3,
                   help="jobs of 4 equal workers with CPU-bound steps beside busy neighbours: "
                        "the highest median 'behind' any rank reached (what the factor's "
                        "default must stay above)")
    p.add_argument("--equal-steps", type=int, default=300)
    p.add_argument("--equal-compute", type=float, default=0.02,
                   help="seconds of CPU work per step (on one quiet core) in the equal jobs")
    p.add_argument("--neighbours", type=int, default=2,
                   help="busy processes beside each equal job (default 2)")
    p.add_argument("--outside", action="store_true",
                   help="slow the worker down from outside (SIGSTOP/SIGCONT, a third of the "
                        "time) instead of a sleep in it; the steps are then CPU work")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    equal = []
    for i in range(args.equal_runs):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="straggler-bench-") as tmp:
            res = one_job(tmp, 4, args.equal_steps, args.equal_compute, -1, args.window,
                          cpu=True,
                          policy="warn", neighbours=args.neighbours)
        res.update({"run": i + 1, "load_1min": load, "neighbours": args.neighbours})
        equal.append(res)
        print(json.dumps(res), flush=True)
    runs = []
    for i in range(args.runs):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="straggler-bench-") as tmp:
            slow = one_job(tmp, 4, args.steps, args.compute, args.slow_from, args.window,
                           cpu=args.outside, outside=args.outside)
        with tempfile.TemporaryDirectory(prefix="straggler-bench-") as tmp:
            clean = one_job(tmp, 3, args.steps, args.compute, -1, args.window,
                            cpu=args.outside)
        row = {"run": i + 1, "load_1min": load, "slow_job": slow, "clean_3": clean}
        if slow.get("after_steps_per_s") and clean.get("steps_per_s"):
            row["after_vs_clean_3"] = slow["after_steps_per_s"] / clean["steps_per_s"]
        runs.append(row)
        print(json.dumps(row), flush=True)

    def med(key, side="slow_job"):
        vals = [r[side][key] if side else r[key] for r in runs
                if (r[side] if side else r).get(key) is not None]
        return statistics.median(vals) if vals else None

    summary = {"runs": runs, "equal_runs": equal, "compute_s": args.compute,
               "outside": args.outside,
               "window_s": args.window,
               "equal_max_median_behind": max((e["max_median_behind"] for e in equal),
                                              default=None),
               "equal_warnings": sum(e["warnings"] for e in equal),
               "median": {k: med(k) for k in ("before_steps_per_s", "slow_steps_per_s",
                                               "after_steps_per_s", "slowdown_to_removal_s",
                                               "slowdown_to_first_commit_s")},
               "median_clean_3_steps_per_s": med("steps_per_s", "clean_3"),
               "median_after_vs_clean_3": med("after_vs_clean_3", None),
               "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps({k: v for k, v in summary.items() if k not in ("runs", "equal_runs")},
                     indent=1))
    common.write_json(args.json, summary)


if __name__ == "__main__":
    main()
