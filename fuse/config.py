"""The knobs a worker reads from the environment, parsed once into one typed object.

A few are read elsewhere, where they are needed before a Config exists or by code that runs
without one: the MPI backend reads FUSE_MPI_THREADS_DISABLE before MPI starts, and
fuse.worker.lifecycle reads FUSE_CONTROLLER_ADDR when rank 0 opens the control channel.  The
launcher's own settings (FUSE_START_TIMEOUT, FUSE_ELASTIC_TIMEOUT through
fuse.runner.settings.seconds_setting, FUSE_SSH_ARGS, the Gloo rendezvous address of a task) are
read in fuse.runner, and the store's FUSE_RENDEZVOUS_DIR in fuse.cluster.store.

Each knob is read as ``FUSE_<NAME>``; where Horovod has the same knob, ``HOROVOD_<NAME>`` is
accepted as an alias (the FUSE_ spelling wins when both are set).  Booleans accept 1/0,
true/false, yes/no, on/off (Horovod reads ``"true"`` as false; we do not copy that trap).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from typing import Any, Mapping

LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")

# Variables that MPI launchers put into every process's environment (Open MPI, MPICH/Hydra
# and Intel MPI, PMIx-based launchers such as srun --mpi=pmix and prterun).
MPI_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def launched_by_mpi(environ: Mapping[str, str] = os.environ) -> bool:
    """True if this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI)."""
    return any(environ.get(var) for var in MPI_LAUNCHER_VARS)


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on", "y"):
        return True
    if t in ("0", "false", "no", "off", "n", ""):
        return False
    try:
        return int(t) > 0
    except ValueError:
        raise ValueError(f"expected a boolean (1/0, true/false), got {text!r}") from None


def _parse_auto_bool(text: str) -> str:
    """"auto" (unset, empty or "auto"), else "on" or "off" as a boolean says."""
    if text.strip().lower() in ("", "auto"):
        return "auto"
    try:
        return "on" if parse_bool(text) else "off"
    except ValueError:
        raise ValueError(f"expected 1/0, true/false or auto, got {text!r}") from None


def _parse_log_level(text: str) -> str:
    t = text.strip().lower()
    if t == "warn":
        t = "warning"
    if t not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return t


STRAGGLER_POLICIES = ("off", "warn", "remove")


def _parse_straggler_policy(text: str) -> str:
    t = text.strip().lower() or "warn"
    if t not in STRAGGLER_POLICIES:
        raise ValueError(f"expected one of {', '.join(STRAGGLER_POLICIES)}, got {text!r}")
    return t


def _parse_cores(text: str) -> str:
    cores = [c.strip() for c in text.split(",") if c.strip()]
    if not all(c.isdigit() for c in cores):
        raise ValueError("expected core numbers separated by commas, e.g. 0,1")
    return ",".join(cores)


# Sizes in bytes: anything up to 1 TiB (the engine keeps them as size_t; a negative or absurd
# value must be refused here, by name, not overflow in C).
_BYTES = (0, 1 << 40)


def _knob(default, env: str, horovod: str | None = None, parse=None, doc: str = "",
          bounds: tuple[float, float] | None = None):
    """A config field read from FUSE_<env> (and HOROVOD_<horovod> when Horovod has it);
    ``bounds`` = (lowest, highest) value accepted, both included."""
    return dataclasses.field(default=default, metadata={
        "env": env, "horovod": horovod, "parse": parse, "doc": doc, "bounds": bounds})


@dataclasses.dataclass(frozen=True)
class Config:
    # identity (set by fuserun / horovodrun-style launchers)
    rank: int = _knob(0, "RANK", "RANK", doc="global rank of this process (set by the launcher)",
                      bounds=(0, 1 << 30))
    size: int = _knob(1, "SIZE", "SIZE", doc="number of processes", bounds=(1, 1 << 30))
    local_rank: int = _knob(0, "LOCAL_RANK", "LOCAL_RANK", doc="rank on this host",
                            bounds=(0, 1 << 30))
    local_size: int = _knob(1, "LOCAL_SIZE", "LOCAL_SIZE", doc="processes on this host",
                            bounds=(1, 1 << 30))
    cross_rank: int = _knob(0, "CROSS_RANK", "CROSS_RANK", doc="index of this host",
                            bounds=(0, 1 << 30))
    cross_size: int = _knob(1, "CROSS_SIZE", "CROSS_SIZE", doc="number of hosts",
                            bounds=(1, 1 << 30))
    hostname: str = _knob("localhost", "HOSTNAME", "HOSTNAME",
                          doc="this host's name in the job (set by the launcher)")
    # backends
    backend: str = _knob("gloo", "BACKEND",
                         doc="the CPU backend plugin (an entry point in fuse.backends: gloo, mpi "
                             "or a third party's); gloo unless started by a bare mpirun (then "
                             "mpi); HOROVOD_CPU_OPERATIONS is read as a fallback")
    gpu_backend: str = _knob("nccl", "GPU_BACKEND",
                             doc="the GPU backend plugin for CUDA tensors (an entry point in "
                                 "fuse.device_backends)")
    rendezvous_addr: str = _knob("", "GLOO_RENDEZVOUS_ADDR", "GLOO_RENDEZVOUS_ADDR",
                                 doc="address of the launcher's rendezvous store")
    rendezvous_port: int = _knob(-1, "GLOO_RENDEZVOUS_PORT", "GLOO_RENDEZVOUS_PORT",
                                 doc="port of the launcher's rendezvous store", bounds=(-1, 65535))
    gloo_iface: str = _knob("", "GLOO_IFACE", "GLOO_IFACE", doc="network interface for Gloo")
    gloo_timeout_seconds: float = _knob(30.0, "GLOO_TIMEOUT_SECONDS", "GLOO_TIMEOUT_SECONDS",
                                        doc="rendezvous timeout; a collective waits for a "
                                            "peer at most this or FUSE_PEER_TIMEOUT_SECONDS, "
                                            "the smaller", bounds=(1.0, 1e7))
    # engine
    fusion_threshold: int = _knob(128 * 1024 * 1024, "FUSION_THRESHOLD", "FUSION_THRESHOLD",
                                  doc="fusion buffer size in bytes; 0 disables fusion",
                                  bounds=_BYTES)
    zero_copy_threshold: int = _knob(4 * 1024 * 1024, "ZERO_COPY_THRESHOLD",
                                     doc="allreduces larger than this many bytes are reduced in "
                                         "place, not copied through the fusion buffer",
                                     bounds=_BYTES)
    malloc_trim_threshold: int = _knob(
        128 * 1024 * 1024, "MALLOC_TRIM_THRESHOLD",
        doc="bytes of freed heap glibc's malloc keeps instead of returning them to the kernel "
            "(blocks up to 32 MiB then come from the heap too), so a step's gradients do not "
            "come back as fresh pages every step; 0 leaves malloc as it is, and so does a "
            "MALLOC_*_ or GLIBC_TUNABLES malloc setting of your own", bounds=_BYTES)
    split_threshold: int = _knob(4 * 1024 * 1024, "SPLIT_THRESHOLD",
                                 doc="allreduces of at least this many bytes are reduced as two "
                                     "halves at once, over two connections (native backends "
                                     "such as Gloo); 0 turns this off", bounds=_BYTES)
    # 16 KiB: where shared memory overtakes the inline path (bench/studies/crossover.py, 2 ranks
    # on a shared 2-core VM: wall-time crossovers between 4 and 32 KiB, CPU time per call between
    # 8 and 16 KiB; bench/results/studies/step_floor.md); the backend's ring is slower than
    # shared memory at every size measured (4 B .. 4 MiB), so nothing is left to it on one host
    shm_threshold: int = _knob(16 * 1024, "SHM_THRESHOLD",
                               doc="when every rank is on one host, allreduces of at least "
                                   "this many bytes are reduced through shared memory instead "
                                   "of the backend or the inline path (any backend; the "
                                   "world's process set), and so are smaller ones too large "
                                   "to travel inline; reduce-scatters, allgathers, "
                                   "alltoalls and broadcasts too large to travel inline go "
                                   "through shared memory at every size; 0 turns all of "
                                   "this off", bounds=_BYTES)
    mailbox: bool = _knob(True, "MAILBOX", parse=parse_bool,
                          doc="when every rank is on one host, the control channel's messages "
                              "(negotiation, inline small collectives) go through rings in "
                              "shared memory instead of the loopback sockets, which still "
                              "wake a sleeping engine thread and report a rank's exit; 0 "
                              "keeps them on the sockets")
    # the torch DistributedOptimizer's hooks queue ready gradients together up to this many
    # bytes (and whatever is left when backward ends): one engine wake-up per batch instead of
    # one per gradient, while a large gradient still goes the moment it is ready
    grad_batch_bytes: int = _knob(1024 * 1024, "GRAD_BATCH_BYTES",
                                  doc="PyTorch's DistributedOptimizer queues gradients that "
                                      "become ready during backward together, each still its "
                                      "own allreduce, until they reach this many bytes or "
                                      "backward ends; 0 queues each one alone", bounds=_BYTES)
    hierarchical_allreduce: str = _knob(
        "auto", "HIERARCHICAL_ALLREDUCE", "HIERARCHICAL_ALLREDUCE", _parse_auto_bool,
        "for a job on several hosts with the same number (>1) of ranks on each: 1 reduces every "
        "allreduce inside each host through shared memory and sends each host's data across "
        "once, 0 never; unset (auto): allreduces of at least FUSE_HIERARCHICAL_THRESHOLD bytes")
    hierarchical_allgather: str = _knob(
        "auto", "HIERARCHICAL_ALLGATHER", "HIERARCHICAL_ALLGATHER", _parse_auto_bool,
        "the same for allgather: each rank gathers with its peers on the other hosts, then the "
        "host's ranks share what they got through shared memory")
    hierarchical_threshold: int = _knob(256 * 1024, "HIERARCHICAL_THRESHOLD",
                                        doc="with FUSE_HIERARCHICAL_ALLREDUCE (or _ALLGATHER) "
                                            "unset (auto), allreduces (allgathers) of at least "
                                            "this many bytes go hierarchically when the job's "
                                            "layout allows",
                                        bounds=_BYTES)
    inline_threshold: int = _knob(64 * 1024, "INLINE_THRESHOLD",
                                  doc="allreduces (and broadcasts) whose size times the set size "
                                      "is at most this many bytes travel with the negotiation "
                                      "and are reduced by the coordinator; 0 turns this off",
                                  bounds=_BYTES)
    spin_time_us: float = _knob(100.0, "SPIN_TIME_US",
                                doc="microseconds a thread waiting for the only collective in "
                                    "flight runs the engine loop itself, polling, before it "
                                    "sleeps (latency of small synchronous calls; less while "
                                    "recent spins run out idle); 0 turns this off",
                                bounds=(0.0, 1e6))
    cycle_time_ms: float = _knob(1.0, "CYCLE_TIME", "CYCLE_TIME",
                                 doc="ms the coordinator holds ready allreduces while others of "
                                     "the same process set are partly submitted, to fuse them "
                                     "(never for anything else)", bounds=(0.0, 60000.0))
    cache_capacity: int = _knob(1024, "CACHE_CAPACITY", "CACHE_CAPACITY",
                                doc="response cache entries; 0 disables the cache",
                                bounds=(0, 1 << 24))
    disable_group_fusion: bool = _knob(False, "DISABLE_GROUP_FUSION", "DISABLE_GROUP_FUSION",
                                       parse_bool,
                                       "fuse the tensors of a grouped call only with each other")
    dynamic_process_sets: bool = _knob(False, "DYNAMIC_PROCESS_SETS", "DYNAMIC_PROCESS_SETS",
                                       parse_bool,
                                       "allow add_process_set/remove_process_set after init()")
    elastic: bool = _knob(False, "ELASTIC", "ELASTIC", parse_bool,
                          doc="elastic mode: init() joins the elastic driver's newest "
                              "generation (the driver sets it)")
    elastic_timeout: float = _knob(600.0, "ELASTIC_TIMEOUT", "ELASTIC_TIMEOUT",
                                   doc="elastic: seconds the driver waits for --min-np slots, "
                                       "and a worker for the job to re-form (fuserun "
                                       "--elastic-timeout)",
                                   bounds=(1.0, 1e7))
    rendezvous_generation: int = _knob(
        -1, "RENDEZVOUS_GENERATION",
        doc="elastic: the rendezvous generation this process joins (the elastic driver sets it; "
            "-1 outside elastic jobs)", bounds=(-1, 1 << 30))
    # diagnostics
    stall_check_disable: bool = _knob(False, "STALL_CHECK_DISABLE", "STALL_CHECK_DISABLE",
                                      parse_bool, "turn off the stall inspector")
    stall_check_time_seconds: float = _knob(60.0, "STALL_CHECK_TIME_SECONDS",
                                            "STALL_CHECK_TIME_SECONDS",
                                            doc="warn, listing the missing ranks and tensors, when "
                                                "some ranks have waited this long for others",
                                            bounds=(0.0, 1e7))
    stall_shutdown_time_seconds: float = _knob(0.0, "STALL_SHUTDOWN_TIME_SECONDS",
                                               "STALL_SHUTDOWN_TIME_SECONDS",
                                               doc="fail the job with StallError after this "
                                                   "long (0: never); also how long workers "
                                                   "wait for a silent rank 0; a value below "
                                                   "FUSE_STALL_CHECK_TIME_SECONDS is ignored",
                                               bounds=(0.0, 1e7))
    peer_timeout_seconds: float = _knob(
        15.0, "PEER_TIMEOUT_SECONDS",
        doc="a rank whose host stops acknowledging the control connection for this long "
            "(down, or cut off by the network) fails the job; an elastic worker whose heartbeat "
            "stops this long (stopped, hung) is left out", bounds=(2.0, 1e7))
    straggler_policy: str = _knob(
        "warn", "STRAGGLER_POLICY", parse=_parse_straggler_policy,
        doc="off, warn (name a rank or host that keeps the others waiting) or remove (an "
            "elastic job's driver also takes it out)")
    straggler_factor: float = _knob(
        1.5, "STRAGGLER_FACTOR",
        doc="a rank (host) is flagged when the job would step this many times faster without "
            "the time it waits for it alone (median over FUSE_STRAGGLER_WINDOW)",
        bounds=(1.01, 1000.0))
    straggler_window: float = _knob(
        10.0, "STRAGGLER_WINDOW",
        doc="seconds of 1-s samples the straggler medians are taken over; a rank is flagged "
            "only after a whole window", bounds=(1.0, 3600.0))
    log_level: str = _knob("warning", "LOG_LEVEL", "LOG_LEVEL", _parse_log_level,
                           "trace, debug, info, warning, error or fatal")
    log_hide_time: bool = _knob(False, "LOG_HIDE_TIME", "LOG_HIDE_TIME", parse_bool,
                                "omit timestamps from log lines")
    timeline: str = _knob("", "TIMELINE", "TIMELINE",
                          doc="rank 0 writes a Chrome trace of every tensor's phases to this "
                              "path; DYNAMIC: nothing until start_timeline(path)")
    timeline_mark_cycles: bool = _knob(False, "TIMELINE_MARK_CYCLES", "TIMELINE_MARK_CYCLES",
                                       parse_bool,
                                       "add a CYCLE_START marker for every engine cycle that did "
                                       "work")
    autotune: bool = _knob(False, "AUTOTUNE", "AUTOTUNE", parse_bool,
                           "tune the fusion threshold, cycle time and response cache online "
                           "(the autotune extra); knobs set explicitly stay fixed")
    autotune_log: str = _knob("", "AUTOTUNE_LOG", "AUTOTUNE_LOG",
                              doc="rank 0 writes one CSV row per autotune sample: "
                                  "cycle_time_ms, fusion_threshold, cache_enabled, score")
    autotune_warmup_samples: int = _knob(3, "AUTOTUNE_WARMUP_SAMPLES", "AUTOTUNE_WARMUP_SAMPLES",
                                         doc="autotune samples discarded before tuning",
                                         bounds=(0, 1 << 20))
    autotune_steps_per_sample: int = _knob(10, "AUTOTUNE_STEPS_PER_SAMPLE",
                                           "AUTOTUNE_STEPS_PER_SAMPLE",
                                           doc="coordinator cycles that emitted responses per "
                                               "autotune sample (a sample lasts 0.2 s at least)",
                                           bounds=(1, 1 << 20))
    autotune_bayes_opt_max_samples: int = _knob(20, "AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
                                                "AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
                                                doc="scored samples after which autotune fixes the "
                                                    "best setting and stops",
                                                bounds=(1, 1 << 20))
    autotune_gaussian_process_noise: float = _knob(0.8, "AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
                                                   "AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
                                                   doc="Gaussian-process noise, in [0, 1]",
                                                   bounds=(0.0, 1.0))
    thread_affinity: str = _knob("", "THREAD_AFFINITY", "THREAD_AFFINITY", _parse_cores,
                                 doc="cores separated by commas: local rank i pins its "
                                     "engine thread to the i-th")
    # where the value of each field came from: name -> env variable (only fields set by env)
    explicit: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Config":
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        explicit: dict[str, str] = {}
        for f in dataclasses.fields(cls):
            meta = f.metadata
            if not meta:
                continue
            names = ["FUSE_" + meta["env"]]
            if meta["horovod"]:
                names.append("HOROVOD_" + meta["horovod"])
            for var in names:
                if var in env:
                    values[f.name] = _convert(f, var, env[var])
                    explicit[f.name] = var
                    break
        values.update(overrides)
        explicit.update({k: "argument" for k in overrides})
        cfg = cls(**values, explicit=explicit)
        cfg._validate()
        return cfg

    def replace(self, **changes: Any) -> "Config":
        """This configuration with ``changes`` (field -> value) in force, counted as given by
        argument, checked again; the environment is not read again."""
        cfg = dataclasses.replace(self, **changes,
                                  explicit={**self.explicit, **{k: "argument" for k in changes}})
        cfg._validate()
        return cfg

    @property
    def stall_shutdown_seconds(self) -> float:
        """The stall-shutdown time in force: FUSE_STALL_SHUTDOWN_TIME_SECONDS, or 0 (never) when
        it is below the warning time, where it means nothing (the coordinator says so)."""
        s = self.stall_shutdown_time_seconds
        return 0.0 if s < self.stall_check_time_seconds else s

    def _validate(self) -> None:
        for f in dataclasses.fields(self):
            bounds = f.metadata.get("bounds") if f.metadata else None
            value = getattr(self, f.name)
            if bounds is not None and not bounds[0] <= value <= bounds[1]:  # NaN fails too
                var = self.explicit.get(f.name, "FUSE_" + f.metadata["env"])
                where = "argument " + f.name if var == "argument" else var
                raise ValueError(f"{where}={value!r} is out of range: it must be "
                                 f"{describe_bounds(*bounds)}")
        for name in ("hierarchical_allreduce", "hierarchical_allgather"):
            if getattr(self, name) not in ("auto", "on", "off"):
                raise ValueError(f"{name}={getattr(self, name)!r}: expected 'auto', 'on' or "
                                 "'off'")
        if not self.rank < self.size or not self.local_rank < self.local_size:
            raise ValueError(f"invalid identity: rank {self.rank} of size {self.size}, local "
                             f"rank {self.local_rank} of {self.local_size}")

    @classmethod
    def describe(cls) -> list[tuple[str, str | None, Any, str]]:
        """(FUSE_ name, HOROVOD_ alias or None, default, meaning) for every knob."""
        rows = []
        for f in dataclasses.fields(cls):
            if not f.metadata:
                continue
            m = f.metadata
            alias = "HOROVOD_" + m["horovod"] if m["horovod"] else None
            rows.append(("FUSE_" + m["env"], alias, f.default, m["doc"]))
        return rows


def describe_bounds(low: float, high: float) -> str:
    """How init()'s errors and the generated reference say a knob's range: "from 0 to 2**40"."""
    def text(v):
        return f"2**{int(v).bit_length() - 1}" if isinstance(v, int) and v >= 1 << 20 else f"{v:g}"
    return f"from {text(low)} to {text(high)}"


@functools.cache
def _field_types() -> dict[str, type]:
    # The annotations are strings (``from __future__ import annotations``): resolve them once.
    return typing.get_type_hints(Config)


def _convert(f: dataclasses.Field, var: str, text: str) -> Any:
    parse = f.metadata["parse"]
    try:
        if parse is not None:
            return parse(text)
        typ = _field_types()[f.name]
        if typ is bool:
            return parse_bool(text)
        if typ is int:
            return int(float(text)) if text.strip() else f.default
        if typ is float:
            return float(text) if text.strip() else f.default
        return text
    except ValueError as err:
        raise ValueError(f"environment variable {var}={text!r}: {err}") from None


@dataclasses.dataclass(frozen=True)
class Setting:
    """An environment variable fuse reads outside :class:`Config`: one the launcher, the agents
    or a backend needs before a Config exists, or in a process that never makes one."""
    name: str
    horovod: str | None
    default: str
    read_by: str
    doc: str


# Listed here so that the configuration reference, generated from this module, names every
# variable fuse reads; the code that reads each one is named in ``read_by``.
OTHER_SETTINGS: tuple[Setting, ...] = (
    Setting("FUSE_MPI_THREADS_DISABLE", "HOROVOD_MPI_THREADS_DISABLE", "0", "the MPI backend",
            "initialise MPI with MPI_THREAD_SERIALIZED instead of MPI_THREAD_MULTIPLE (enough "
            "for fuse, not for mpi4py calls of your own from other threads)"),
    Setting("FUSE_CONTROLLER_ADDR", None, "rank 0's address on the route to the store",
            "rank 0", "the address rank 0 announces for its control channel; set it when that "
            "route picks an address the other hosts cannot reach"),
    Setting("FUSE_RENDEZVOUS_DIR", None, "", "workers without a launcher",
            "without a launcher's store (no FUSE_GLOO_RENDEZVOUS_ADDR): a directory every worker "
            "reaches, used as a file store to rendezvous"),
    Setting("FUSE_SECRET_KEY", None, "made by the launcher", "launcher, workers, agents",
            "the job's secret (hex): every request to the rendezvous store and fuse.run's "
            "payloads are signed with it; local workers get it in their environment, ssh "
            "workers on standard input; agents need it set"),
    Setting("FUSE_START_TIMEOUT", "HOROVOD_START_TIMEOUT", "30", "fuserun, fuse.run",
            "seconds the workers on ssh hosts get to start (--start-timeout wins)"),
    Setting("FUSE_SSH_ARGS", None, "", "fuserun",
            "extra arguments for every ssh the launcher runs, split as a shell would"),
    Setting("FUSE_SPARK_START_TIMEOUT", "HOROVOD_SPARK_START_TIMEOUT", "600",
            "fuse.spark.run, run_elastic",
            "seconds until every rank's Spark task must have started (start_timeout wins)"),
    Setting("FUSE_STORE_ADDR", None, "this host's name", "fuserun --agents",
            "the name or address agents and workers reach the driver's store at "
            "(--store-addr wins)"),
    Setting("FUSE_STORE_PORT", None, "any free port", "fuserun --agents",
            "the driver's store port (--store-port wins)"),
    Setting("FUSE_AGENT_STALE_SECONDS", None, "2", "fuserun --agents",
            "an agent whose heartbeat stops for this long is a lost host"),
    Setting("FUSE_DRIVER", None, "", "fuserun --agent", "HOST:PORT of the driver's store"),
    Setting("FUSE_AGENT_SLOTS", None, "1", "fuserun --agent", "workers this agent runs"),
    Setting("FUSE_AGENT_CONNECT_TIMEOUT", None, "300", "fuserun --agent",
            "seconds an agent keeps trying to reach the driver"),
    Setting("FUSE_AGENT_NAME", None, "the host name", "fuserun --agent",
            "how the agent names itself to the driver"),
    Setting("FUSE_ELASTIC_CHECKPOINT_DIR", None, "", "elastic workers (rank 0)",
            "a directory every commit() of an elastic state is also written to (atomically); "
            "a job started again with the same command resumes from the last one there"),
    Setting("FUSE_ELASTIC_INCARNATION", None, "set by the elastic driver", "elastic workers",
            "the generation the driver started this worker process for; the rendezvous refuses "
            "a process whose generation is not the one the plan names for its slot"),
    Setting("FUSE_AGENT_PRELOAD", None, "", "fuserun --agent",
            "comma-separated modules a warm zygote imports once; ranks whose command is that "
            "Python are forked from it (fuse's image: fuse.torch,torch._dynamo)"),
)
