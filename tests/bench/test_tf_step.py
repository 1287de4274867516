"""The suite's tensorflow workload at tiny size: both sides' 2-worker jobs really run (fuse under
fuserun, MultiWorkerMirroredStrategy over its TF_CONFIG ports), the result file parses and its
page renders.  Runs in .venv-tf (scripts/test_tensorflow.sh); no assertion on a measured time."""

import json
import pathlib
import subprocess
import sys

import needs
import pytest

needs.module("tensorflow")

SUITE = pathlib.Path(__file__).resolve().parents[2] / "bench" / "suite"
sys.path.insert(0, str(SUITE))

import report  # noqa: E402

pytestmark = pytest.mark.timeout(400)


def test_tiny_workload_runs_both_sides_and_its_page_renders(tmp_path):
    out = tmp_path / "tf.json"
    subprocess.run([sys.executable, str(SUITE / "tf_step.py"), "--size", "tiny", "--load", "0",
                    "--rounds", "1", "--warmup", "1", "--steps", "2", "--fit",
                    "--json", str(out)], check=True, timeout=380)
    record = json.loads(out.read_text())
    assert record["job"] == "tensorflow_step"
    threads = record["config"]["threads"]     # the same budget on both sides, recorded
    assert threads["intra_op"] == threads["inter_op"] >= 1
    rows = {r["case"]: r for r in record["rows"]}
    for model in ("dense", "resnet50"):
        loop = rows[f"{model} (tiny), tf.function loop, load 0"]
        assert loop["competitor"] == "MWMS" and loop["load"] == 0
        assert loop["median"]["fuse"] > 0 and loop["median"]["MWMS"] > 0
        assert loop["ratio"] == pytest.approx(loop["median"]["fuse"] / loop["median"]["MWMS"])
        # Keras fit is timed on both sides, or the side that refused says why
        fit = rows.get(f"{model} (tiny), Keras fit, load 0")
        assert fit is not None or any(f"{model} model.fit" in n for n in record["notes"])
    workload = {"workload": "tensorflow", "jobs": [record], "notes": []}
    page = report.page("tensorflow", workload, "test machine")
    assert "fuse/MWMS" in page and "dense (tiny), tf.function loop, load 0" in page
    assert "bash scripts/bench.sh --only tensorflow" in page

