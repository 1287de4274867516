"""The suite's mxnet workload at tiny size: fuse's side really runs (2 workers under fuserun,
a Gluon DistributedTrainer) without Horovod installed, and, where scripts/build_horovod_mxnet.sh
has built Horovod, both sides run and the page renders.  Runs in .venv-mxnet
(scripts/test_mxnet.sh); no assertion on a measured time."""

import json
import os
import pathlib
import subprocess
import sys

import needs
import pytest

needs.module("mxnet")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUITE = ROOT / "bench" / "suite"
sys.path.insert(0, str(SUITE))

import mxnet_step  # noqa: E402
import report  # noqa: E402

pytestmark = pytest.mark.timeout(400)

TINY = ["--size", "tiny", "--warmup", "1", "--steps", "2"]


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def test_fuse_side_runs_two_workers_without_horovod(tmp_path):
    out = tmp_path / "fuse.json"
    env = clean_env() | {"OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"}
    subprocess.run([sys.executable, "-m", "fuse.runner.launch", "-np", "2", sys.executable,
                    str(SUITE / "mxnet_worker.py"), "--side", "fuse", *TINY,
                    "--json", str(out)], check=True, timeout=300, env=env)
    record = json.loads(out.read_text())
    assert record["workers"] == 2 and record["package"].startswith("fuse-dl")
    assert record["threads"]["OMP_NUM_THREADS"] == "1"
    for model in ("dense", "resnet50"):
        entry = record["models"][model]
        assert len(entry["step_seconds"]) == 2 and min(entry["step_seconds"]) > 0
        assert entry["tensors"] > 1 and entry["parameters"] > entry["tensors"]


def test_without_horovod_the_job_says_how_to_build_it(tmp_path):
    proc = subprocess.run([sys.executable, str(SUITE / "mxnet_step.py"), "--horovod-venv",
                           str(tmp_path / "none"), "--json", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=60, env=clean_env())
    assert proc.returncode != 0
    assert "scripts/build_horovod_mxnet.sh" in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_tiny_workload_against_horovod_and_its_page(tmp_path):
    if mxnet_step.horovod_python(mxnet_step.DEFAULT_HOROVOD_VENV) is None:
        pytest.skip("no Horovod with MXNet in .venv-horovod-mxnet (bash "
                    "scripts/build_horovod_mxnet.sh builds it; about 10 min on 2 cores)")
    out = tmp_path / "mxnet.json"
    subprocess.run([sys.executable, str(SUITE / "mxnet_step.py"), *TINY, "--load", "0",
                    "--rounds", "1", "--json", str(out)], check=True, timeout=380,
                   env=clean_env())
    record = json.loads(out.read_text())
    assert record["job"] == "mxnet_step"
    sides = record["config"]["sides"]
    assert sides["fuse"]["package"].startswith("fuse-dl")
    assert sides["Horovod"]["package"] == "horovod 0.28.1"
    assert sides["fuse"]["threads"] == sides["Horovod"]["threads"]   # the same budget
    rows = {r["case"]: r for r in record["rows"]}
    for model in ("dense", "resnet50"):
        row = rows[f"{model} (tiny), Gluon step, load 0"]
        assert row["competitor"] == "Horovod"
        assert row["ratio"] == pytest.approx(row["median"]["fuse"] / row["median"]["Horovod"])
    workload = {"workload": "mxnet", "jobs": [record], "notes": []}
    page = report.page("mxnet", workload, "test machine")
    assert "fuse/Horovod" in page and "dense (tiny), Gluon step, load 0" in page
    assert "horovod 0.28.1" in page and "bash scripts/bench.sh --only mxnet" in page
