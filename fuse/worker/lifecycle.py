"""Start-up, shutdown and identity: what every framework module re-exports.

``init()`` reads the configuration, loads the backend plugin chosen by FUSE_BACKEND, connects
the control channel (a TCP star around rank 0, addresses swapped through the backend), and
starts the engine.
"""

from __future__ import annotations

import atexit
import os
import pickle
import socket
import sys
import time
import traceback
from typing import Sequence

from fuse.collectives import calls as collectives
from fuse import ignored_knobs
from fuse.cluster import thread_budget
from fuse.job.process_sets import (ProcessSet, global_process_set,  # noqa: F401
                                      process_set_by_id, process_set_id)
from fuse.job import state
from fuse.job.state import engine, is_initialized, job, rank, size  # noqa: F401
from fuse.config import Config, launched_by_mpi
from fuse.exceptions import ShutdownError


_require = state.require


# The backend group id of the world's twin connection (see Engine.install_twin): far above
# the ids dynamic process sets take.
TWIN_GROUP_ID = 1 << 30


def init(comm=None, process_sets=None, **overrides) -> None:
    """Start fuse on this process.

    Args:
        comm: None for every rank of the job.  (A list of ranks or an mpi4py communicator
            selects the MPI backend's world; see the MPI backend.)
        process_sets: ``ProcessSet`` objects to register now (every rank passes the same
            list), or ``"dynamic"`` to allow ``add_process_set``/``remove_process_set`` later.
        overrides: configuration fields (``fusion_threshold=...``) that win over the env.
    """
    from fuse import _log

    with job.lock:
        if job.engine is not None:
            return
        if process_sets == "dynamic":
            overrides.setdefault("dynamic_process_sets", True)
            process_sets = None
        started = time.monotonic()
        config, backend_cls, backend_kwargs = _configure(comm, overrides)
        joined = time.monotonic()
        log = _log.configure(config.log_level, config.rank, config.log_hide_time)
        from fuse.worker import malloc_tuning
        malloc_tuning.keep_freed_memory(config.malloc_trim_threshold)
        _check_thread_affinity(config)      # before anything starts that would need stopping
        _warn_oversubscribed(config, log)
        ignored_knobs.warn_ignored_knobs(config.local_rank, log)
        backend = backend_cls(config, **backend_kwargs)
        connected = time.monotonic()
        engine = _start_engine(config, backend, log)
        _install_job(engine, config, backend)
        # (the phases' times show where a slow start or re-form went)
        log.debug("initialized: rank %d of %d, backend %s (configuration and rendezvous "
                  "%.2f s, the backend's connections %.2f s, the engine's %.2f s)", config.rank,
                  config.size, config.backend, joined - started, connected - joined,
                  time.monotonic() - connected)
    for ps in process_sets or ():
        _add_process_set(ps)


def _configure(comm, overrides: dict) -> tuple[Config, type, dict]:
    """This process's configuration, read once from the environment and ``overrides`` and
    completed with its identity (from the elastic driver, or from a backend that knows the job
    by itself); the backend class and the keyword arguments it is made with."""
    from fuse.backends import load_backend

    config = Config.from_env(**overrides)
    if config.straggler_policy == "remove" and not config.elastic:
        raise ValueError(
            "FUSE_STRAGGLER_POLICY=remove needs an elastic job (fuserun --min-np/--max-np/"
            "--host-discovery-script, or fuse.run with min_np): a static job cannot go on "
            "without a worker; use warn to have the slow worker named")
    identity = {}
    if config.elastic and "rendezvous_generation" not in overrides:
        identity = _join_elastic(config)
    if config.autotune:
        from fuse.engine.autotune import require_library
        require_library()       # on every rank, before anyone connects
    name = _choose_backend(config)
    backend_cls = load_backend(name)
    backend_kwargs = {}
    if comm is not None and not (isinstance(comm, (list, tuple))
                                 and sorted(comm) == list(range(config.size))):
        if not getattr(backend_cls, "job_identity", None):
            raise ValueError(
                "init(comm=...) with a subset of ranks or an MPI communicator needs the "
                "MPI backend (FUSE_BACKEND=mpi)")
        backend_kwargs["comm"] = comm
    # A backend that knows the job by itself (MPI under a plain mpirun) reports who we are
    # when no launcher set FUSE_RANK, or when init(comm=...) chose a different world; the
    # caller's own overrides still win.
    job_identity = getattr(backend_cls, "job_identity", None)
    if job_identity is not None and ("rank" not in config.explicit or backend_kwargs):
        identity.update({k: v for k, v in job_identity(**backend_kwargs).items()
                         if k not in overrides})
    if name != config.backend:
        identity["backend"] = name
    return (config.replace(**identity) if identity else config), backend_cls, backend_kwargs


def _start_engine(config: Config, backend, log):
    """Connect this rank to the others (the backend's world, the control channel, shared
    memory on one host, the hierarchy across hosts) and start the engine on them."""
    from fuse._core import Engine
    from fuse.engine import hierarchy, mailbox, shm

    world = backend.create_group(list(range(config.size)), 0)
    ctl_fd, worker_fds, hosts = _connect_control_channel(backend, config, log)
    segments = shm.connect(config, backend.exchange)    # None unless one host
    mailboxes = mailbox.connect(config, backend.exchange)  # None unless one host
    hier = hierarchy.connect(config, backend, log)      # None unless several hosts
    engine = Engine(config, backend, world, ctl_fd, worker_fds, log, backend.create_group)
    engine.set_hosts(hosts)
    if mailboxes is not None:
        engine.use_mailboxes(mailboxes)
    from fuse.worker import straggler
    straggler.install(engine, config, log)
    if segments is not None:
        engine.install_shm(0, segments)
    if hier is not None:
        engine.install_hierarchy(0, hier.segments, hier.layout.cross_ranks,
                                 hier.cross_group, hier.min_bytes, hier.gather_min_bytes,
                                 hier.local_index(config.size))
    # the twin connection is only worth building for sizes shared memory (or the
    # hierarchical allreduce) leaves to it
    splits = config.split_threshold > 0 and (
        segments is None or config.split_threshold < config.shm_threshold) and (
        hier is None or config.split_threshold < hier.min_bytes)
    if splits and config.size > 1 and world.native_ops() is not None:
        engine.install_twin(0, backend.create_group(list(range(config.size)), TWIN_GROUP_ID))
    if config.timeline and config.timeline.strip().upper() != "DYNAMIC" and config.rank == 0:
        # before the engine runs, so that the first negotiation is on it
        try:
            _start_timeline_locked(engine, config, config.timeline,
                                   config.timeline_mark_cycles)
        except OSError as err:      # the job runs on without it; the other ranks wait for us
            log.error("cannot write the timeline to %s: %s", config.timeline, err)
    engine.start()
    _pin_engine_thread(engine, config, log)
    if config.autotune and config.rank == 0:
        from fuse.engine.autotune import Autotuner
        job.autotuner = Autotuner(engine, config, log)
        job.autotuner.start()
    return engine


def _install_job(engine, config: Config, backend) -> None:
    """Make the started engine this process's job (holding ``job.lock``)."""
    # Automatic collective names count from zero in every job the engine forms, so that
    # a process that joins a re-formed (elastic) job derives the names the others do.
    collectives.reset_auto_names()
    job.install(engine, config, backend)
    job.forked_from = None
    if config.rendezvous_generation >= 0:
        job.rendezvous_generation = config.rendezvous_generation
        from fuse.worker import generation_watch
        generation_watch.start(engine, config)
    job.dynamic = config.dynamic_process_sets
    if job.prev_excepthook is None:
        job.prev_excepthook = sys.excepthook
        sys.excepthook = _excepthook
        atexit.register(shutdown)       # once, however often an elastic job re-forms


def _join_elastic(config: Config) -> dict:
    """Elastic mode: wait for the driver's next generation and return this worker's identity
    in it (fuse.worker.elastic_rendezvous)."""
    from fuse.worker import elastic_rendezvous, heartbeat
    if _choose_backend(config) != "gloo":
        raise ValueError("elastic mode (FUSE_ELASTIC=1) needs the Gloo backend")
    heartbeat.start(config, elastic_rendezvous.worker_id(config),
                    elastic_rendezvous.incarnation())
    from fuse.cluster import elastic_protocol
    lost = list(job.last_lost)
    identity = elastic_rendezvous.join(
        config, after=job.rendezvous_generation, lost=lost,
        unreachable=_unreachable_peers(lost))
    # recorded now: if connecting fails (a peer died meanwhile), the next init waits for a
    # newer generation instead of joining this one again
    job.rendezvous_generation = identity["rendezvous_generation"]
    return identity


def _unreachable_peers(lost: list[int]) -> list[int]:
    """After a failed collective: the ranks of the job that failed whose hosts this process
    cannot reach (a partition between workers; fuse.worker.peer_probe), besides ``lost``."""
    if job.last_failure is None or job.config is None or \
            job.config.rendezvous_generation != job.rendezvous_generation:
        return []       # (ranks are numbered as in the generation the engine ran)
    from fuse.worker import peer_probe
    return peer_probe.unreachable(job.peer_addresses, job.config.rank, skip=lost)


def _warn_oversubscribed(config: Config, log) -> None:
    """Once per process, on the first rank of each host: say so when the workers' compute
    threads outnumber the host's cores (fuse's launchers prevent it; plain mpirun, srun or a
    user's own launcher may not).  Only a warning: a running framework is never changed."""
    global _threads_checked
    if _threads_checked or config.local_rank != 0:
        return
    _threads_checked = True
    text = thread_budget.oversubscription_warning(config.local_size)
    if text:
        log.warning("%s", text)


_threads_checked = False



def _choose_backend(config: Config, environ=os.environ) -> str:
    """FUSE_BACKEND when set; else HOROVOD_CPU_OPERATIONS (``mpi``/``gloo``); else ``mpi``
    when an MPI launcher started this process without fuserun (no FUSE_RANK) and an ``mpi``
    backend is installed; else the default (gloo)."""
    if "backend" in config.explicit:
        return config.backend
    horovod_ops = environ.get("HOROVOD_CPU_OPERATIONS", "").strip().lower()
    if horovod_ops:
        return horovod_ops
    if "rank" not in config.explicit and launched_by_mpi(environ):
        from fuse.backends import backend_names
        if "mpi" in backend_names():
            return "mpi"
    return config.backend


def _check_thread_affinity(config: Config) -> None:
    """FUSE_THREAD_AFFINITY must name a core for this local rank that this process may use."""
    if not config.thread_affinity:
        return
    cores = [int(c) for c in config.thread_affinity.split(",")]
    if config.local_rank >= len(cores):
        raise ValueError(f"FUSE_THREAD_AFFINITY lists {len(cores)} cores but this is local rank "
                         f"{config.local_rank}")
    allowed = sorted(os.sched_getaffinity(0))
    if cores[config.local_rank] not in allowed:
        raise ValueError(f"FUSE_THREAD_AFFINITY={config.thread_affinity}: local rank "
                         f"{config.local_rank} gets core {cores[config.local_rank]}, which this "
                         f"process may not run on (its cores: {_core_ranges(allowed)})")


def _core_ranges(cores: list[int]) -> str:
    """0,1,2,5 -> '0-2,5'."""
    out, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def _pin_engine_thread(engine, config: Config, log) -> None:
    """FUSE_THREAD_AFFINITY: local rank i pins its engine thread to the i-th listed core
    (checked by _check_thread_affinity before the engine started)."""
    if not config.thread_affinity:
        return
    cores = [int(c) for c in config.thread_affinity.split(",")]
    os.sched_setaffinity(engine.thread_native_id, {cores[config.local_rank]})
    log.debug("engine thread pinned to core %d", cores[config.local_rank])


def _local_address_towards(addr: str) -> str:
    """The IP of the interface this host would use to reach ``addr``."""
    if not addr or addr.startswith("127.") or addr == "localhost":
        return "127.0.0.1"
    from fuse.cluster.hosts import route_source_address
    try:
        return route_source_address(addr)
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _probe_address(config: Config):
    """Where this rank's peers can check that they reach it (fuse.worker.peer_probe), or None
    when no listener could be opened."""
    from fuse.worker import peer_probe
    try:
        return peer_probe.listen(_local_address_towards(config.rendezvous_addr))
    except OSError:
        return None


def _connect_control_channel(backend, config: Config, log):
    """Rank 0 listens; every other rank connects and proves it belongs to the job
    (fuse.worker.control_handshake).  Returns the engine's (ctl_fd, worker_fds) and every
    rank's host name (what the engine names a rank with)."""
    from fuse.worker import control_handshake as handshake

    if config.size == 1:
        return -1, [-1], [config.hostname]
    timeout = max(config.gloo_timeout_seconds, 10.0)
    listener = None
    probe = _probe_address(config)
    if config.rank == 0:
        host = os.environ.get("FUSE_CONTROLLER_ADDR") or _local_address_towards(
            config.rendezvous_addr)
        listener = socket.create_server(("0.0.0.0" if host != "127.0.0.1" else host, 0),
                                        backlog=max(config.size, 128))
        key = handshake.make_key()
        # the key travels over the backend's connections, which the job already trusts
        payload = pickle.dumps((config.hostname, probe, host, listener.getsockname()[1], key))
    else:
        payload = pickle.dumps((config.hostname, probe))
    everyone = [pickle.loads(p) for p in backend.exchange(payload)]
    hosts = [p[0] for p in everyone]
    job.peer_addresses = [p[1] for p in everyone]
    _, _, host, port, key = everyone[0]
    if config.rank == 0:
        try:
            return -1, handshake.accept_ranks(listener, config.size, key, timeout, log.warning,
                                              config.peer_timeout_seconds), hosts
        finally:
            listener.close()
    return handshake.join_coordinator((host, port), config.rank, key, timeout,
                                      config.peer_timeout_seconds), [], hosts


def report_failure(exc: BaseException) -> None:
    """This rank is about to die of ``exc``: tell the other ranks (and the launcher) why, so
    they fail at once with our message instead of waiting for a timeout."""
    engine = job.engine
    if engine is None or isinstance(exc, KeyboardInterrupt):
        return
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    try:
        cause = _cause_of(exc, engine)
        _report_error(text, "".join(traceback.format_exception(type(exc), exc,
                                                               exc.__traceback__)),
                      consequence=_is_consequence(exc, engine), cause=cause)
        if cause is not None and cause.kind == "network" and not job.config.elastic:
            _await_causes(job.config)
    except Exception:
        pass        # the launcher is out of reach: the other ranks still hear it from us
    try:
        engine.abort(text)
    except Exception:
        pass


def _is_consequence(exc: BaseException, engine) -> bool:
    """Whether this rank fails only because another rank did: a ShutdownError, or an error
    raised from one (a framework may wrap it: TensorFlow turns the exception of an op's Python
    function into its own UnknownError and keeps only the text), or any error once this rank's
    engine was failed by another rank's report (``Engine.failed_by``)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ShutdownError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    try:
        reporter = engine.failed_by
    except Exception:       # noqa: BLE001 -- an engine already torn down: no word of a peer
        return False
    return reporter is not None and reporter != engine.rank


def _excepthook(exc_type, exc, tb):
    """An uncaught exception on this rank."""
    report_failure(exc)
    (job.prev_excepthook or sys.__excepthook__)(exc_type, exc, tb)


# A failing rank's report to the launcher is best-effort and short: a rank cut off from the
# launcher's host must still exit soon (with the store's usual 20 tries of up to 30 s each it
# lingered ~10 minutes).  At most REPORT_ATTEMPTS tries of REPORT_TIMEOUT_S each.
REPORT_TIMEOUT_S = 1.5
REPORT_ATTEMPTS = 2


def _cause_of(exc: BaseException, engine):
    """What this rank's failure was, as data (fuse.cluster.failure_cause): the ranks its
    engine found unanswering and, after a failed collective, those whose hosts it cannot
    reach (fuse.worker.peer_probe)."""
    from fuse.cluster import elastic_protocol
    from fuse.cluster.failure_cause import Cause
    from fuse.exceptions import BackendError, FuseInternalError, MismatchError, StallError
    from fuse.worker import peer_probe
    cfg = job.config
    if cfg is None:
        return None
    lost, cut = [], []
    collective = isinstance(exc, FuseInternalError) and \
        not isinstance(exc, (MismatchError, StallError))
    if collective and cfg.size > 1:
        lost = [] if engine.lost_rank is None else [engine.lost_rank]
        cut = peer_probe.unreachable(job.peer_addresses, cfg.rank, skip=lost)
    if lost or cut or (collective and type(exc) in (FuseInternalError, BackendError)):
        kind = "network"
    else:
        kind = "consequence" if _is_consequence(exc, engine) else "error"
    return Cause(kind, cfg.rank, cfg.hostname, lost, cut)


# A static job's rank that failed in a collective waits this long for the others' causes
# before it exits: its exit makes the launcher stop the rest, and a rank still probing its
# peers would never say which of them it cannot reach.
CAUSE_WAIT_S = 3.5


def _await_causes(cfg) -> None:
    from fuse.cluster.failure_cause import KEY
    from fuse.cluster.store import store_from_config
    store = store_from_config(cfg, timeout=REPORT_TIMEOUT_S, attempts=REPORT_ATTEMPTS)
    if store is None:
        return
    deadline = time.monotonic() + CAUSE_WAIT_S
    pending = [r for r in range(cfg.size) if r != cfg.rank]
    while pending and time.monotonic() < deadline:
        pending = [r for r in pending if store.try_get(KEY.format(rank=r)) is None]
        time.sleep(0.1)


def _report_error(summary: str, full: str, consequence: bool = False, cause=None) -> None:
    """Leave this rank's error in the launcher's store.  ``consequence``: we fail because
    another rank did (a ShutdownError), so the launcher looks for that rank's own error.
    Raises ConnectionError when the store cannot be reached within the short bound."""
    cfg = job.config
    if cfg is None:
        return
    from fuse.cluster.store import store_from_config
    store = store_from_config(cfg, timeout=REPORT_TIMEOUT_S, attempts=REPORT_ATTEMPTS)
    if store is not None:
        if consequence:
            store.set(f"errors/{cfg.rank}/consequence", b"1")
        store.set(f"errors/{cfg.rank}", full.encode(errors="replace"))
        if cause is not None:
            from fuse.cluster.failure_cause import KEY
            store.set(KEY.format(rank=cfg.rank), cause.encode())


def shutdown() -> None:
    """Stop the engine.  Safe to call more than once; registered with atexit by init()."""
    with job.lock:
        engine, backend = job.engine, job.backend
        timeline = job.timeline
        tuner = job.autotuner
        job.autotuner = None
        job.engine = None
        job.backend = None
        job.timeline = None
    if tuner is not None:
        tuner.stop()
    if engine is not None:
        # what failed the job, if anything: an elastic re-init tells the driver who was lost
        job.last_failure = engine.failure if engine.failed else None
        job.last_lost = [engine.lost_rank] if engine.failed and engine.lost_rank is not None \
            else []
        started = time.monotonic()
        if engine.failed and backend is not None:
            # the engine thread may still wait in a collective on a peer that vanished without
            # closing its connections (its host or container gone): fail it now, or stopping
            # the engine and closing the backend would wait for the backend's timeout
            backend.abort()
        engine.shutdown()
        stopped = time.monotonic()
        # the GPU backend's executor runs inside the engine: it goes after the engine stopped
        device_path = sys.modules.get("fuse.job.device_path")
        if device_path is not None:
            device_path.reset()
        if timeline is not None:     # after the engine stopped: every event is in the file
            timeline.stop()
        if backend is not None:
            try:
                backend.close()
            except Exception:
                pass
        from fuse._log import logger
        logger.debug("shut down: the engine stopped in %.2f s, the backend closed in %.2f s",
                     stopped - started, time.monotonic() - stopped)


def autotune_state(wait: float | None = 0) -> dict | None:
    """Rank 0 under ``FUSE_AUTOTUNE``: the values the tuner has in force
    (``fusion_threshold``, ``cycle_time_ms``, ``cache_enabled``), ``done`` once it fixed the
    best, ``samples`` scored, ``best_score`` and the knobs that were ``fixed``.  ``None`` on
    other ranks and without autotune: only the coordinator's values are used, so every rank
    runs with these.  ``wait``: seconds to wait for the tuner to finish (None: forever)."""
    _require()
    tuner = job.autotuner
    if tuner is None:
        return None
    if wait is None or wait > 0:
        tuner.wait(wait)
    return tuner.state()


_cfg = state.config


def local_rank() -> int:
    return _cfg().local_rank


def local_size() -> int:
    return _cfg().local_size


def cross_rank() -> int:
    return _cfg().cross_rank


def cross_size() -> int:
    return _cfg().cross_size


def is_homogeneous() -> bool:
    """True if every host runs the same number of ranks."""
    cfg = _cfg()
    return cfg.local_size * cfg.cross_size == cfg.size


def backend_name() -> str:
    return _cfg().backend


def gloo_enabled() -> bool:
    return is_initialized() and backend_name() == "gloo"


def gloo_built() -> bool:
    from fuse.backends import describe_backends
    return any(p.name == "gloo" and p.loads for p in describe_backends())


def mpi_enabled() -> bool:
    return is_initialized() and backend_name() == "mpi"


def mpi_built() -> bool:
    """True if the MPI backend is installed: registered, with mpi4py's MPI module present
    (checked without loading the MPI library)."""
    import importlib.util
    from fuse.backends import backend_names
    try:
        found = importlib.util.find_spec("mpi4py.MPI") is not None
    except ImportError:
        found = False
    return found and "mpi" in backend_names()


def mpi_threads_supported() -> bool:
    """True if MPI runs at MPI_THREAD_MULTIPLE, so mpi4py may be used alongside fuse."""
    if not mpi_enabled():
        raise ValueError("mpi_threads_supported() needs the MPI backend (FUSE_BACKEND=mpi)")
    return bool(job.backend.threads_supported())


def nccl_built() -> int:
    """NCCL's version as an int (2.23.4 -> 22304) when the NCCL backend can load CuPy's NCCL
    here, else 0.  Never imports CuPy at ``import fuse``; this call does."""
    from fuse.backends.nccl import NCCLBackend
    return NCCLBackend.built()


def cuda_built() -> bool:
    """True when fuse can reduce CUDA tensors on the device (the NCCL backend loads)."""
    return nccl_built() > 0


def rocm_built() -> bool:
    return False


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def sycl_built() -> bool:
    """Intel's Horovod distribution (intel-optimization-for-horovod) asks whether oneCCL was
    built for SYCL (XPU) devices; its test suite calls this before every GPU test.  fuse has no
    SYCL backend, so False, as ``ccl_built``."""
    return False


def _start_timeline_locked(engine, config: Config, file_path: str, mark_cycles: bool) -> None:
    from fuse.engine.timeline import TimelineWriter
    if job.timeline is not None:
        job.timeline.stop()
        job.timeline = None
    job.timeline = TimelineWriter(engine, file_path, mark_cycles, config.backend)


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Write a Chrome trace of the engine to ``file_path`` from now on (rank 0 writes; on other
    ranks this does nothing).  Works whatever FUSE_TIMELINE says (Horovod insists on it being
    set); a timeline already being written is closed first."""
    _require()
    if not file_path:
        raise ValueError("start_timeline needs a file path")
    with job.lock:
        if job.config.rank != 0:
            return
        _start_timeline_locked(job.engine, job.config, str(file_path), mark_cycles)


def stop_timeline() -> None:
    """Stop the timeline and close its file (valid JSON).  No-op if none is being written and
    on ranks other than 0."""
    _require()
    with job.lock:
        timeline, job.timeline = job.timeline, None
    if timeline is not None:
        timeline.stop()


# ---- process sets

def _add_process_set(ps: ProcessSet) -> ProcessSet:
    if ps.process_set_id is not None and ps.process_set_id in job.process_sets:
        raise ValueError(f"{ps} is already registered")
    new_id = collectives.submit_control("add_process_set", ranks=ps.ranks)
    ps.process_set_id = new_id
    job.process_sets[new_id] = ps
    _share_memory_in(ps)
    return ps


def _share_memory_in(ps: ProcessSet) -> None:
    """A new process set's members map shared-memory segments of their own when the world
    has them (every rank on this host), so that the set's collectives skip the backend as the
    world's do.  Collective over the members, right after the set is made: each installs its
    view before it can submit anything else on the set, so every member of every later
    collective of the set takes the same path."""
    from fuse.engine import shm
    engine = state.engine()
    me = state.rank()
    if engine.shared_memory is None or me not in ps.ranks or len(ps.ranks) < 2:
        return
    pset_id = ps.process_set_id
    calls = iter(range(2))

    def exchange(data: bytes) -> list[bytes]:
        return collectives.allgather_object(data, name=f"fuse.shm.{pset_id}.{next(calls)}",
                                            process_set=ps)

    segments = shm.connect_members(ps.ranks.index(me), exchange)
    if segments is not None:
        engine.install_shm(pset_id, segments)


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a process set after init.  Every rank must call it, with the same ranks.
    Needs dynamic process sets: ``init(process_sets="dynamic")`` or FUSE_DYNAMIC_PROCESS_SETS=1."""
    _require()
    if not job.dynamic:
        raise ValueError("add_process_set needs dynamic process sets: call "
                         "init(process_sets='dynamic') or set FUSE_DYNAMIC_PROCESS_SETS=1")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.mpi_comm is not None:
        raise ValueError("a process set cannot be made from an MPI communicator after init")
    for known in job.process_sets.values():
        if known.process_set_id != 0 and known.ranks == ps.ranks:
            raise ValueError(f"a process set with ranks {ps.ranks} already exists: {known}")
    return _add_process_set(ps)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Remove a process set (collective over all ranks).  The global set cannot be removed."""
    _require()
    if not job.dynamic:
        raise ValueError("remove_process_set needs dynamic process sets")
    pid = process_set.process_set_id
    if pid == 0:
        raise ValueError("the global process set cannot be removed")
    if pid is None or pid not in job.process_sets:
        return False
    collectives.submit_control("remove_process_set", ranks=[pid])
    del job.process_sets[pid]
    process_set.process_set_id = None
    return True


def check_running() -> None:
    engine = _require()
    if engine.failed:
        raise ShutdownError(engine.failure)
