"""Handing a job to ``mpirun``: ``fuserun --mpi`` and ``fuse.run(..., use_mpi=True)``.

``fuserun --mpi`` builds the mpirun command line (Open MPI or MPICH/Hydra flavour) and replaces
itself with it; ``fuse.run(use_mpi=True)`` runs mpirun as a child and collects the results
through its own store.  Workers read their ranks from the MPI environment (``fuse.init`` picks
the MPI backend by itself under an MPI launcher).  mpirun supervises the job: when a worker dies
or exits with a non-zero code it stops the others (Hydra and Open MPI both do).

Running as root: MPICH needs nothing; Open MPI refuses unless ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` are set, which both paths here do when run as root (and
pass ``--allow-run-as-root``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Mapping, Sequence

from fuse.cluster import thread_budget

from fuse.cluster.hosts import HostSpec, is_local_host

# How many ranks mpirun put on the host a rank runs on (Hydra, then Open MPI).
_LOCAL_SIZE_SH = "${MPI_LOCALNRANKS:-${OMPI_COMM_WORLD_LOCAL_SIZE:-1}}"


class MPINotFound(RuntimeError):
    pass


def find_mpirun() -> str:
    for name in ("mpirun", "mpiexec"):
        path = shutil.which(name)
        if path:
            return path
    raise MPINotFound(
        "--mpi: no mpirun or mpiexec on PATH.  Install an MPI (for example "
        "`pip install mpich` or `apt-get install openmpi-bin`), start the script with your MPI's "
        "own launcher, or drop --mpi to use fuserun's built-in launcher.")


def mpi_flavour(mpirun: str) -> str:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if "Open MPI" in out or "OpenRTE" in out:
        return "openmpi"
    if "Intel" in out:
        return "intel"
    if "HYDRA" in out or "MPICH" in out:
        return "mpich"
    return "unknown"


def mpirun_argv(mpirun: str, flavour: str, np: int, hosts: Sequence[HostSpec] | None,
                env: Mapping[str, str], command: Sequence[str], *, mpi_args: str | None = None,
                ssh_port: int | None = None, ssh_identity_file: str | None = None,
                network_interfaces: Sequence[str] | None = None,
                output_filename: str | None = None, prefix_timestamp: bool = False,
                binding_args: str | None = None) -> list[str]:
    argv = [mpirun]
    host_list = ",".join(f"{h.hostname}:{h.slots}" for h in hosts) if hosts else None
    if flavour == "openmpi":
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        argv += ["--tag-output", "-np", str(np)]
        if host_list:
            argv += ["-H", host_list]
        argv += shlex.split(binding_args) if binding_args else ["-bind-to", "none",
                                                                "-map-by", "slot"]
        rsh = []
        if ssh_port:
            rsh += ["-p", str(ssh_port)]
        if ssh_identity_file:
            rsh += ["-i", ssh_identity_file]
        if rsh:
            argv += ["-mca", "plm_rsh_args", " ".join(rsh)]
        if network_interfaces:
            argv += ["-mca", "btl_tcp_if_include", ",".join(network_interfaces)]
        if output_filename:
            argv += ["--output-filename", output_filename]
        if prefix_timestamp:
            argv.append("--timestamp-output")
        for name in env:
            argv += ["-x", name]
    else:  # MPICH / Hydra / Intel MPI: the whole environment is propagated by default
        argv += ["-l", "-np", str(np)]
        if host_list:
            argv += ["-hosts", host_list]
        if binding_args:
            argv += shlex.split(binding_args)
        if network_interfaces:
            argv += ["-iface", network_interfaces[0]]
        if output_filename:
            argv += ["-outfile-pattern", os.path.join(output_filename, "rank.%r", "stdout"),
                     "-errfile-pattern", os.path.join(output_filename, "rank.%r", "stderr")]
    if mpi_args:
        argv += shlex.split(mpi_args)
    argv += list(command)
    return argv


def apply_thread_budget(command: Sequence[str], env: dict[str, str], np: int,
                        hosts: Sequence[HostSpec] | None) -> tuple[list[str], str | None]:
    """Give mpirun's ranks their thread budget: in ``env`` when every host is this machine,
    else through an ``sh`` wrapper that computes it on each host.  Returns the command to
    run and the notice to print (see :mod:`fuse.cluster.thread_budget`)."""
    if all(is_local_host(h.hostname) for h in hosts or ()):
        cores = thread_budget.usable_cores()
        notice = thread_budget.launcher_notice(env, np, cores)
        env.update(thread_budget.budget_env(env, np, cores))
        return list(command), notice
    script = thread_budget.shell_budget(env, _LOCAL_SIZE_SH)
    if not script:
        return list(command), None
    notice = thread_budget.launcher_notice(env, 0, 0, remote=True)
    return ["sh", "-c", script + 'exec "$@"', "fuse-thread-budget", *command], notice


def run_mpirun(argv: Sequence[str], env: Mapping[str, str], verbose: bool = False) -> int:
    """Run mpirun to its end and return its exit status (128 + N if signal N ended it).

    The launcher stays mpirun's parent rather than exec'ing it, so that afterwards it can
    remove the shared-memory files MPICH leaves in /dev/shm when a rank is killed
    (:func:`sweep_mpi_segments`).  SIGTERM and SIGHUP sent to us go on to mpirun; a terminal's
    SIGINT reaches both, and mpirun stops the ranks."""
    env = _root_env(env)
    if verbose:
        print("fuserun: " + shlex.join(argv), flush=True)
    started = time.time()
    proc = subprocess.Popen(list(argv), env=env)

    def forward(signum, _frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass
    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    old[signal.SIGINT] = signal.signal(signal.SIGINT, lambda *_: None)  # mpirun got it too
    try:
        rc = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        sweep_mpi_segments(started)
    return 128 - rc if rc < 0 else rc


# MPICH's shared-memory files; Open MPI keeps its own under a session directory it cleans.
_MPI_SEGMENT_PREFIXES = ("mpich_shm_",)


def sweep_mpi_segments(since: float, shm_dir: str = "/dev/shm") -> list[str]:
    """Remove the MPI shared-memory files a finished job left: ours, made since ``since``
    (a time.time()), and mapped or held open by no process.  Returns what was removed."""
    try:
        names = [n for n in os.listdir(shm_dir) if n.startswith(_MPI_SEGMENT_PREFIXES)]
    except OSError:
        return []
    candidates = []
    for name in names:
        path = os.path.join(shm_dir, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == os.geteuid() and st.st_ctime >= since - 1.0:
            candidates.append(path)
    if not candidates:
        return []
    in_use = _paths_in_use()
    removed = []
    for path in candidates:
        if path not in in_use:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def _paths_in_use() -> set[str]:
    """Every file that a process we can inspect maps or holds open."""
    used: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.split(None, 5)
                    if len(fields) == 6:
                        used.add(fields[5].rstrip("\n").removesuffix(" (deleted)"))
            for fd in os.listdir(f"/proc/{pid}/fd"):
                used.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return used


def _root_env(env: Mapping[str, str]) -> dict[str, str]:
    env = dict(env)
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def run_function(np: int, hosts: Sequence[HostSpec] | None, env: Mapping[str, str],
                 setup, executable: str, *, mpi_args: str | None = None,
                 ssh_port: int | None = None, ssh_identity_file: str | None = None,
                 network_interfaces: Sequence[str] | None = None,
                 output_filename: str | None = None, verbose: bool = False):
    """Run ``fuse.runner.run_task`` on ``np`` ranks under mpirun, for :func:`fuse.run`.

    ``setup(server)`` stores the function in the launcher's store before the workers start.
    Returns ``(raw results by rank, Failure or None, signal that interrupted us or None)``.
    """

    from fuse.cluster.hosts import is_local_host, store_address
    from .job import Failure
    from fuse.cluster.store import KVStoreServer, secret_from_env

    mpirun = find_mpirun()
    remote = [h.hostname for h in hosts or () if not is_local_host(h.hostname)]
    addr = store_address(remote, list(network_interfaces or []))
    server = KVStoreServer(addr, 0, secret_from_env(env)).start()
    try:
        setup(server)
        env = _root_env(env)
        env["FUSE_GLOO_RENDEZVOUS_ADDR"] = addr
        env["FUSE_GLOO_RENDEZVOUS_PORT"] = str(server.port)
        env["FUSE_BACKEND"] = "mpi"   # as fuserun --mpi does
        env["FUSE_SIZE"] = str(np)    # informational; ranks come from MPI
        env["PYTHONUNBUFFERED"] = "1"
        command, notice = apply_thread_budget(
            [executable, "-m", "fuse.runner.run_task", addr, str(server.port)], env, np, hosts)
        if notice:
            print(f"fuse.run: {notice}", file=sys.stderr, flush=True)
        argv = mpirun_argv(mpirun, mpi_flavour(mpirun), np, hosts, env, command,
                           mpi_args=mpi_args, ssh_port=ssh_port,
                           ssh_identity_file=ssh_identity_file,
                           network_interfaces=network_interfaces,
                           output_filename=output_filename)
        if verbose:
            print("fuse.run: " + shlex.join(argv), flush=True)
        started = time.time()
        proc = subprocess.Popen(argv, env=env, start_new_session=True)
        interrupted = None
        try:
            returncode = proc.wait()
        except KeyboardInterrupt:
            interrupted = signal.SIGINT
            os.killpg(proc.pid, signal.SIGINT)
            try:
                returncode = proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                returncode = proc.wait()
        raw = {r: server.get(f"runfunc_result/{r}") for r in range(np)}
        errors = {r: server.get(f"errors/{r}") for r in range(np)}
        consequences = {r: server.get(f"errors/{r}/consequence") for r in range(np)}
        sweep_mpi_segments(started)
    finally:
        server.stop()
    failure = None
    failed = [r for r in range(np) if errors[r] is not None]
    # a rank that failed of its own accord before one that failed because another did
    own = [r for r in failed if consequences[r] is None]
    if failed:
        r = (own or failed)[0]
        failure = Failure(rank=r, hostname="?", kind="exit", returncode=1,
                          error=errors[r].decode("utf-8", "replace"))
    elif returncode != 0:
        missing = [r for r in range(np) if raw[r] is None] or [0]
        kind = "signal" if returncode < 0 else "exit"
        failure = Failure(rank=missing[0], hostname="?", kind=kind, returncode=returncode,
                          detail=f"mpirun exited with code {returncode}")
    return raw, failure, interrupted
