"""How a job starts its workers: the :class:`WorkerStarter` strategy and the handles it returns.

A :class:`~fuse.runner.job.Job` (and the elastic driver built on it) decides *which* worker runs
on which slot and when; a starter decides *how* one is started, and hands back a
:class:`WorkerHandle` the job watches.  fuserun's own starter runs a process here or over ssh
(:class:`ProcessStarter`); ``fuse.ray`` starts actors, ``fuse.spark`` asks Spark tasks, and the
agent mode asks agents that joined the store (:mod:`fuse.runner.store_hosts`).  Writing a new
way of starting workers means writing a starter, not overriding the job's internals.

The contract:

* ``is_local(host)``: whether a worker on ``host`` runs on this machine (it then shares this
  machine's cores, counted by the job's thread budget, and reaches a loopback store);
* ``carries_environment``: whether the worker starts from this process's environment (the
  job's :meth:`~fuse.runner.job.Job.worker_env`) or gets only the job's identity and store
  (:meth:`~fuse.runner.job.Job.remote_env`); the job builds it and hands it to ``start``;
* ``bind(server)``: called once with the job's running store, before any worker starts;
* ``start(slot, env)``: start the worker, return its handle, raise ``OSError`` when it could
  not be started;
* ``reports_budget``: whether the job should say once what thread budget its local workers
  get (False where each worker computes its own host's budget).

A handle answers ``poll()`` (the exit code, or None while it runs; a negative code is a
signal), ``wait(timeout)``, ``terminate(sig)`` (stop it: SIGTERM asks, SIGKILL insists) and
``stderr_tail()`` (its last stderr lines, for a failure's report, when the job does not read its
stderr itself).  A handle with pipes (``stdout``/``stderr`` file objects) has them forwarded by
the job, line by line, with the ``[rank]<stream>:`` prefix.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import IO, Mapping, Sequence

from fuse.cluster import thread_budget
from fuse.cluster.hosts import Slot, is_local_host
from fuse.cluster.store import SECRET_ENV, KVStoreServer

from .settings import Settings

__all__ = ["WorkerHandle", "PolledHandle", "ProcessHandle", "WorkerStarter", "ProcessStarter"]

# Local workers die with the launcher even when it is SIGKILLed (it cannot clean up then), and
# so does everything they started: a small guard process leads each worker's process group,
# the kernel tells it when the launcher dies, and it signals the group (orphan_guard.py).
_GUARD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "orphan_guard.py")


def _orphan_guard() -> list[str]:
    """The argv prefix that runs a local worker under the orphan guard (Linux only)."""
    if not sys.platform.startswith("linux"):
        return []
    return [sys.executable, "-I", "-S", _GUARD_SCRIPT, str(os.getpid()), "--"]

# never in the environment sent to other machines: they describe this machine/session
_DROP_REMOTE = {"HOSTNAME", "PWD", "SHLVL", "_", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
                "SSH_AUTH_SOCK", "TERMCAP", "XDG_RUNTIME_DIR", "XDG_SESSION_ID"}


class WorkerHandle:
    """A started worker as the job watches it.  Subclasses implement :meth:`poll` and
    :meth:`terminate`; the rest has defaults."""

    pid: int | None = None
    stdin: IO | None = None
    stdout: IO | None = None         # forwarded by the job when set
    stderr: IO | None = None
    started = True                   # False until a remote wrapper says the worker runs
    start_deadline = 0.0             # ... and by when it must have said so
    marker: bytes | None = None      # the line that says so (swallowed from stdout)

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> int:
        raise NotImplementedError

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        raise NotImplementedError

    def stderr_tail(self) -> list[str]:
        return []


class PolledHandle(WorkerHandle):
    """A worker that runs elsewhere (an actor, a task, an agent's process): ``wait`` polls."""

    poll_seconds = 0.05

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(repr(self), timeout)
            time.sleep(self.poll_seconds)


class ProcessHandle(WorkerHandle):
    """A worker process started here (directly, or as the ssh client of a remote one).  It
    leads its own process group, which is what we signal, so grandchildren go with it."""

    def __init__(self, proc: subprocess.Popen, remote: bool = False,
                 marker: bytes | None = None, start_timeout: float = 0.0):
        self.proc = proc
        self.pid = proc.pid
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr
        self.remote = remote
        self.marker = marker
        self.started = not remote
        self.start_deadline = time.monotonic() + start_timeout

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        if self.remote and sig == signal.SIGTERM and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()  # ssh forwards EOF; the remote watcher stops the worker
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, sig)  # the worker leads its own group: pgid == pid
        except (ProcessLookupError, PermissionError):
            pass


class WorkerStarter:
    """The strategy a job starts its workers with (see the module's docstring).  The default
    methods suit a starter whose workers run on other machines and get only the job's own
    variables; :class:`ProcessStarter` is fuserun's."""

    reports_budget = False
    # False: a worker gets the job's identity and store for its slot and no variable of this
    # process (what a worker started by someone else, an actor, a task, an agent, needs);
    # True: it starts from this process's environment (:meth:`~fuse.runner.job.Job.worker_env`)
    carries_environment = False

    def bind(self, server: KVStoreServer) -> None:
        """Called once by the job that uses this starter with the job's store, running, before
        any worker starts."""
        self.server = server

    def is_local(self, host: str) -> bool:
        return True

    def start(self, slot: Slot, env: Mapping[str, str]) -> WorkerHandle:
        raise NotImplementedError


def _findable(program: str, env: Mapping[str, str], cwd: str | None) -> bool:
    """Whether exec would find ``program`` (a path, or a name on the worker's PATH)."""
    if os.sep in program:
        return os.access(os.path.join(cwd or "", program), os.X_OK)
    return shutil.which(program, path=env.get("PATH", os.defpath)) is not None


class ProcessStarter(WorkerStarter):
    """fuserun's starter: ``command`` as a process here, or over ``ssh`` on another host (the
    job's secret on ssh's stdin, which stays open: its end stops the remote worker)."""

    reports_budget = True
    carries_environment = True

    def __init__(self, command: Sequence[str], settings: Settings, secret: bytes):
        self.command = list(command)
        self.settings = settings
        self.secret = secret

    def is_local(self, host: str) -> bool:
        return is_local_host(host)

    def start(self, slot: Slot, env: Mapping[str, str]) -> WorkerHandle:
        st = self.settings
        if not self.is_local(slot.hostname):
            marker = f"__fuse_started_{secrets.token_hex(8)}__"
            argv = self.ssh_argv(slot.hostname, env, marker)
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
            try:
                proc.stdin.write(self.secret.hex().encode() + b"\n")
                proc.stdin.flush()
            except OSError:
                pass        # ssh died at once: its exit is reported like any other
            return ProcessHandle(proc, True, marker.encode(), st.start_timeout)
        guard = _orphan_guard()
        if guard and not _findable(self.command[0], env, st.cwd):
            # say it as Popen would, not as the guard does
            raise FileNotFoundError(2, "No such file or directory", self.command[0])
        proc = subprocess.Popen(guard + self.command, env=dict(env), cwd=st.cwd,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        return ProcessHandle(proc)

    def describe(self, slot: Slot) -> str:
        """What starting ``slot`` runs (for --verbose)."""
        if self.is_local(slot.hostname):
            return shlex.join(self.command)
        return shlex.join(self.ssh_base() + [slot.hostname]) + " <script>"

    def ssh_argv(self, host: str, env: Mapping[str, str], marker: str) -> list[str]:
        st = self.settings
        cwd = st.cwd or os.getcwd()
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                           if k not in _DROP_REMOTE and "=" not in k and k)
        cmd = " ".join(shlex.quote(a) for a in self.command)
        grace = max(1, int(round(st.grace_seconds)))
        # The worker runs in the foreground; a watcher holds the ssh session's stdin and, when it
        # closes (the launcher stopped the job or died), terminates the session's process group,
        # which sshd made for this command alone.  The marker line tells the launcher we started.
        script = (
            f"IFS= read -r {SECRET_ENV} && export {SECRET_ENV}\n"   # the first line of stdin
            f"cd {shlex.quote(cwd)} >/dev/null 2>&1\n"
            "exec 3<&0\n"
            "{ trap '' TERM; cat <&3 >/dev/null; kill -TERM 0; "
            f"sleep {grace}; kill -KILL 0; }} >/dev/null 2>&1 &\n"
            f"printf '%s\\n' {marker}\n"
            + thread_budget.shell_budget(env, env.get("FUSE_LOCAL_SIZE", "1")) +
            f"env {assigns} {cmd} </dev/null 3<&-\n"
        )
        return self.ssh_base() + [host, "sh -c " + shlex.quote(script)]

    def ssh_base(self) -> list[str]:
        st = self.settings
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
                "-o", f"ConnectTimeout={max(1, int(st.start_timeout))}",
                "-o", "ServerAliveInterval=15"]
        if st.ssh_port:
            argv += ["-p", str(st.ssh_port)]
        if st.ssh_identity_file:
            argv += ["-i", st.ssh_identity_file]
        argv += shlex.split(os.environ.get("FUSE_SSH_ARGS", ""))  # e.g. -o UserKnownHostsFile=..
        return argv
