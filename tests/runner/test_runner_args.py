"""fuserun's flags -> worker environment, and --config-file: unit tests."""

import argparse
import os
import re
import sys

import pytest

from fuse.runner.launch import (UsageError, config_file_flags, env_from_args, make_parser,
                                network_interfaces, parse_args, start_timeout)


def env(*argv):
    return env_from_args(parse_args([*argv, "python", "x.py"]))


def test_tunables_to_env():
    e = env("-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
            "--cache-capacity", "0", "--timeline-filename", "/tmp/t.json", "--timeline-mark-cycles",
            "--no-stall-check", "--stall-check-warning-time-seconds", "10",
            "--stall-check-shutdown-time-seconds", "20", "--log-level", "debug",
            "--log-without-timestamp", "--gloo-timeout-seconds", "90", "--thread-affinity", "0,1",
            "--autotune", "--autotune-log-file", "at.csv", "--backend", "kv")
    assert e == {
        "FUSE_FUSION_THRESHOLD": str(32 * 1024 * 1024), "FUSE_CYCLE_TIME": "2.5",
        "FUSE_CACHE_CAPACITY": "0", "FUSE_TIMELINE": "/tmp/t.json",
        "FUSE_TIMELINE_MARK_CYCLES": "1", "FUSE_STALL_CHECK_DISABLE": "1",
        "FUSE_STALL_CHECK_TIME_SECONDS": "10", "FUSE_STALL_SHUTDOWN_TIME_SECONDS": "20",
        "FUSE_LOG_LEVEL": "DEBUG", "FUSE_LOG_HIDE_TIME": "1", "FUSE_GLOO_TIMEOUT_SECONDS": "90",
        "FUSE_THREAD_AFFINITY": "0,1", "FUSE_AUTOTUNE": "1", "FUSE_AUTOTUNE_LOG": "at.csv",
        "FUSE_BACKEND": "kv"}


def test_unset_flags_set_nothing_and_command_is_kept():
    args = parse_args(["-np", "2", "python", "train.py", "-np", "3", "--verbose"])
    assert args.num_proc == 2 and args.command == ["python", "train.py", "-np", "3", "--verbose"]
    assert env_from_args(args) == {}
    assert parse_args(["-np", "1", "--", "python"]).command == ["python"]
    assert env("--gloo") == {"FUSE_BACKEND": "gloo"}
    assert env("--mpi", "--backend", "x") == {"FUSE_BACKEND": "x"}


def test_network_interfaces_and_timeout():
    args = parse_args(["--network-interfaces", "eth0,eth1", "--network-interface", "ib0",
                       "--network-interface", "eth0", "cmd"])
    assert network_interfaces(args) == ["eth0", "eth1", "ib0"]
    assert start_timeout(None, {}) == 30.0
    assert start_timeout(None, {"HOROVOD_START_TIMEOUT": "7"}) == 7.0
    assert start_timeout(None, {"FUSE_START_TIMEOUT": "5", "HOROVOD_START_TIMEOUT": "7"}) == 5.0
    assert start_timeout(12, {"FUSE_START_TIMEOUT": "5"}) == 12.0
    with pytest.raises(UsageError, match="FUSE_START_TIMEOUT='soon' is not a number"):
        start_timeout(None, {"FUSE_START_TIMEOUT": "soon"})
    # the elastic launcher's timeout is read by the same rule, with its own names and default
    from fuse.runner.elastic.launch import elastic_timeout
    assert elastic_timeout(None, {}) == 600.0
    assert elastic_timeout(None, {"HOROVOD_ELASTIC_TIMEOUT": "9"}) == 9.0
    with pytest.raises(ValueError, match="HOROVOD_ELASTIC_TIMEOUT=' x' is not a number"):
        elastic_timeout(None, {"HOROVOD_ELASTIC_TIMEOUT": " x"})


def test_hosts_flags_exclusive():
    with pytest.raises(SystemExit):
        parse_args(["-H", "a:1", "-hostfile", "f", "cmd"])
    assert parse_args(["-hostfile", "f", "-prefix-timestamp", "cmd"]).hostfile == "f"


CONFIG = """
params:
  fusion_threshold_mb: 16
  cycle_time_ms: 4
  hierarchical_allreduce: false
autotune:
  enabled: true
stall_check:
  enabled: false
  warning_time_seconds: 120
logging:
  level: INFO
  hide_timestamp: true
"""


def test_config_file_order(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    # as in horovodrun, a flag on the command line wins over the file wherever it stands
    e = env("--cycle-time-ms", "9", "--config-file", str(cfg), "--fusion-threshold-mb", "1")
    assert e["FUSE_CYCLE_TIME"] == "9"
    assert e["FUSE_FUSION_THRESHOLD"] == str(1024 * 1024)
    assert e["FUSE_HIERARCHICAL_ALLREDUCE"] == "0"
    assert e["FUSE_AUTOTUNE"] == "1" and e["FUSE_STALL_CHECK_DISABLE"] == "1"
    assert e["FUSE_STALL_CHECK_TIME_SECONDS"] == "120"
    assert e["FUSE_LOG_LEVEL"] == "INFO" and e["FUSE_LOG_HIDE_TIME"] == "1"
    e = env(f"--config-file={cfg}")
    assert e["FUSE_FUSION_THRESHOLD"] == str(16 * 1024 * 1024)


def test_config_file_straggler_section(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("straggler:\n  policy: 'off'\n  factor: 2.5\n")
    e = env("--config-file", str(cfg))
    assert e["FUSE_STRAGGLER_POLICY"] == "off" and e["FUSE_STRAGGLER_FACTOR"] == "2.5"
    e = env("--straggler-policy", "warn", "--config-file", str(cfg))
    assert e["FUSE_STRAGGLER_POLICY"] == "warn"


def test_config_file_without_yaml(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now fails
    with pytest.raises(UsageError, match="PyYAML"):
        config_file_flags(str(cfg))


def _fuse_sources_but_the_launcher() -> str:
    """fuse's sources, less the launcher (which sets the variables) and the list of knobs
    init() warns are ignored (which names them without acting on them)."""
    import fuse
    root = os.path.dirname(fuse.__file__)
    text = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith((".py", ".pyx")) and not path.endswith(
                    (os.path.join("runner", "launch.py"),
                     os.path.join("common", "ignored_knobs.py"))):
                with open(path) as f:
                    text.append(f.read())
    return "\n".join(text)


def test_flags_whose_setting_nothing_reads_say_so_in_help():
    """A flag that sets a FUSE_* variable no part of fuse reads (config.py knobs are named
    without the prefix) tells --help that it is ignored; and one that is read does not."""
    sources = _fuse_sources_but_the_launcher()
    ignored = []
    for action in make_parser()._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        flag = action.option_strings[-1]
        value = [] if action.nargs == 0 else ["1"]
        try:
            produced = env(flag, *value)
        except (SystemExit, UsageError):
            continue  # needs a value of another kind; not a tunable
        for var in (v for v in produced if v.startswith("FUSE_")):
            read = var in sources or f'"{var[len("FUSE_"):]}"' in sources
            assert read != ("ignored" in action.help), (flag, var, action.help)
            if not read:
                ignored.append(flag)
    assert {"--torus-allreduce",
            "--num-nccl-streams"} <= set(ignored), ignored


@pytest.mark.parametrize("env, message", [
    ({"FUSE_THREAD_AFFINITY": "99,100"},       # whichever rank fails first is reported
     r"FUSE_THREAD_AFFINITY=99,100: local rank [01] gets core (99|100), which this process may "
     r"not run on"),
    ({"FUSE_SHM_THRESHOLD": "-1"}, r"FUSE_SHM_THRESHOLD=-1 is out of range"),
    ({"FUSE_GLOO_TIMEOUT_SECONDS": "0"}, r"FUSE_GLOO_TIMEOUT_SECONDS=0\.0 is out of range"),
])
def test_init_refuses_a_bad_knob_on_every_rank_by_name(env, message):
    import subprocess
    import sys
    from runner_util import fuserun_argv
    r = subprocess.run(fuserun_argv("-np", "2", sys.executable, "-c", "import fuse; fuse.init()"),
                       capture_output=True, timeout=60, env={**os.environ, **env})
    assert r.returncode == 1
    err = r.stderr.decode()
    assert re.search(message, err) and "ValueError" in err
    assert "OverflowError" not in err and "OSError" not in err


HOROVOD_TEST_CONFIG = """controller: gloo

params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: true

autotune:
  enabled: true
  log_file: 'autotune_log.txt'
  warmup_samples: 5
  steps_per_sample: 20
  bayes_opt_max_samples: 50
  gaussian_process_noise: 0.9

timeline:
  filename: 'timeline.json'
  mark_cycles: true

stall_check:
  enabled: true
  warning_time_seconds: 120
  shutdown_time_seconds: 240

library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  gloo_timeout_seconds: 60

logging:
  level: INFO
  hide_timestamp: true
"""


def test_horovods_config_file_layout_with_its_controller(tmp_path):
    """A config file as horovodrun reads it (a top-level controller: and every section)."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(HOROVOD_TEST_CONFIG)
    args = parse_args(["--config-file", str(cfg), "-np", "2", "python", "x.py"])
    assert args.use_gloo and not args.use_mpi
    e = env_from_args(args)
    assert e["FUSE_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)
    assert e["FUSE_CYCLE_TIME"] == "10" and e["FUSE_CACHE_CAPACITY"] == "2048"
    assert e["FUSE_AUTOTUNE"] == "1" and e["FUSE_AUTOTUNE_WARMUP_SAMPLES"] == "5"
    assert e["FUSE_TIMELINE"] == "timeline.json" and e["FUSE_TIMELINE_MARK_CYCLES"] == "1"
    assert e["FUSE_STALL_SHUTDOWN_TIME_SECONDS"] == "240"
    assert e["FUSE_GLOO_TIMEOUT_SECONDS"] == "60" and e["FUSE_LOG_LEVEL"] == "INFO"
    # the command line wins, the controller included
    args = parse_args(["--mpi", "--config-file", str(cfg), "--cycle-time-ms", "3", "-np", "2",
                       "python", "x.py"])
    assert args.use_mpi and not args.use_gloo
    assert env_from_args(args)["FUSE_CYCLE_TIME"] == "3"
    cfg.write_text("controller: slurm\n")
    with pytest.raises(UsageError, match="controller must be one of gloo, mpi, jsrun"):
        parse_args(["--config-file", str(cfg), "python", "x.py"])
