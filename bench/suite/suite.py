"""The whole benchmark suite in one command: every workload as its own job, then JSON, plots, a
results page per workload and the index of them in bench/RESULTS.md.

    bash scripts/bench.sh [--quick] [--only allreduce,many_small,training,overhead]

Workloads (each a list of jobs; a job is a benchmark script under fuserun -np 2 or mpiexec -n 2,
writing one JSON record):

  allreduce   bench/suite/allreduce.py: 4 B .. 256 MiB, fuse (gloo) vs torch.distributed and
              fuse (mpi) vs mpi4py
  collectives bench/suite/collectives.py: allgather, broadcast, alltoall, reducescatter and the
              grouped allreduce/allgather, 4 B .. 256 MiB, fuse.torch vs torch.distributed
              (gloo): 2 ranks, 4 ranks, and a process set of 2 of 4 ranks
  many_small  bench/suite/torch_step.py: ResNet-50 gradient set vs DDP, fusion on/off, fp16/bf16
  training    bench/suite/train_cnn.py: small CNN, 1 and 2 workers (fuse vs DDP), bpps 1 and 4
  overhead    bench/suite/overhead.py: backward with and without fuse, idle engine CPU
  loaded      bench/suite/loaded.py: ResNet-50 gradient set and small CNN, fuse under fuserun vs DDP
              under torchrun (each launcher's own thread defaults), quiet and beside --load
              busy processes (default 1)
  sharded     bench/suite/sharded.py: AdamW on the ResNet-50-shaped and transformer-shaped
              parameter sets, 2 and 4 ranks quiet and beside 1 busy process, and 2x2
              network-namespace hosts at 1 Gbit/s (needs root): fuse, fuse sharded=True, DDP,
              DDP + ZeroRedundancyOptimizer (step time, optimizer state per rank, peak RSS)
  multihost   bench/suite/multihost.py: network-namespace hosts with 1 Gbit/s links (needs root),
              layouts 2x1, 4x1, 2x2: fuserun -H against torchrun per host, ResNet-50 gradient
              set and 64 MiB allreduce bandwidth
  tensorflow  bench/suite/tf_step.py: a tf.function GradientTape step (and Keras model.fit),
              fuse.tensorflow vs MultiWorkerMirroredStrategy, 2 workers, a Dense model and
              ResNet-50, quiet and beside --load busy processes, and on 2x1 network-namespace
              hosts at 1 Gbit/s (needs root); runs in .venv-tf (made by
              scripts/test_tensorflow.sh), skipped when that environment is missing

Writes bench/results/<workload>.json, bench/plots/*.png, bench/results/<workload>.md (the
workload's page: setting, rerun command, latest table) and the index in bench/RESULTS.md, from
all result files present (so ``--only`` refreshes one workload and keeps the others;
``--jobs`` runs only the named jobs of it and keeps the other jobs' latest records, so that a
long workload can be run in parts).  A job that fails or exceeds its time limit is killed and reported; a competitor that is not installed
(mpi4py, torch) is skipped with a note.  Exit status 1 if a job failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import machine  # noqa: E402
import report  # noqa: E402

BENCH = os.path.dirname(HERE)   # results, plots and RESULTS.md sit beside the suite and the studies
RESULTS_DIR = os.path.join(BENCH, "results")
PLOTS_DIR = os.path.join(BENCH, "plots")
RESULTS_MD = os.path.join(BENCH, "RESULTS.md")
WORKLOADS = ("allreduce", "collectives", "many_small", "training", "overhead", "loaded",
             "sharded", "multihost", "tensorflow")
# TensorFlow needs NumPy >= 1.26 and lives in an environment of its own
TF_PYTHON = os.path.join(os.path.dirname(BENCH), ".venv-tf", "bin", "python")


@dataclasses.dataclass
class Job:
    name: str
    argv: list[str]              # the benchmark script and its arguments (no interpreter)
    launcher: str = "fuserun"    # "fuserun" or "mpiexec" (2 workers), or "self" (the script
                                 # starts mpiexec itself)
    env: dict = dataclasses.field(default_factory=dict)
    needs: tuple[str, ...] = ("torch",)
    timeout: float | None = None  # seconds before it is killed, when it needs more than the rest
    np: int = 2                  # workers under fuserun or mpiexec
    python: str | None = None    # the interpreter to run the script with (default: this one)


def jobs_for(workload: str, quick: bool, load: int = 1) -> list[Job]:
    """The jobs of one workload, with smaller settings under --quick (``load``: busy processes
    beside the loaded workload)."""
    if workload == "allreduce":
        sizes = ["--rounds", "2" if quick else "7"]
        if quick:
            sizes += ["--sizes", "4,256,16K,1M,64M,256M"]
        return [Job("allreduce_gloo", ["allreduce.py", *sizes]),
                Job("allreduce_mpi", ["allreduce.py", "--mpi", *sizes], launcher="self",
                    needs=("mpi4py", "mpiexec"))]
    if workload == "collectives":
        args = (["--rounds", "1", "--sizes", "4,4K,1M,64M"] if quick else ["--rounds", "3"])
        return [Job("collectives_2_world", ["collectives.py", *args], timeout=900),
                Job("collectives_4_world", ["collectives.py", *args], np=4, timeout=1200),
                Job("collectives_4_pset", ["collectives.py", "--process-set", "0,2", *args],
                    np=4, timeout=900)]
    if workload == "many_small":
        rounds = ["--rounds", "2", "--steps", "2"] if quick else ["--rounds", "5", "--steps", "4"]
        return [Job("torch_step_fusion_none", ["torch_step.py", *rounds]),
                Job("torch_step_nofusion_none", ["torch_step.py", *rounds],
                    env={"FUSE_FUSION_THRESHOLD": "0"}),
                Job("torch_step_fusion_fp16", ["torch_step.py", "--compression", "fp16", *rounds]),
                Job("torch_step_fusion_bf16", ["torch_step.py", "--compression", "bf16", *rounds]),
                Job("torch_step_mpi_fusion_none", ["torch_step.py", *rounds], launcher="mpiexec",
                    env={"FUSE_BACKEND": "mpi"}, needs=("torch", "mpi4py", "mpiexec"))]
    if workload == "training":
        rounds = (["--rounds", "2", "--micro-steps", "8"] if quick
                  else ["--rounds", "7", "--micro-steps", "24"])
        return [Job("train_cnn", ["train_cnn.py", *rounds])]
    if workload == "overhead":
        args = (["--rounds", "2", "--reps", "5", "--idle-seconds", "2"] if quick
                else ["--rounds", "11", "--reps", "15", "--idle-seconds", "10"])
        return [Job("overhead", ["overhead.py", *args])]
    if workload == "loaded":
        args = (["--rounds", "2", "--steps", "4"] if quick else ["--rounds", "5", "--steps", "10"])
        # 2 load levels x 2 models x rounds x 2 launches of a 2-worker job
        return [Job("loaded", ["loaded.py", "--load", str(load), *args], launcher="self",
                    timeout=600 if quick else 1800)]
    if workload == "sharded":
        if quick:
            return [Job("sharded", ["sharded.py", "--sizes", "2", "--rounds", "1", "--steps",
                                    "2"], launcher="self", timeout=600)]
        # one job per setting, each under 8 minutes, so that each can be rerun alone (--jobs):
        # 2 models x 2 sizes x 4 sides x rounds launches, each ~10-30 s (start-up included;
        # on the 1 Gbit/s hosts up to a minute)
        steps = ["--steps", "5"]
        return [Job("sharded", ["sharded.py", "--rounds", "2", *steps], launcher="self",
                    timeout=1200),
                Job("sharded_loaded", ["sharded.py", "--job-name", "sharded_loaded",
                                       "--loads", "1", "--rounds", "1", *steps],
                    launcher="self", timeout=1200),
                Job("sharded_hosts", ["sharded.py", "--job-name", "sharded_hosts", "--loads",
                                      "", "--layouts", "2x2", "--rounds", "1", *steps],
                    launcher="self", timeout=1800)]
    if workload == "multihost":
        if quick:
            return [Job("multihost", ["multihost.py", "--layouts", "2x1,2x2", "--rounds", "1",
                                      "--steps", "2"], launcher="self", timeout=900)]
        # two jobs, each under 8 minutes, so that each can be rerun alone (--jobs); the three
        # layouts took 554 s in one
        args = ["--rounds", "3", "--steps", "5"]
        return [Job("multihost", ["multihost.py", "--layouts", "2x1,2x2", *args],
                    launcher="self", timeout=1200),
                Job("multihost_4x1", ["multihost.py", "--layouts", "4x1", "--job-name",
                                      "multihost_4x1", *args], launcher="self", timeout=1200)]
    if workload == "tensorflow":
        args = (["--rounds", "1", "--steps", "3", "--warmup", "2"] if quick
                else ["--rounds", "3", "--steps", "10"])
        # 2 load levels x rounds x 2 sides, each job ~1-2 min (TensorFlow's start included).
        # No --fit: Keras 3's model.fit refuses MWMS's distributed dataset (tf_step.py --fit
        # shows the error), so only the tf.function loop has a competitor to compare with.
        # Across 2 namespace hosts (root only): one load level, fewer steps (a ResNet-50
        # step takes seconds at 1 Gbit/s); each job 1-3 min.
        hosts = (["--rounds", "1", "--steps", "2", "--warmup", "1"] if quick
                 else ["--rounds", "2", "--steps", "6", "--warmup", "2"])
        return [Job("tensorflow_step", ["tf_step.py", "--load", str(load), *args],
                    launcher="self", needs=(), python=TF_PYTHON,
                    timeout=900 if quick else 2400),
                Job("tensorflow_hosts", ["tf_step.py", "--hosts", "--load", "0", *hosts],
                    launcher="self", needs=(), python=TF_PYTHON,
                    timeout=900 if quick else 1800)]
    raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")


def missing(needs: tuple[str, ...], python: str | None = None) -> list[str]:
    out = []
    if python is not None and not os.path.exists(python):
        out.append(f"{os.path.relpath(python)} (the environment scripts/test_tensorflow.sh "
                   "makes)")
    for need in needs:
        if need == "mpiexec":
            if not (shutil.which("mpiexec") or shutil.which("mpirun")):
                out.append("mpiexec")
        elif importlib.util.find_spec(need) is None:
            out.append(need)
    return out


def command(job: Job, json_path: str) -> list[str]:
    script = [job.python or sys.executable, os.path.join(HERE, job.argv[0]), *job.argv[1:], "--json", json_path]
    if job.launcher == "fuserun":
        fuserun = os.path.join(os.path.dirname(sys.executable), "fuserun")
        fuserun = fuserun if os.path.exists(fuserun) else (shutil.which("fuserun") or "fuserun")
        return [fuserun, "-np", str(job.np), *script]
    if job.launcher == "mpiexec":
        return [shutil.which("mpiexec") or shutil.which("mpirun") or "mpiexec", "-n", str(job.np),
                *script]
    return script


def run_job(job: Job, json_path: str, timeout: float) -> str | None:
    """Run one job to completion; None on success, else what went wrong."""
    cmd = command(job, json_path)
    env = dict(os.environ, **job.env)
    print(f"--- {job.name}: {' '.join(f'{k}={v}' for k, v in job.env.items())} "
          f"{' '.join(os.path.relpath(c) if c.startswith(HERE) else c for c in cmd)}",
          flush=True)
    # a session of its own, so that a time-out kills the launcher and every rank
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return f"{job.name} exceeded its time limit of {timeout:.0f} s and was killed"
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if rc != 0:
        return f"{job.name} failed with exit status {rc}"
    if not os.path.exists(json_path):
        return f"{job.name} wrote no result file"
    return None


def run_workload(workload: str, quick: bool, timeout: float, tmp: str,
                 load: int = 1, only_jobs: set[str] | None = None) -> tuple[dict, bool]:
    """Run every job of ``workload`` (or those named in ``only_jobs``); the workload record and
    whether every job succeeded."""
    started = time.perf_counter()
    record = {"workload": workload, "quick": quick, "machine_start": machine.describe(),
              "jobs": [], "notes": []}
    ok = True
    for job in jobs_for(workload, quick, load):
        if only_jobs is not None and job.name not in only_jobs:
            continue
        lacking = missing(job.needs, job.python)
        if lacking:
            record["notes"].append(f"{job.name} skipped: {', '.join(lacking)} not installed")
            print(f"--- {job.name}: skipped, {', '.join(lacking)} not installed", flush=True)
            continue
        path = os.path.join(tmp, f"{job.name}.json")
        job_started = time.perf_counter()
        error = run_job(job, path, max(job.timeout or 0, timeout))
        if error:
            ok = False
            record["notes"].append(error)
            print(f"--- {error}", flush=True)
            continue
        with open(path) as f:
            job_record = json.load(f)
        job_record["env"] = job.env
        job_record["seconds"] = time.perf_counter() - job_started
        record["jobs"].append(job_record)
    record["machine_end"] = machine.describe()
    record["finished"] = record["machine_end"]["time_utc"]
    record["seconds"] = time.perf_counter() - started
    return record, ok


def merge_jobs(old: dict, new: dict) -> dict:
    """``new`` (a run of some of a workload's jobs) with the jobs of ``old`` (the workload's
    previous record) that it did not run, in the order the jobs ran; notes and run time
    add up, the machine is described as at each part's start and end."""
    ran = {job["job"] for job in new["jobs"]}
    kept = [job for job in old.get("jobs", []) if job["job"] not in ran]
    if not kept:        # every job ran again: nothing of the old record stands
        return new
    # a kept job's own run time where it was recorded (a job run again takes its old time
    # out of the total)
    kept_seconds = (sum(job["seconds"] for job in kept) if all("seconds" in job for job in kept)
                    else old.get("seconds", 0))
    return new | {"jobs": kept + new["jobs"], "notes": old.get("notes", []) + new["notes"],
                  "machine_start": old.get("machine_start", new["machine_start"]),
                  "seconds": kept_seconds + new["seconds"]}


def load_results() -> dict[str, dict]:
    """Every workload's latest result file, in the suite's order.

    The by-hand benchmarks (elastic recovery, ...) keep their raw samples in the same folder
    without a ``workload`` key: they are not the suite's and are left out here.
    """
    found = {}
    for path in glob.glob(os.path.join(RESULTS_DIR, "*.json")):
        with open(path) as f:
            rec = json.load(f)
        if "workload" in rec:
            found[rec["workload"]] = rec
    return {w: found[w] for w in WORKLOADS if w in found}


def rewrite_results_md(results: dict[str, dict], command_line: str) -> None:
    """Each workload's page (bench/results/<workload>.md) and the index in RESULTS.md."""
    for key, record in results.items():
        line = machine.summary_line(record["machine_end"])
        with open(os.path.join(RESULTS_DIR, f"{key}.md"), "w") as f:
            f.write(report.page(key, record, line))
    text = open(RESULTS_MD).read() if os.path.exists(RESULTS_MD) else "# Benchmark results\n"
    with open(RESULTS_MD, "w") as f:
        f.write(report.replace_generated(text, report.index(results, command_line)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer rounds and sizes (a couple of minutes): for development")
    ap.add_argument("--only", default=",".join(WORKLOADS),
                    help=f"comma-separated workloads ({', '.join(WORKLOADS)})")
    ap.add_argument("--jobs", default=None,
                    help="comma-separated job names of the workloads to run (the others keep "
                         "their latest records)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per job before it is killed (default 300, quick 150)")
    ap.add_argument("--load", type=int, default=1,
                    help="busy processes beside the jobs of the loaded workload (default 1)")
    ap.add_argument("--no-report", action="store_true",
                    help="write the JSON only: no plots, no results pages")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: redraw the plots and results pages from bench/results")
    args = ap.parse_args()
    workloads = [] if args.report_only else [w.strip() for w in args.only.split(",") if w.strip()]
    only_jobs = {j.strip() for j in args.jobs.split(",") if j.strip()} if args.jobs else None
    known = set()
    for w in workloads:
        try:
            known |= {job.name for job in jobs_for(w, args.quick)}  # fail early on a misspelling
        except ValueError as err:
            ap.error(str(err))
    if only_jobs is not None and only_jobs - known:
        ap.error(f"no such job in {', '.join(workloads)}: {', '.join(sorted(only_jobs - known))}; "
                 f"choose from {', '.join(sorted(known))}")
    timeout = args.timeout or (150 if args.quick else 300)

    os.makedirs(RESULTS_DIR, exist_ok=True)
    totals, all_ok = {}, True
    with tempfile.TemporaryDirectory(prefix="fuse-bench.") as tmp:
        for w in workloads:
            print(f"=== {w}", flush=True)
            rec, ok = run_workload(w, args.quick, timeout, tmp, args.load, only_jobs)
            all_ok &= ok
            totals[w] = rec["seconds"]
            path = os.path.join(RESULTS_DIR, f"{w}.json")
            if only_jobs is not None and os.path.exists(path):
                with open(path) as f:
                    rec = merge_jobs(json.load(f), rec)
            common.write_json(path, rec)
    if not args.no_report:
        results = load_results()
        import plots
        for path in plots.draw_all(results, PLOTS_DIR):
            print(f"plot: {os.path.relpath(path)}")
        rewrite_results_md(results, "bash scripts/bench.sh")
        print(f"report: {os.path.relpath(RESULTS_MD)}")
    if totals:
        print("run time: " + ", ".join(f"{w} {s:.0f} s" for w, s in totals.items())
              + f"; total {sum(totals.values()) / 60:.1f} min")
    if not all_ok:
        print("some jobs failed: see the notes above and in bench/results/*.json",
              file=sys.stderr)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
