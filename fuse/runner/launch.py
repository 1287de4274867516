"""``fuserun``: start a fuse job (horovodrun's flags, same names and defaults).

    fuserun -np 4 python train.py
    fuserun -np 8 -H host1:4,host2:4 python train.py
    fuserun -np 8 --hostfile hosts.txt --fusion-threshold-mb 32 python train.py

Flags become environment variables of the workers (``--cycle-time-ms 5`` sets
``FUSE_CYCLE_TIME=5``); everything else in the caller's environment is passed through.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from fuse.cluster import hosts as _hosts
from .job import Job, Settings, worker_base_env
from .settings import seconds_setting
from .usage import UsageError  # noqa: F401 (fuse.runner.launch.UsageError, as before)

PROG = "fuserun"


# ---------------------------------------------------------------------------------------------
# the parser

def _bool_pair(group, name: str, dest: str, help_on: str, *, help_off: str | None = None,
               on_aliases: Sequence[str] = (), off_aliases: Sequence[str] = ()) -> None:
    group.add_argument(f"--{name}", *on_aliases, dest=dest, action="store_true", default=None,
                       help=help_on)
    group.add_argument(f"--no-{name}", *off_aliases, dest=dest, action="store_false",
                       default=None, help=help_off or argparse.SUPPRESS)


# the help of a horovodrun flag that fuserun accepts and does nothing with
_IGNORED = "accepted for horovodrun compatibility and ignored: fuse has no {} yet"


def _general_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("general")
    g.add_argument("-v", "--version", action="store_true", help="print the fuse version and exit")
    g.add_argument("-np", "--num-proc", dest="num_proc", type=int,
                   help="total number of processes (default: all slots of -H/--hostfile)")
    g.add_argument("-cb", "--check-build", dest="check_build", action="store_true",
                   help="list the backends and frameworks this installation can use, then exit")
    g.add_argument("--disable-cache", dest="disable_cache", action="store_true",
                   help="accepted for horovodrun compatibility; fuserun caches nothing")
    g.add_argument("--start-timeout", dest="start_timeout", type=float,
                   help="seconds ssh hosts get to start their workers (default 30, or "
                        "FUSE_START_TIMEOUT / HOROVOD_START_TIMEOUT)")
    g.add_argument("--network-interfaces", dest="network_interfaces",
                   help="comma-separated network interfaces to use, e.g. eth0,eth1")
    g.add_argument("--network-interface", dest="network_interface", action="append",
                   help="a network interface to use (repeatable)")
    g.add_argument("--output-filename", dest="output_filename",
                   help="also write each rank's output to <dir>/rank.<N>/{stdout,stderr}")
    g.add_argument("--verbose", action="store_true", default=None,
                   help="print what the launcher does")
    g.add_argument("--config-file", dest="config_file",
                   help="YAML file with parameters (horovodrun's: controller, params, autotune, "
                        "timeline, stall_check, library_options, logging); flags given on the "
                        "command line win over it, as in horovodrun")
    g.add_argument("--backend", dest="backend",
                   help="CPU backend plugin for the workers (sets FUSE_BACKEND)")


def _ssh_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("ssh")
    g.add_argument("-p", "--ssh-port", dest="ssh_port", type=int, help="ssh port on all hosts")
    g.add_argument("-i", "--ssh-identity-file", dest="ssh_identity_file",
                   help="private key file for ssh")


def _tunables_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tunables")
    g.add_argument("--fusion-threshold-mb", dest="fusion_threshold_mb", type=float,
                   help="fusion buffer size in MiB (default 128) -> FUSE_FUSION_THRESHOLD (bytes)")
    g.add_argument("--cycle-time-ms", dest="cycle_time_ms", type=float,
                   help="engine cycle time in ms (default 1) -> FUSE_CYCLE_TIME")
    g.add_argument("--cache-capacity", dest="cache_capacity", type=int,
                   help="response cache entries (default 1024; 0 disables) -> FUSE_CACHE_CAPACITY")
    _bool_pair(g, "hierarchical-allreduce", "hierarchical_allreduce",
               "reduce inside each host through shared memory and send each host's data "
               "across once (jobs on several hosts with several ranks each); without either "
               "flag fuse chooses by size -> FUSE_HIERARCHICAL_ALLREDUCE")
    _bool_pair(g, "hierarchical-allgather", "hierarchical_allgather",
               "the same for allgather -> FUSE_HIERARCHICAL_ALLGATHER")
    _bool_pair(g, "torus-allreduce", "torus_allreduce", _IGNORED.format("torus allreduce"))


def _autotune_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("autotune")
    _bool_pair(g, "autotune", "autotune", "tune fusion parameters online -> FUSE_AUTOTUNE")
    g.add_argument("--autotune-log-file", dest="autotune_log_file",
                   help="CSV log of autotune samples -> FUSE_AUTOTUNE_LOG")
    g.add_argument("--autotune-warmup-samples", dest="autotune_warmup_samples", type=int,
                   help="samples discarded before tuning (default 3)")
    g.add_argument("--autotune-steps-per-sample", dest="autotune_steps_per_sample", type=int,
                   help="steps per sample (default 10)")
    g.add_argument("--autotune-bayes-opt-max-samples", dest="autotune_bayes_opt_max_samples",
                   type=int, help="samples per Bayesian-optimisation round (default 20)")
    g.add_argument("--autotune-gaussian-process-noise", dest="autotune_gaussian_process_noise",
                   type=float, help="Gaussian-process noise in [0, 1] (default 0.8)")


def _elastic_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("elastic (any of --min-np, --max-np, --host-discovery-script "
                             "turns it on)")
    for flags, kw, text in (
            (("--min-np", "--min-num-proc"), {"type": int},
             "fewest workers to train with (default -np)"),
            (("--max-np", "--max-num-proc"), {"type": int},
             "most workers to run (default: every slot offered)"),
            (("--slots-per-host", "--slots"), {"type": int},
             "slots of a discovered host that names none (default 1)"),
            (("--elastic-timeout",), {"type": float},
             "seconds to wait for --min-np slots (default 600, or FUSE_ELASTIC_TIMEOUT)"),
            (("--reset-limit",), {"type": int},
             "most times the job may re-form before it fails (default: no limit)"),
            (("--blacklist-cooldown-range",), {"type": int, "nargs": 2,
                                              "metavar": ("MIN", "MAX")},
             "seconds a failed host stays out, doubling from MIN up to MAX (default: for good)"),
            (("--host-discovery-script",), {},
             "executable that prints the available hosts, one 'host[:slots]' a line")):
        g.add_argument(*flags, dest="elastic_" + flags[0].lstrip("-").replace("-", "_"),
                       help=text, **kw)


def _agents_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("agents (no ssh: workers start on agents that join, as on "
                             "Kubernetes; see `fuserun --agent --help`)")
    g.add_argument("--agents", dest="agents", action="store_true", default=False,
                   help="start the workers on the agents that join this driver's store "
                        "(static with -np alone, elastic with --min-np/--max-np)")
    g.add_argument("--store-addr", dest="store_addr",
                   help="the name or address the agents and workers reach the store at "
                        "(default FUSE_STORE_ADDR, else this host's name)")
    g.add_argument("--store-port", dest="store_port", type=int,
                   help="the store's port (default FUSE_STORE_PORT, else any free one)")
    g.add_argument("--store-bind", dest="store_bind", default="0.0.0.0",
                   help="the address the store listens on (default 0.0.0.0)")


def _timeline_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("timeline")
    g.add_argument("--timeline-filename", dest="timeline_filename",
                   help="write a Chrome trace of the engine here -> FUSE_TIMELINE")
    _bool_pair(g, "timeline-mark-cycles", "timeline_mark_cycles",
               "mark engine cycles in the timeline -> FUSE_TIMELINE_MARK_CYCLES")


def _stall_check_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("stall check")
    g.add_argument("--no-stall-check", dest="stall_check", action="store_false", default=None,
                   help="disable the stall inspector -> FUSE_STALL_CHECK_DISABLE=1")
    g.add_argument("--stall-check", dest="stall_check", action="store_true", default=None,
                   help=argparse.SUPPRESS)
    g.add_argument("--stall-check-warning-time-seconds", dest="stall_check_warning_time_seconds",
                   type=float, help="warn after ranks are missing this long (default 60)")
    g.add_argument("--stall-check-shutdown-time-seconds",
                   dest="stall_check_shutdown_time_seconds", type=float,
                   help="fail the job after ranks are missing this long (default 0: never)")


def _slow_workers_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("slow workers")
    g.add_argument("--straggler-policy", dest="straggler_policy",
                   choices=("off", "warn", "remove"),
                   help="warn (default): name a rank or host that keeps the others waiting; "
                        "remove: an elastic job also takes it out; off -> "
                        "FUSE_STRAGGLER_POLICY")
    g.add_argument("--straggler-factor", dest="straggler_factor", type=float,
                   help="flag a rank when the job would step this many times faster without "
                        "the wait it causes (default 1.5) -> FUSE_STRAGGLER_FACTOR")


def _library_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("library")
    _bool_pair(g, "mpi-threads-disable", "mpi_threads_disable",
               "initialise MPI single-threaded -> FUSE_MPI_THREADS_DISABLE")
    g.add_argument("--mpi-args", dest="mpi_args", help="extra mpirun arguments (with --mpi)")
    g.add_argument("--tcp", dest="tcp", action="store_true", default=None,
                   help="sets NCCL_IB_DISABLE=1; no effect yet (fuse has no NCCL backend yet)")
    g.add_argument("--binding-args", dest="binding_args",
                   help="process binding arguments for mpirun (with --mpi)")
    g.add_argument("--num-nccl-streams", dest="num_nccl_streams", type=int,
                   help=_IGNORED.format("NCCL backend"))
    g.add_argument("--thread-affinity", dest="thread_affinity",
                   help="cores for the engine thread, one per local rank -> FUSE_THREAD_AFFINITY")
    g.add_argument("--gloo-timeout-seconds", dest="gloo_timeout_seconds", type=float,
                   help="rendezvous and collective timeout (default 30) -> "
                        "FUSE_GLOO_TIMEOUT_SECONDS")


def _logging_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("logging")
    g.add_argument("--log-level", dest="log_level", type=str.upper,
                   choices=["TRACE", "DEBUG", "INFO", "WARNING", "WARN", "ERROR", "FATAL"],
                   help="worker log level -> FUSE_LOG_LEVEL")
    g.add_argument("--log-without-timestamp", "--log-hide-timestamp", dest="log_hide_time",
                   action="store_true", default=None,
                   help="no timestamps in fuse log lines -> FUSE_LOG_HIDE_TIME")
    g.add_argument("--log-with-timestamp", "--no-log-hide-timestamp", dest="log_hide_time",
                   action="store_false", default=None, help=argparse.SUPPRESS)
    g.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp",
                   dest="prefix_timestamp", action="store_true", default=None,
                   help="timestamp every forwarded output line")


def _hosts_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hosts").add_mutually_exclusive_group()
    g.add_argument("-H", "--hosts", dest="hosts",
                   help="hosts and slots, e.g. host1:2,host2:4 (default localhost:<np>)")
    g.add_argument("-hostfile", "--hostfile", dest="hostfile",
                   help="file with lines 'host slots=N' or 'host:N'")


def _controller_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("controller").add_mutually_exclusive_group()
    g.add_argument("--gloo", dest="use_gloo", action="store_true",
                   help="fuserun's own launcher with the Gloo backend (the default launcher)")
    g.add_argument("--mpi", dest="use_mpi", action="store_true",
                   help="hand the launch to mpirun")
    g.add_argument("--jsrun", dest="use_jsrun", action="store_true", help=argparse.SUPPRESS)

def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Launch a fuse (Horovod-compatible) distributed training job.",
        epilog="Every flag below maps to a FUSE_* environment variable of the workers; "
               "HOROVOD_* spellings in your environment are honoured too.")
    for add_flags in (_general_flags, _ssh_flags, _tunables_flags, _autotune_flags,
                      _elastic_flags, _agents_flags, _timeline_flags, _stall_check_flags,
                      _slow_workers_flags, _library_flags, _logging_flags, _hosts_flags,
                      _controller_flags):
        add_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command each worker runs")
    return p


# ---------------------------------------------------------------------------------------------
# --config-file

# (section, key) -> flag taking a value, or (flag if true, flag if false)
_CONFIG_KEYS: dict[tuple[str, str], Any] = {
    ("params", "fusion_threshold_mb"): "--fusion-threshold-mb",
    ("params", "cycle_time_ms"): "--cycle-time-ms",
    ("params", "cache_capacity"): "--cache-capacity",
    ("params", "hierarchical_allreduce"): ("--hierarchical-allreduce",
                                           "--no-hierarchical-allreduce"),
    ("params", "hierarchical_allgather"): ("--hierarchical-allgather",
                                           "--no-hierarchical-allgather"),
    ("params", "torus_allreduce"): ("--torus-allreduce", "--no-torus-allreduce"),
    ("autotune", "enabled"): ("--autotune", "--no-autotune"),
    ("autotune", "log_file"): "--autotune-log-file",
    ("autotune", "warmup_samples"): "--autotune-warmup-samples",
    ("autotune", "steps_per_sample"): "--autotune-steps-per-sample",
    ("autotune", "bayes_opt_max_samples"): "--autotune-bayes-opt-max-samples",
    ("autotune", "gaussian_process_noise"): "--autotune-gaussian-process-noise",
    ("timeline", "filename"): "--timeline-filename",
    ("timeline", "mark_cycles"): ("--timeline-mark-cycles", "--no-timeline-mark-cycles"),
    ("stall_check", "enabled"): ("--stall-check", "--no-stall-check"),
    ("stall_check", "warning_time_seconds"): "--stall-check-warning-time-seconds",
    ("stall_check", "shutdown_time_seconds"): "--stall-check-shutdown-time-seconds",
    ("library_options", "mpi_threads_disable"): ("--mpi-threads-disable",
                                                 "--no-mpi-threads-disable"),
    ("library_options", "num_nccl_streams"): "--num-nccl-streams",
    ("library_options", "gloo_timeout_seconds"): "--gloo-timeout-seconds",
    ("library_options", "thread_affinity"): "--thread-affinity",
    # fuse's own (horovodrun has no such section): the slow-worker settings
    ("straggler", "policy"): "--straggler-policy",
    ("straggler", "factor"): "--straggler-factor",
    ("logging", "level"): "--log-level",
    ("logging", "hide_timestamp"): ("--log-without-timestamp", "--log-with-timestamp"),
}


# horovodrun's top-level "controller:" setting -> fuserun's flag
_CONTROLLERS = {"gloo": "--gloo", "mpi": "--mpi", "jsrun": "--jsrun"}


def config_file_flags(path: str) -> list[str]:
    """The flags equivalent to a horovodrun YAML config file."""
    try:
        import yaml
    except ImportError:
        raise UsageError("--config-file needs PyYAML, which is not installed "
                         "(pip install pyyaml)") from None
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as err:
        raise UsageError(f"--config-file {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise UsageError(f"--config-file {path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config-file {path}: expected a mapping of sections")
    flags: list[str] = []
    for section, values in data.items():
        if section == "controller":
            flag = _CONTROLLERS.get(str(values).strip().lower())
            if flag is None:
                raise UsageError(f"--config-file {path}: controller must be one of "
                                 f"{', '.join(_CONTROLLERS)}, got {values!r}")
            flags.append(flag)
            continue
        if not isinstance(values, dict):
            raise UsageError(f"--config-file {path}: section {section!r} must be a mapping")
        for key, value in values.items():
            flag = _CONFIG_KEYS.get((section, key))
            if flag is None:
                print(f"{PROG}: warning: --config-file {path}: ignoring unknown setting "
                      f"{section}.{key}", file=sys.stderr)
                continue
            if isinstance(flag, tuple):
                if not isinstance(value, bool):
                    raise UsageError(f"--config-file {path}: {section}.{key} must be true or "
                                     f"false, got {value!r}")
                flags.append(flag[0] if value else flag[1])
            elif value is not None:
                flags += [flag, str(value)]
    return flags


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.config_file:
        # As in horovodrun, every flag given on the command line wins over the file, wherever
        # it stands: the file's settings go first, so that later flags override them.
        argv = list(argv)
        n_opts = len(argv) - len(args.command)
        opts, command = argv[:n_opts], argv[n_opts:]
        from_file = config_file_flags(args.config_file)
        if any(a in opts for a in _CONTROLLERS.values()):
            from_file = [a for a in from_file if a not in _CONTROLLERS.values()]
        args = parser.parse_args(from_file + opts + command)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    return args


# ---------------------------------------------------------------------------------------------
# flags -> worker environment

def _b(v: bool) -> str:
    return "1" if v else "0"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def env_from_args(args: argparse.Namespace) -> dict[str, str]:
    """The FUSE_* variables the flags set (only flags that were given)."""
    env: dict[str, str] = {}

    def put(name: str, value, conv=str):
        if value is not None:
            env[name] = conv(value)

    put("FUSE_FUSION_THRESHOLD", args.fusion_threshold_mb,
        lambda mb: str(int(round(mb * 1024 * 1024))))
    put("FUSE_CYCLE_TIME", args.cycle_time_ms, _num)
    put("FUSE_CACHE_CAPACITY", args.cache_capacity)
    put("FUSE_HIERARCHICAL_ALLREDUCE", args.hierarchical_allreduce, _b)
    put("FUSE_HIERARCHICAL_ALLGATHER", args.hierarchical_allgather, _b)
    put("FUSE_TORUS_ALLREDUCE", args.torus_allreduce, _b)
    put("FUSE_AUTOTUNE", args.autotune, _b)
    put("FUSE_AUTOTUNE_LOG", args.autotune_log_file)
    put("FUSE_AUTOTUNE_WARMUP_SAMPLES", args.autotune_warmup_samples)
    put("FUSE_AUTOTUNE_STEPS_PER_SAMPLE", args.autotune_steps_per_sample)
    put("FUSE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", args.autotune_bayes_opt_max_samples)
    put("FUSE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", args.autotune_gaussian_process_noise, _num)
    put("FUSE_TIMELINE", args.timeline_filename)
    put("FUSE_TIMELINE_MARK_CYCLES", args.timeline_mark_cycles, _b)
    put("FUSE_STALL_CHECK_DISABLE", args.stall_check, lambda on: _b(not on))
    put("FUSE_STALL_CHECK_TIME_SECONDS", args.stall_check_warning_time_seconds, _num)
    put("FUSE_STALL_SHUTDOWN_TIME_SECONDS", args.stall_check_shutdown_time_seconds, _num)
    put("FUSE_STRAGGLER_POLICY", args.straggler_policy)
    put("FUSE_STRAGGLER_FACTOR", args.straggler_factor, _num)
    put("FUSE_MPI_THREADS_DISABLE", args.mpi_threads_disable, _b)
    put("FUSE_NUM_NCCL_STREAMS", args.num_nccl_streams)
    put("FUSE_THREAD_AFFINITY", args.thread_affinity)
    put("FUSE_GLOO_TIMEOUT_SECONDS", args.gloo_timeout_seconds, _num)
    put("FUSE_LOG_LEVEL", args.log_level, lambda s: "WARNING" if s == "WARN" else s)
    put("FUSE_LOG_HIDE_TIME", args.log_hide_time, _b)
    if args.tcp:
        env["NCCL_IB_DISABLE"] = "1"
    if args.backend:
        env["FUSE_BACKEND"] = args.backend
    elif args.use_gloo:
        env["FUSE_BACKEND"] = "gloo"
    elif args.use_mpi:
        env["FUSE_BACKEND"] = "mpi"
    return env


def network_interfaces(args: argparse.Namespace) -> list[str]:
    nics: list[str] = []
    for item in ([args.network_interfaces] if args.network_interfaces else []) + \
            (args.network_interface or []):
        nics += [n.strip() for n in item.split(",") if n.strip()]
    return list(dict.fromkeys(nics))


def start_timeout(value: float | None, environ=os.environ) -> float:
    try:
        return seconds_setting(value, ("FUSE_START_TIMEOUT", "HOROVOD_START_TIMEOUT"), 30.0,
                               environ)
    except ValueError as err:
        raise UsageError(str(err)) from None


def host_specs(hosts: str | None, hostfile: str | None,
               np: int | None) -> tuple[list[_hosts.HostSpec], int]:
    """The hosts of the job and the number of processes."""
    try:
        if hosts:
            specs = _hosts.parse_hosts(hosts)
        elif hostfile:
            specs = _hosts.parse_hostfile(hostfile)
        else:
            if np is None:
                raise UsageError("-np/--num-proc is required (or give -H/--hostfile)")
            return [_hosts.HostSpec("localhost", np)], np
    except OSError as err:
        raise UsageError(f"--hostfile {hostfile}: {err.strerror or err}") from None
    except ValueError as err:
        raise UsageError(str(err)) from None
    if np is None:
        np = sum(s.slots for s in specs)
    return specs, np


# ---------------------------------------------------------------------------------------------

def elastic_mode(args: argparse.Namespace) -> bool:
    """--min-np, --max-np or --host-discovery-script make the job elastic (as in horovodrun)."""
    return any(getattr(args, "elastic_" + k) is not None
               for k in ("min_np", "max_np", "host_discovery_script"))


def _check_build() -> int:
    import importlib
    try:
        info = importlib.import_module("fuse.info")
        entry = getattr(info, "main")
    except (ImportError, AttributeError) as err:
        print(f"{PROG}: --check-build: fuse.info is not available in this installation ({err})",
              file=sys.stderr)
        return 1
    rc = entry()
    return rc if isinstance(rc, int) else 0


def _version() -> str:
    from fuse._build_info import VERSION
    return VERSION


def run_commandline(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        print(f"fuse {_version()}")
        return 0
    if args.check_build:
        return _check_build()
    if args.use_jsrun:
        raise UsageError("--jsrun is not supported; use --mpi or the built-in launcher")
    if not args.command:
        raise UsageError("no command given (usage: fuserun -np N COMMAND ...)")
    if args.num_proc is not None and args.num_proc < 1:
        raise UsageError(f"-np must be at least 1, got {args.num_proc}")
    if args.agents and args.use_mpi:
        raise UsageError("--agents needs fuserun's own launcher (Gloo), not --mpi")
    if elastic_mode(args) or args.agents:
        if args.use_mpi:
            raise UsageError("elastic mode needs fuserun's own launcher (Gloo), not --mpi")
        specs, np, slots = [], args.num_proc, []
    else:
        specs, np = host_specs(args.hosts, args.hostfile, args.num_proc)
        try:
            slots = _hosts.assign_slots(specs, np)
        except ValueError as err:
            raise UsageError(str(err)) from None
    verbose = bool(args.verbose) or args.log_level in ("TRACE", "DEBUG")
    env = worker_base_env()
    env.update(env_from_args(args))
    if env.get("FUSE_STRAGGLER_POLICY", "").strip().lower() == "remove" and \
            not (elastic_mode(args) or args.agents):
        raise UsageError(
            "--straggler-policy remove (FUSE_STRAGGLER_POLICY=remove) needs an elastic job: "
            "give --min-np (and --max-np or --host-discovery-script) so the job can go on "
            "without the slow worker; a static job can only name it (warn)")
    nics = network_interfaces(args)

    if args.use_mpi:
        from . import mpi
        try:
            mpirun = mpi.find_mpirun()
        except mpi.MPINotFound as err:
            print(f"{PROG}: {err}", file=sys.stderr)
            return 1
        env["FUSE_SIZE"] = str(np)  # informational: each worker's identity comes from MPI
        mpi_hosts = specs if (args.hosts or args.hostfile) else None
        command, notice = mpi.apply_thread_budget(args.command, env, np, mpi_hosts)
        if notice:
            print(f"{PROG}: {notice}", file=sys.stderr, flush=True)
        argv = mpi.mpirun_argv(
            mpirun, mpi.mpi_flavour(mpirun), np, mpi_hosts, env, command,
            mpi_args=args.mpi_args, ssh_port=args.ssh_port,
            ssh_identity_file=args.ssh_identity_file, network_interfaces=nics,
            output_filename=args.output_filename, prefix_timestamp=bool(args.prefix_timestamp),
            binding_args=args.binding_args)
        return mpi.run_mpirun(argv, env, verbose)

    settings = Settings(
        start_timeout=start_timeout(args.start_timeout), ssh_port=args.ssh_port,
        ssh_identity_file=args.ssh_identity_file, output_filename=args.output_filename,
        prefix_timestamp=bool(args.prefix_timestamp), verbose=verbose,
        network_interfaces=nics, name=PROG)
    if args.agents:
        from .agents import run_agents
        return run_agents(args, env, settings)
    if elastic_mode(args):
        from .elastic import launch as elastic_launch
        return elastic_launch.run_elastic(args, env, settings)
    try:
        job = Job(args.command, slots, env, settings)
    except ValueError as err:
        raise UsageError(str(err)) from None
    with job:
        result = job.run()
    if result.failure is not None:
        print(result.failure.describe(PROG), file=sys.stderr, flush=True)
    return result.returncode


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--agent"]:         # a worker pod's agent, not a launcher
        from .agent import main as agent_main
        agent_main(argv[1:])
    try:
        rc = run_commandline(argv)
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:  # before the job (which handles signals itself) started
        rc = 130
    sys.exit(rc)


if __name__ == "__main__":
    main()
