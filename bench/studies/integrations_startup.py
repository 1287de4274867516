"""Start-up overhead of fuse.ray and fuse.spark over a plain fuserun of the same job.

The job: 2 workers each ``init()``, allreduce one small array and return (nothing to train, so
the figure is the cost of starting and finishing a job).  Measured per round, the order of the
sides alternating:

- ``fuserun``: ``fuserun -np 2 python <job>`` as a subprocess, wall time (Python start-up of the
  launcher and the workers included: what a user waits for);
- ``fuse.run``: ``fuse.run(job, np=2)`` from this process;
- ``ray``: ``RayExecutor(num_workers=2).start()`` + ``run(job)`` + ``shutdown()`` on a Ray
  cluster started once beforehand (the cluster people already have; its start is reported
  separately), and ``ray run only``: ``run(job)`` on a started executor;
- ``spark``: ``fuse.spark.run(job, num_proc=2)`` on a local[2] SparkSession started once
  beforehand (also reported separately).

Run: ``python bench/studies/integrations_startup.py [--rounds 5]``; writes
``bench/results/studies/integrations_startup.json`` and prints a Markdown table.  Needs
Ray, PySpark and Java (``scripts/setup.sh`` installs them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
SUITE = os.path.join(BENCH, "suite")
sys.path.insert(0, SUITE)

from machine import describe as describe_machine  # noqa: E402

JOB_SOURCE = """
import numpy as np
import fuse

def job():
    fuse.init()
    return float(fuse.allreduce(np.ones(4) * fuse.rank(), op=fuse.Sum, name="x")[0])

if __name__ == "__main__":
    job()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(BENCH, "results", "studies",
                                                      "integrations_startup.json"))
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="fuse-bench-")
    script = os.path.join(workdir, "startup_job.py")
    with open(script, "w") as f:
        f.write(JOB_SOURCE)
    sys.path.insert(0, workdir)
    import startup_job      # noqa: E402  (importable by the workers through PYTHONPATH)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    env["PYTHONPATH"] = os.pathsep.join([workdir] + [p for p in [env.get("PYTHONPATH")] if p])
    for k in [k for k in os.environ if k.startswith(("FUSE_", "HOROVOD_"))]:
        del os.environ[k]
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]    # Ray's and Spark's workers import the job
    os.environ["PYSPARK_PYTHON"] = sys.executable

    import fuse
    import ray
    from pyspark.sql import SparkSession

    from fuse.ray import RayExecutor
    import fuse.spark

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_cluster_s = time.perf_counter() - t
    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_session_s = time.perf_counter() - t

    def fuserun() -> None:
        subprocess.run([sys.executable, "-m", "fuse.runner.launch", "-np", "2",
                        sys.executable, script], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def fuse_run() -> None:
        assert fuse.run(startup_job.job, np=2, env=env) == [1.0, 1.0]

    def ray_full() -> None:
        ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=2)
        ex.start()
        assert ex.run(startup_job.job) == [1.0, 1.0]
        ex.shutdown()

    started = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=2)

    def ray_run_only() -> None:
        started.start()
        t0 = time.perf_counter()
        assert started.run(startup_job.job) == [1.0, 1.0]
        elapsed = time.perf_counter() - t0
        started.shutdown()
        return elapsed

    def spark_run() -> None:
        assert fuse.spark.run(startup_job.job, num_proc=2) == [1.0, 1.0]

    sides = {"fuserun": fuserun, "fuse.run": fuse_run, "ray": ray_full,
             "ray run only": ray_run_only, "spark": spark_run}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for side in sides.values():     # warm-up: first imports, JIT of the JVM
        side()
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            t0 = time.perf_counter()
            inner = sides[name]()
            samples[name].append(inner if inner is not None else time.perf_counter() - t0)
    spark.stop()
    ray.shutdown()

    medians = {k: statistics.median(v) for k, v in samples.items()}
    record = {"workload": "integrations_startup", "when": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                         time.gmtime()),
              "machine": describe_machine(), "load_average": os.getloadavg(),
              "rounds": args.rounds, "samples_s": samples, "median_s": medians,
              "ray_cluster_start_s": ray_cluster_s, "spark_session_start_s": spark_session_s}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    base = medians["fuserun"]
    print("| side | median | over fuserun |")
    print("|---|---|---|")
    for name, value in medians.items():
        print(f"| {name} | {value:.2f} s | {value - base:+.2f} s |")
    print(f"\nRay cluster start (once): {ray_cluster_s:.1f} s; SparkSession start (once): "
          f"{spark_session_s:.1f} s; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
