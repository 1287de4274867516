"""The benchmark suite's pure parts: rounds, medians, ratios, records, sizes, the results pages
and the RESULTS.md index.  No test here depends on a measured time."""

import math
import pathlib
import sys

import pytest

SUITE = pathlib.Path(__file__).resolve().parents[2] / "bench" / "suite"
sys.path.insert(0, str(SUITE))

import allreduce  # noqa: E402
import common  # noqa: E402
import report  # noqa: E402
import suite  # noqa: E402


def test_alternating_rounds_reverses_the_order_every_other_round():
    calls = []
    sides = {"fuse": lambda: calls.append("fuse") or 1.0,
             "torch": lambda: calls.append("torch") or 2.0}
    barriers = []
    samples = common.alternating_rounds(sides, 3, lambda: barriers.append(1))
    assert calls == ["fuse", "torch", "torch", "fuse", "fuse", "torch"]
    assert len(barriers) == 6
    assert samples == {"fuse": [1.0] * 3, "torch": [2.0] * 3}


def test_comparison_row_has_medians_and_the_ratio_of_medians():
    row = common.comparison("case", {"fuse": [3.0, 1.0, 2.0], "DDP": [4.0, 8.0, 6.0]},
                            unit="s", size_bytes=4)
    assert row["competitor"] == "DDP"
    assert row["median"] == {"fuse": 2.0, "DDP": 6.0}
    assert row["ratio"] == pytest.approx(2.0 / 6.0)
    assert row["size_bytes"] == 4 and row["lower_is_better"]
    assert row["samples"]["fuse"] == [3.0, 1.0, 2.0]


def test_comparison_with_named_sides_and_no_zero_division():
    row = common.comparison("c", {"with fuse": [2.0], "without fuse": [0.0]}, unit="s",
                            fuse="with fuse", competitor="without fuse")
    assert row["ratio"] is None
    assert common.ratio(3.0, 2.0) == 1.5


def test_job_record_carries_machine_and_config():
    rec = common.job_record("j", [{"case": "x"}], {"cores": 2}, {"rounds": 3}, extra=1)
    assert rec == {"job": "j", "machine": {"cores": 2}, "config": {"rounds": 3},
                   "rows": [{"case": "x"}], "extra": 1}
    # where the record goes (a scratch path under the suite) is not a setting of the run
    rec = common.job_record("j", [], {}, {"rounds": 3, "json": "/tmp/fuse-bench.x/j.json"})
    assert rec["config"] == {"rounds": 3}


def test_resnet50_shape_list():
    shapes = common.resnet50_shapes()
    assert len(shapes) == 161
    n = 0
    for s in shapes:
        k = 1
        for d in s:
            k *= d
        n += k
    assert n == 25_557_032


def test_transformer_shape_list():
    shapes = common.transformer_shapes()
    sizes = [math.prod(s) for s in shapes]
    assert len(shapes) == 2 + 6 * 12 + 2
    assert sum(sizes) == 35_561_472
    assert sizes[0] == 32000 * 512 and sizes[0] > 0.46 * sum(sizes)    # the token embedding


def test_sharded_page_has_every_side_and_its_ratios_to_ddp_zero():
    row = common.comparison("ResNet-50-shaped, 2 ranks, load 0",
                            {"fuse": [0.2], "fuse sharded": [0.3], "DDP": [0.25],
                             "DDP + ZeRO": [0.4]}, unit="s", fuse="fuse sharded",
                            competitor="DDP + ZeRO")
    mem = {label: {"state_bytes_per_rank": [n << 20, n << 20],
                   "peak_rss_bytes_per_rank": [1 << 30, 2 << 30]}
           for label, n in (("fuse", 200), ("fuse sharded", 100), ("DDP", 200),
                            ("DDP + ZeRO", 100))}
    row["memory"] = mem
    row["ratios_to_ddp_zero"] = {label: {"step": row["median"][label] / 0.4, "state": 1.0,
                                         "peak_rss": 1.0} for label in mem}
    machine = {"load_average": [1.0, 2.0, 3.0]}
    record = {"seconds": 60, "finished": "t", "machine_start": machine, "machine_end": machine,
              "jobs": [{"job": "sharded", "rows": [row]}], "notes": []}
    text = report.page("sharded", record, "2 cores")
    assert "| ResNet-50-shaped, 2 ranks, load 0 | fuse sharded | 300.0 ms | 0.75x | " \
           "100 MiB | 1.00x | 2 GiB | 1.00x |" in text
    assert text.count("ResNet-50-shaped, 2 ranks, load 0") == 4


def test_sweep_sizes_and_calls():
    sizes = allreduce.default_sizes()
    assert sizes[0] == 4 and sizes[-1] == 256 * common.MIB
    assert all(b == a * 8 for a, b in zip(sizes[:-2], sizes[1:-1]))
    assert allreduce.calls_for(4) == 200
    assert allreduce.calls_for(256 * common.MIB) == 2
    assert allreduce.parse_sizes("4,16K,1MiB,256M") == [4, 16384, common.MIB, 256 * common.MIB]


def test_format_bytes():
    assert common.format_bytes(4) == "4 B"
    assert common.format_bytes(16384) == "16 KiB"
    assert common.format_bytes(256 * common.MIB) == "256 MiB"


def test_replace_generated_keeps_the_hand_written_parts():
    text = f"# Title\n\nintro\n{report.BEGIN}\nold\n{report.END}\n\n## By hand\nkept\n"
    out = report.replace_generated(text, "new table")
    assert out == f"# Title\n\nintro\n{report.BEGIN}\nnew table\n{report.END}\n\n## By hand\nkept\n"
    assert report.replace_generated(out, "new table") == out


def test_replace_generated_without_markers_inserts_after_the_title():
    out = report.replace_generated("# Title\n## History\nold\n", "gen")
    assert out == f"# Title\n\n{report.BEGIN}\ngen\n{report.END}\n\n## History\nold\n"
    with pytest.raises(ValueError):
        report.replace_generated(f"# T\n{report.BEGIN}\n", "gen")


def test_scaling_efficiency():
    assert common.scaling_efficiency(150.0, 100.0, 2) == pytest.approx(0.75)
    assert common.scaling_efficiency(150.0, 0.0, 2) is None


def _row(case, fuse, comp, comp_label, **extra):
    return common.comparison(case, {"fuse": [fuse], comp_label: [comp]}, unit="s", **extra)


def test_pages_and_index_are_built_from_records():
    ar = _row("allreduce 4 B", 1e-4, 2e-4, "torch.distributed", size_bytes=4)
    ar["bandwidth_GBps"] = {"fuse": 4e-5, "torch.distributed": 2e-5}
    mpi = _row("allreduce 4 B", 3e-4, 1e-5, "mpi4py", size_bytes=4)
    mpi["bandwidth_GBps"] = {"fuse": 1e-5, "mpi4py": 4e-4}
    step = _row("step, fusion on, compression none", 0.2, 0.1, "DDP")
    cnn = common.comparison("cnn", {"fuse": [160.0], "DDP": [150.0], "1 worker": [100.0]},
                            unit="samples/s", competitor="DDP", lower_is_better=False, bpps=1,
                            workers=2, scaling_efficiency={"fuse": 0.8, "DDP": 0.75})
    over = common.comparison("backward, x", {"with fuse": [1.0], "without fuse": [1.0]},
                             unit="s", fuse="with fuse", competitor="without fuse")
    idle = {"case": "idle", "seconds": 10, "engine_thread": [0.0, 0.0], "process": [0.0, 0.001]}
    machine = {"load_average": [1.0, 2.0, 3.0]}

    def workload(*jobs):
        return {"seconds": 60, "finished": "t", "machine_start": machine, "machine_end": machine,
                "jobs": [{"job": name, "rows": rows} for name, rows in jobs], "notes": []}

    results = {"allreduce": workload(("allreduce_gloo", [ar]), ("allreduce_mpi", [mpi])),
               "many_small": workload(("torch_step_fusion_none", [step])),
               "training": workload(("train_cnn", [cnn])),
               "overhead": workload(("overhead", [over, idle]))}
    loaded = common.comparison("small CNN, load 1", {"fuse": [0.1], "DDP": [0.2]}, unit="s",
                               threads={"fuse": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                                                 "torch.get_num_threads()": 1},
                                        "DDP": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": None,
                                                "torch.get_num_threads()": 1}})
    results["loaded"] = workload(("loaded", [loaded]))
    hop = common.comparison("2x2, 64 MiB allreduce", {"fuse": [0.5], "DDP": [1.0]}, unit="s")
    hop["bandwidth_GBps"] = {"fuse": 0.134, "DDP": 0.067}
    hop["ring_limit_GBps"] = 0.083
    results["multihost"] = workload(("multihost", [hop]))
    results["many_small"]["notes"].append("torch_step_x skipped: mpi4py not installed")
    text = "\n".join(report.page(key, w, "2 cores") for key, w in results.items())
    assert "| 4 B | 100.0 µs" in text
    assert "**30.00x**" in text                       # fuse behind mpi4py: bold
    assert "0.50x" in text                            # fuse ahead of torch: plain
    assert "| step, fusion on, compression none | 200.0 ms | 100.0 ms | **2.00x** |" in text
    assert "| 1 | 100 | 160 | 150 | 1.07x | 80% | 75% |" in text
    assert "skipped: mpi4py not installed" in text
    assert "| small CNN, load 1 | 100.0 ms | 200.0 ms | 0.50x | OMP=1 MKL=1 torch 1 | " \
           "OMP=1 torch 1 |" in text
    assert "| 2x2, 64 MiB allreduce | 500.0 ms | 1.00 s | 0.50x |" in text
    assert "Reproduce: `bash scripts/bench.sh --only loaded`" in text
    assert "Machine: 2 cores." in text and "load average (1/5/15 min) 1 / 2 / 3" in text
    assert "](../plots/allreduce_bandwidth.png)" in text      # the page sits in bench/results/
    index = report.index(results, "bash scripts/bench.sh")
    assert "6.0 min of workloads" in index
    assert "[Allreduce latency and bandwidth](results/allreduce.md)" in index


def test_collectives_page_has_a_table_per_collective_and_a_column_per_setting():
    def job(name, rows, native_rs):
        return {"job": name, "rows": rows, "config": {"torch_reduce_scatter": native_rs,
                                                      "rounds": 3, "sizes": [4, 4096]}}

    ag = _row("allgather 4 KiB", 1e-4, 2e-4, "torch.distributed", size_bytes=4096)
    rs = _row("reducescatter 4 KiB", 3e-4, 1e-4, "torch.distributed", size_bytes=4096)
    w = {"seconds": 60, "finished": "t", "notes": [],
         "jobs": [job("collectives_2_world", [ag, rs], False),
                  job("collectives_4_pset", [ag], False)]}
    text = report.page("collectives", w, "2 cores")
    assert "## allgather" in text and "## reducescatter" in text
    assert "| 4 KiB | 100.0 µs | 200.0 µs | 0.50x | – | – | – | 100.0 µs | 200.0 µs | 0.50x |" \
        in text                                   # 4 ranks, world: not run
    assert "| 4 KiB | 300.0 µs | 100.0 µs | **3.00x** |" in text
    assert "no reduce-scatter here" in text
    assert "Settings as run: 2 ranks: 3 rounds, sizes 4 B, 4 KiB; 2 of 4 ranks: 3 rounds" in text


def test_suite_jobs_and_unknown_workload():
    names = [job.name for w in suite.WORKLOADS for job in suite.jobs_for(w, quick=True)]
    assert names == ["allreduce_gloo", "allreduce_mpi", "collectives_2_world",
                     "collectives_4_world", "collectives_4_pset", "torch_step_fusion_none",
                     "torch_step_nofusion_none", "torch_step_fusion_fp16",
                     "torch_step_fusion_bf16", "torch_step_mpi_fusion_none", "train_cnn",
                     "overhead", "loaded", "sharded", "multihost", "tensorflow_step",
                     "tensorflow_hosts"]
    loaded = suite.jobs_for("loaded", quick=False, load=3)[0]
    assert loaded.launcher == "self" and loaded.argv[1:3] == ["--load", "3"]
    nofusion = suite.jobs_for("many_small", quick=False)[1]
    assert nofusion.env == {"FUSE_FUSION_THRESHOLD": "0"}
    on_mpi = suite.jobs_for("many_small", quick=False)[4]
    assert on_mpi.env == {"FUSE_BACKEND": "mpi"}
    assert suite.command(on_mpi, "x.json")[1:3] == ["-n", "2"]
    pset = suite.jobs_for("collectives", quick=False)[2]
    assert suite.command(pset, "x.json")[1:3] == ["-np", "4"]
    assert pset.argv[1:3] == ["--process-set", "0,2"]
    with pytest.raises(ValueError):
        suite.jobs_for("nope", quick=True)
    assert suite.missing(("surely_not_a_module_xyz",)) == ["surely_not_a_module_xyz"]
    # TensorFlow's workload runs its script with .venv-tf's Python, and is skipped without it
    tf_job = suite.jobs_for("tensorflow", quick=True, load=2)[0]
    assert tf_job.python.endswith(".venv-tf/bin/python") and tf_job.launcher == "self"
    assert tf_job.argv[:3] == ["tf_step.py", "--load", "2"]
    assert suite.command(tf_job, "x.json")[0] == tf_job.python
    assert "the environment scripts/test_tensorflow.sh makes" in \
        suite.missing((), "/nonexistent/.venv-tf/bin/python")[0]
    # and across two namespace hosts, a job of its own (its record merges beside the local one)
    hosts_job = suite.jobs_for("tensorflow", quick=False)[1]
    assert hosts_job.python == tf_job.python and hosts_job.argv[:4] == [
        "tf_step.py", "--hosts", "--load", "0"]


def test_a_run_of_some_jobs_keeps_the_others_latest_records():
    old = {"workload": "collectives", "machine_start": {"load": 1}, "seconds": 100,
           "notes": ["old note"], "jobs": [{"job": "collectives_2_world", "rows": ["old 2"]},
                                           {"job": "collectives_4_world", "rows": ["old 4"]}]}
    new = {"workload": "collectives", "machine_start": {"load": 2}, "machine_end": {"load": 3},
           "seconds": 50, "notes": [], "jobs": [{"job": "collectives_4_world",
                                                 "rows": ["new 4"]}]}
    merged = suite.merge_jobs(old, new)
    assert [(j["job"], j["rows"]) for j in merged["jobs"]] == [
        ("collectives_2_world", ["old 2"]), ("collectives_4_world", ["new 4"])]
    assert merged["seconds"] == 150 and merged["notes"] == ["old note"]
    assert merged["machine_start"] == {"load": 1} and merged["machine_end"] == {"load": 3}


def test_a_job_run_again_takes_its_old_run_time_out_of_the_total():
    old = {"workload": "multihost", "machine_start": {"load": 1}, "seconds": 520, "notes": [],
           "jobs": [{"job": "multihost", "rows": ["old"], "seconds": 300},
                    {"job": "multihost_4x1", "rows": ["old 4x1"], "seconds": 220}]}
    new = {"workload": "multihost", "machine_start": {"load": 2}, "machine_end": {"load": 3},
           "seconds": 310, "notes": [], "jobs": [{"job": "multihost", "rows": ["new"],
                                                  "seconds": 310}]}
    merged = suite.merge_jobs(old, new)
    assert merged["seconds"] == 220 + 310
    # every job again: the new record alone
    again = new | {"jobs": new["jobs"] + [{"job": "multihost_4x1", "rows": [], "seconds": 1}]}
    assert suite.merge_jobs(old, again) == again
    # the multihost workload runs in two jobs, each under 8 minutes
    jobs = suite.jobs_for("multihost", quick=False)
    assert [j.name for j in jobs] == ["multihost", "multihost_4x1"]
    assert "--job-name" in jobs[1].argv and "4x1" in jobs[1].argv
