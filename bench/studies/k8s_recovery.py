"""Agent mode in containers: from a killed worker container to the survivor's next committed
step, and from an added container to a commit with it; median of ``--runs``.

    FUSE_K8S_IMAGE=localhost/fuse:test python bench/studies/k8s_recovery.py [--runs 5] [--json PATH]

Each run is tests/kubernetes/kubernetes_util.py's elastic scenario (the Helm chart rendered with the
image built by scripts/build_image.sh, its pods run as podman containers on one podman network):
two worker pods train the image's example (a commit every step, ~0.1 s apart), the first is
SIGKILLed (``podman kill``: its agent and its worker die at once, as a lost node's would) and the
time to the survivor's next commit is taken from the shared commit log; then a third pod starts
and the time to the first commit of the 2-worker job is taken, with the time at which its agent
joined the driver (its zygote warm: the image's agents import torch before they join).  The recovery includes the 2 s
without a heartbeat after which the driver drops an agent (FUSE_AGENT_STALE_SECONDS).  Every run
also checks the weights (each step applied once).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "support"))
sys.path.insert(0, str(HERE.parent / "suite"))

import common  # noqa: E402

from kubernetes_util import elastic_run  # noqa: E402
from kubernetes_pods_util import remove, shared_dir  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--logs", default=None,
                   help="a directory to keep each run's logs in, with podman's timestamps: the "
                        "driver's (driver.<run>.log), the surviving pod's (survivor.<run>.log) "
                        "and the added pod's (added.<run>.log)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable for every pod (FUSE_LOG_LEVEL=debug); repeatable")
    p.add_argument("--verbose", action="store_true",
                   help="run the driver with fuserun --verbose (its decisions in its log)")
    args = p.parse_args()
    runs = []
    for i in range(args.runs):
        shared = shared_dir(Path(tempfile.gettempdir()))
        work = Path(tempfile.mkdtemp(prefix="fuse-k8s-bench-"))
        try:
            out = elastic_run(shared, work, steps=300,
                              env=dict(kv.split("=", 1) for kv in args.env),
                              driver_args=["--verbose"] if args.verbose else None)
        finally:
            remove(shared)
            remove(work)
        if args.logs:
            os.makedirs(args.logs, exist_ok=True)
            for who, text in out["stamped_logs"].items():
                Path(args.logs, f"{who}.{i + 1}.log").write_text(
                    f"# the pod was added at {out['added_at']!r} (epoch seconds)\n" + text)
        ok = out["driver_exit"] == 0 and all(r["w"] == out["reference"] for r in out["results"])
        ready = out["agent_ready_s"]
        runs.append({"recovery_s": out["recovery_s"], "join_s": out["join_s"],
                     "agent_ready_s": ready, "exact": ok, "load": os.getloadavg()[0]})
        print(f"run {i + 1}: kill -> next commit {out['recovery_s']:.2f} s, added pod -> "
              f"commit {out['join_s']:.2f} s (its agent joined after "
              f"{'?' if ready is None else f'{ready:.2f}'} s), weights exact: {ok}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    summary = {"runs": runs, "load": os.getloadavg(),
               "recovery_median_s": statistics.median(r["recovery_s"] for r in runs),
               "join_median_s": statistics.median(r["join_s"] for r in runs)}
    print(f"median of {len(runs)}: kill -> next commit {summary['recovery_median_s']:.2f} s, "
          f"added pod -> commit {summary['join_median_s']:.2f} s (load "
          f"{summary['load'][0]:.1f})")
    common.write_json(args.json, summary)


if __name__ == "__main__":
    main()
