"""How long an elastic job on Ray or Spark takes to get going again after a worker is
SIGKILLed: from the kill to the survivor's first committed step in the re-formed job (as
bench/studies/elastic_recovery.py measures it for fuserun).

    python bench/studies/integrations_recovery.py [--runs 5] [--only ray|spark] [--json FILE]

Ray: an ``ElasticRayExecutor`` (min_np 1, max_np 2) on a local cluster of two nodes of 1 CPU
each (ray.cluster_utils, both on this machine), one worker per node.  Spark: a
``fuse.spark.run_elastic`` job (num_proc 2, min_num_proc 1) on local[2].  In both, a small
torch model trains under ``TorchState`` with a ``DistributedOptimizer``, one commit per step
of about 20 ms, and the worker of rank 1 notes the time and SIGKILLs itself in the middle of
step 30.  The recovery time includes noticing the death, rolling back, the driver's new
generation (on Ray: the actor's death reported by Ray; on Spark: the task reporting its
rank's exit through the store), the rendezvous, the engine's start and the step again.
Starting the clusters is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


def train(out: str) -> int:
    """bench/studies/elastic_recovery.py's training, run by a Ray actor or a Spark task (this function
    travels to them by value; the training is imported from the bench folder there)."""
    sys.path.insert(0, BENCH_DIR)
    from elastic_recovery import train_until_killed
    return train_until_killed(out, str(os.getpid()))


def recovery(out: str) -> float:
    """From the kill to the survivor's first commit in a later generation."""
    from elastic_recovery import recovery_after_kill
    return recovery_after_kill(out, 1)


def ray_side(runs: int) -> tuple[list[float], list[float]]:
    import ray
    from ray.cluster_utils import Cluster

    from fuse.ray import ElasticRayExecutor

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    samples, loads = [], []
    try:
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        for i in range(runs):
            settings = ElasticRayExecutor.create_settings(min_np=1, max_np=2, timeout_s=60,
                                                          elastic_timeout=60)
            executor = ElasticRayExecutor(settings, cpus_per_slot=1)
            executor.start()
            loads.append(os.getloadavg()[0])
            with tempfile.TemporaryDirectory(prefix="helper-ray-bench-") as tmp:
                executor.run(lambda: train(tmp))
                samples.append(recovery(tmp))
            print(f"ray run {i + 1}: {samples[-1]:.3f} s (load {loads[-1]:.2f})", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return samples, loads


def spark_side(runs: int) -> tuple[list[float], list[float]]:
    from pyspark.sql import SparkSession

    import fuse.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("fuse-recovery-bench")
               .config("spark.ui.enabled", "false").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    samples, loads = [], []
    try:
        for i in range(runs):
            loads.append(os.getloadavg()[0])
            with tempfile.TemporaryDirectory(prefix="helper-ray-bench-") as tmp:
                fuse.spark.run_elastic(train, args=(tmp,), num_proc=2, min_num_proc=1,
                                       elastic_timeout=60)
                samples.append(recovery(tmp))
            print(f"spark run {i + 1}: {samples[-1]:.3f} s (load {loads[-1]:.2f})", flush=True)
    finally:
        session.stop()
    return samples, loads


def summary(samples: list[float], loads: list[float]) -> dict:
    return {"runs": len(samples), "median_s": statistics.median(samples),
            "min_s": min(samples), "max_s": max(samples), "samples_s": samples,
            "load_1min": loads}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--only", choices=("ray", "spark"), default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    for k in [k for k in os.environ if k.startswith(("FUSE_", "HOROVOD_"))]:
        del os.environ[k]
    out = {}
    if args.only in (None, "ray"):
        out["ray"] = summary(*ray_side(args.runs))
    if args.only in (None, "spark"):
        out["spark"] = summary(*spark_side(args.runs))
    out["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
