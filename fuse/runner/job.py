"""Starting, watching and stopping the workers of one job.

This is the single code path behind ``fuserun`` and :func:`fuse.run`: a :class:`Job` owns the
rendezvous :class:`~fuse.cluster.store.KVStoreServer`, starts one worker per slot through its
:class:`~fuse.runner.starter.WorkerStarter` (fuserun's: a process on this machine, or over
``ssh`` elsewhere), forwards every output line with a ``[rank]<stream>:`` prefix, and takes the
whole job down when one worker fails or the launcher is interrupted.

One thread does all of it: a selector waits on the workers' pipes, on a pidfd per worker (so an
exit wakes us at once; without pidfds we poll every 50 ms) and on a self-pipe written by the
signal handlers.  Each worker is the leader of its own process group, which is what we signal,
so grandchildren go down with it and nothing is left behind.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Mapping, Sequence

from fuse.cluster import failure_cause, thread_budget

from fuse.cluster.hosts import Slot, loopback_interface, store_address
from fuse.cluster.store import SECRET_ENV, KVStoreServer, make_secret, rendezvous_env

from .settings import Settings
from .starter import ProcessStarter, WorkerHandle, WorkerStarter
from .worker_env import job_env

__all__ = ["Settings", "Failure", "JobResult", "Job", "worker_base_env", "WorkerStarter",
           "WorkerHandle"]

# never handed to workers: shell functions exported by bash, and the caller's previous directory
_DROP_PREFIXES = ("BASH_FUNC_",)
_DROP_NAMES = {"OLDPWD"}

STDERR_TAIL_LINES = 20
_MAX_LINE = 1 << 20  # a line longer than this is forwarded in pieces


def worker_base_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment as workers get it (minus BASH_FUNC_* and OLDPWD)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items()
            if k not in _DROP_NAMES and not k.startswith(_DROP_PREFIXES)}


@dataclasses.dataclass
class Failure:
    """Why the job failed: the first worker that went wrong."""
    rank: int
    hostname: str
    kind: str                      # "exit", "signal", "start", "timeout", "error", "lost"
    returncode: int | None = None  # exit code, or -signal
    detail: str = ""               # for "start"/"timeout": what happened
    error: str | None = None       # text the worker stored under errors/<rank>
    stderr_tail: list[str] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.kind == "start" and self.returncode is None:
            return 127  # like a shell: the command could not be run
        if self.kind in ("exit", "start") and self.returncode and self.returncode > 0:
            return self.returncode
        return 1

    def what(self) -> str:
        if self.kind == "exit":
            return f"exited with code {self.returncode}"
        if self.kind == "signal":
            return f"was killed by signal {_signame(-self.returncode)}"
        return self.detail

    def describe(self, name: str = "fuserun") -> str:
        if self.kind == "lost":     # named by the others' reports, whoever exited first
            lines = [f"{name}: rank {self.rank} (host {self.hostname}) was lost: {self.what()}."]
        else:
            lines = [f"{name}: rank {self.rank} (host {self.hostname}) failed first: "
                     f"{self.what()}."]
        if self.error:
            lines.append(f"{name}: error reported by rank {self.rank}:")
            lines.extend("    " + line for line in self.error.rstrip().splitlines())
        elif self.stderr_tail:
            n = len(self.stderr_tail)
            lines.append(f"{name}: last {'line' if n == 1 else f'{n} lines'} of rank "
                         f"{self.rank}'s stderr:")
            lines.extend("    " + line for line in self.stderr_tail)
        elif self.kind in ("exit", "signal"):
            lines.append(f"{name}: rank {self.rank} reported no error and wrote nothing to stderr.")
        return "\n".join(lines)


@dataclasses.dataclass
class JobResult:
    returncode: int                  # what the launcher should exit with
    exit_codes: dict[int, int | None]  # rank -> returncode (None: never started)
    failure: Failure | None = None
    interrupted: int | None = None   # the signal that stopped the launcher, if any


@dataclasses.dataclass
class _LoopState:
    """Where :meth:`Job.run`'s loop stands: the failure that stops the job, the signal that
    interrupted the launcher, and the deadlines for killing the workers and for their output."""
    failure: Failure | None = None
    interrupted: int | None = None
    stopping: bool = False
    kill_at: float | None = None
    drain_until: float | None = None


def _signame(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({sig})"
    except ValueError:
        return str(sig)


class _Sink:
    """Writes bytes to a binary or text stream, serialised between threads."""

    def __init__(self, stream: IO):
        self._binary = getattr(stream, "buffer", None)
        self._text = stream
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            try:
                if self._binary is not None:
                    self._text.flush()  # keep order with text already written there
                    self._binary.write(data)
                    self._binary.flush()
                else:
                    self._text.write(data.decode("utf-8", "replace"))
                    self._text.flush()
            except (OSError, ValueError):
                pass  # our own stdout is gone (closed pipe); keep supervising the workers


class _Stream:
    """One pipe of one worker: splits bytes into lines and forwards them with a prefix.

    Lines end at ``\\n`` or at a lone ``\\r`` (progress bars); a partial line is kept until its end
    arrives (or the pipe closes), bytes are never decoded on the way through.
    """

    def __init__(self, worker: "WorkerRecord", name: str, fd: int, sink: _Sink, prefix_timestamp: bool,
                 tee: IO | None, keep_tail: bool, marker: bytes | None = None):
        self.worker, self.name, self.fd, self.sink = worker, name, fd, sink
        self.prefix = f"[{worker.slot.rank}]<{name}>:".encode()
        self.timestamps = prefix_timestamp
        self.tee = tee
        self.tail: collections.deque | None = (
            collections.deque(maxlen=STDERR_TAIL_LINES) if keep_tail else None)
        self.marker = marker  # first line expected from a remote wrapper, swallowed
        self.buf = bytearray()
        self.open = True

    def feed(self, data: bytes) -> None:
        if self.tee is not None:
            self.tee.write(data)
            self.tee.flush()
        self.buf += data
        out = []
        start = 0
        buf = self.buf
        n = len(buf)
        while start < n:
            nl = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, nl if nl >= 0 else n)
            if cr >= 0:
                if cr == n - 1:
                    break  # a '\r' at the end may be the first half of '\r\n': wait
                end = cr + 2 if buf[cr + 1:cr + 2] == b"\n" else cr + 1
            elif nl >= 0:
                end = nl + 1
            elif n - start > _MAX_LINE:
                end = n
            else:
                break
            out.append(bytes(buf[start:end]))
            start = end
        del buf[:start]
        self._emit(out)

    def close(self) -> None:
        self.open = False
        if self.buf:
            line = bytes(self.buf)
            self.buf.clear()
            self._emit([line if line.endswith((b"\n", b"\r")) else line + b"\n"])
        if self.tee is not None:
            self.tee.close()
            self.tee = None

    def _emit(self, lines: list[bytes]) -> None:
        if not lines:
            return
        if self.marker is not None:
            if lines[0].rstrip(b"\r\n") == self.marker:
                self.worker.proc.started = True
                lines = lines[1:]
            self.marker = None
        if self.tail is not None:
            for line in lines:
                text = line.rstrip(b"\r\n").decode("utf-8", "replace")
                self.tail.append(text)
        if not lines:
            return
        if self.timestamps:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S").encode()
            prefix = stamp + self.prefix
        else:
            prefix = self.prefix
        if len(lines) == 1 and not lines[0].endswith((b"\n", b"\r")):
            lines[0] += b"\n"
        elif not lines[-1].endswith((b"\n", b"\r")):
            lines[-1] += b"\n"
        self.sink.write(b"".join(prefix + line for line in lines))


class WorkerRecord:
    """The job's record of one worker: its slot, the handle its starter returned, the pipes
    being forwarded, how it ended."""

    def __init__(self, slot: Slot):
        self.slot = slot
        self.proc: WorkerHandle | None = None
        self.pidfd: int | None = None
        self.streams: list[_Stream] = []
        self.returncode: int | None = None
        self.exit_order = -1            # 0 for the first worker seen to exit, and so on
        self.wid: str | None = None     # elastic jobs: <host>:<slot index>

    @property
    def remote(self) -> bool:
        return self.proc is not None and self.proc.marker is not None

    @property
    def started(self) -> bool:
        return self.proc is None or self.proc.started

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.terminate(sig)

    def tail(self) -> list[str]:
        """The last lines it wrote to stderr (what its failure is reported with)."""
        for s in self.streams:
            if s.tail is not None and s.tail:
                return list(s.tail)
        return self.proc.stderr_tail() if self.proc is not None else []


class Job:
    """A job: the store, the workers, and their supervision.

    ``command`` is the argv each worker runs; ``env`` the base environment (default: ours,
    filtered), to which the job adds the rendezvous address, ``PYTHONUNBUFFERED=1`` and each
    slot's identity.  Use as a context manager, or call :meth:`close`.

    ``starter`` (a :class:`~fuse.runner.starter.WorkerStarter`) starts each worker: by default
    fuserun's, a process here or over ssh.  ``store_addr`` is where the workers reach the store
    (default: worked out from the hosts); ``store_bind`` where it listens (default: there too;
    ``0.0.0.0`` behind a name such as a Kubernetes Service), ``store_port`` on which port (0:
    the system's choice).
    """

    def __init__(self, command: Sequence[str], slots: Sequence[Slot],
                 env: Mapping[str, str] | None = None, settings: Settings | None = None,
                 secret: bytes | None = None, store_addr: str | None = None,
                 starter: WorkerStarter | None = None, store_bind: str | None = None,
                 store_port: int = 0):
        if not command:
            raise ValueError("no command to run")
        if not slots:
            raise ValueError("no slots to run on")
        self.command = list(command)
        self.slots = list(slots)
        self.settings = settings or Settings()
        self.base_env = worker_base_env(env)
        self.job_vars: dict[str, str] = {}     # set in every worker, however it is started
        # The secret first: fuserun's starter hands it to remote workers on ssh's stdin.
        self.secret = secret if secret is not None else make_secret()
        self.starter = starter or ProcessStarter(self.command, self.settings, self.secret)
        remote_hosts = []
        for s in self.slots:
            if not self.starter.is_local(s.hostname) and s.hostname not in remote_hosts:
                remote_hosts.append(s.hostname)
        self.remote_hosts = remote_hosts
        # Every host name that resolves to this machine shares its cores.
        self.local_workers = sum(s.hostname not in remote_hosts for s in self.slots)
        self.cores = thread_budget.usable_cores()
        nics = list(self.settings.network_interfaces or [])
        # ``store_addr``: a launcher that places workers itself (Ray) knows where they reach it
        self.addr = store_addr or store_address(remote_hosts, nics)
        # The store listens only where the workers reach it (loopback for a local job), and
        # serves only requests made with the job's secret.
        self.server = KVStoreServer(store_bind or self.addr, store_port, self.secret).start()
        self.port = self.server.port
        self._sel: selectors.BaseSelector | None = None
        self.workers: list[WorkerRecord] = []
        self.pending_signals: list[int] = []
        self._wake_r = self._wake_w = -1
        self.starter.bind(self.server)

    # -- context ---------------------------------------------------------------------------
    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.server.stop()

    # -- environment -----------------------------------------------------------------------
    def remote_env(self, slot: Slot) -> dict[str, str]:
        """What a worker that does not inherit this process's environment gets: its identity,
        the store's address, the job's secret and the job's own variables (see
        :attr:`WorkerStarter.carries_environment`)."""
        env = job_env(slot, self.addr, self.port, self.secret, self.settings.network_interfaces)
        env.update(self.job_vars)
        return env

    def worker_env(self, slot: Slot) -> dict[str, str]:
        env = dict(self.base_env)
        nics = list(self.settings.network_interfaces or [])
        if nics:
            env["FUSE_GLOO_IFACE"] = nics[0]
        elif not self.remote_hosts and not (env.get("FUSE_GLOO_IFACE")
                                            or env.get("HOROVOD_GLOO_IFACE")):
            env["FUSE_GLOO_IFACE"] = loopback_interface()
        env.update(rendezvous_env(self.addr, self.port))
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.job_vars)
        env.update(slot.env())
        env.pop(SECRET_ENV, None)       # an outer job's: never this job's workers'
        if slot.hostname not in self.remote_hosts:
            # remote hosts count their cores themselves, and read the secret from ssh's stdin
            env.update(thread_budget.budget_env(env, self.local_workers, self.cores))
            env[SECRET_ENV] = self.secret.hex()
        return env

    def budget_notice(self) -> str | None:
        """What the thread budget gives the workers, said once when the job starts."""
        if not self.starter.reports_budget:
            return None     # each worker computes its own host's budget (worker_env)
        return thread_budget.launcher_notice(self.base_env, self.local_workers, self.cores,
                                             remote=bool(self.remote_hosts))

    # -- messages --------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self._err_sink.write(f"{self.settings.name}: {text}\n".encode())

    def debug(self, text: str) -> None:
        if self.settings.verbose:
            self.say(text)

    # -- starting --------------------------------------------------------------------------
    def unreachable_hosts(self) -> dict[str, str]:
        """The remote hosts that do not answer over ssh, each with ssh's last words: asked
        all at once, before any worker starts (as horovodrun does), so that a typo in -H or a
        missing key is one clear message instead of a half-started job."""
        procs = {}
        for host in self.remote_hosts:
            try:
                procs[host] = subprocess.Popen(self.starter.ssh_base() + [host, "true"],
                                               stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, start_new_session=True)
            except OSError as err:
                return {h: f"cannot run ssh: {err.strerror or err}" for h in self.remote_hosts}
        failed = {}
        deadline = time.monotonic() + self.settings.start_timeout + 5
        for host, proc in procs.items():
            try:
                _, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                failed[host] = f"no answer within {self.settings.start_timeout:g} s"
                continue
            if proc.returncode != 0:
                words = err.decode(errors="replace").strip().splitlines()
                failed[host] = (words[-1] if words else f"ssh exit code {proc.returncode}")
        return failed

    def _output_files(self, rank: int) -> tuple[IO | None, IO | None]:
        d = self.settings.output_filename
        if not d:
            return None, None
        path = os.path.join(d, f"rank.{rank}")
        os.makedirs(path, exist_ok=True)
        return open(os.path.join(path, "stdout"), "wb"), open(os.path.join(path, "stderr"), "wb")

    def start_worker(self, w: WorkerRecord) -> Failure | None:
        """Start ``w`` with the job's starter and forward its pipes, if it has any."""
        st = self.settings
        try:
            env = (self.worker_env(w.slot) if self.starter.carries_environment
                   else self.remote_env(w.slot))
            if st.verbose and isinstance(self.starter, ProcessStarter):
                self.debug(f"rank {w.slot.rank} on {w.slot.hostname}: "
                            f"{self.starter.describe(w.slot)}")
            w.proc = self.starter.start(w.slot, env)
        except OSError as err:
            what = self.command[0]
            if isinstance(self.starter, ProcessStarter) and \
                    not self.starter.is_local(w.slot.hostname):
                what = "ssh"
            return Failure(w.slot.rank, w.slot.hostname, "start",
                           detail=f"could not start {what}: {err.strerror or err}")
        if w.proc.stdout is not None:
            out_f, err_f = self._output_files(w.slot.rank)
            for name, pipe, tee in (("stdout", w.proc.stdout, out_f),
                                    ("stderr", w.proc.stderr, err_f)):
                sink = self._out_sink if name == "stdout" else self._err_sink
                s = _Stream(w, name, pipe.fileno(), sink, st.prefix_timestamp, tee,
                            keep_tail=(name == "stderr"),
                            marker=w.proc.marker if name == "stdout" else None)
                w.streams.append(s)
                self._sel.register(s.fd, selectors.EVENT_READ, s)
        if w.proc.pid is not None:
            try:
                w.pidfd = os.pidfd_open(w.proc.pid)
                self._sel.register(w.pidfd, selectors.EVENT_READ, w)
            except (AttributeError, OSError):
                w.pidfd = None
        return None

    # -- signals ---------------------------------------------------------------------------
    def _on_signal(self, signum, frame) -> None:
        self.pending_signals.append(signum)
        try:
            os.write(self._wake_w, b"s")
        except OSError:
            pass

    def _install_signals(self) -> dict:
        old = {}
        if threading.current_thread() is not threading.main_thread():
            return old
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                old[sig] = signal.signal(sig, self._on_signal)
            except (ValueError, OSError):
                pass
        return old

    # -- stopping --------------------------------------------------------------------------
    def stop_all(self, sig: int) -> None:
        for w in self.workers:
            if w.running:
                w.signal_group(sig)

    def _root_cause(self, first: Failure) -> Failure:
        """The failure to report: ``first`` (the first worker seen to fail) unless it failed
        only because another rank did (its stored error says so) and a rank that failed of
        its own accord is known: the first of those to exit, by its own error."""
        lost = self._lost_rank()
        if lost is not None:
            return lost

        def consequence(rank: int) -> bool:
            return self.server.get(f"errors/{rank}/consequence") is not None

        if first.kind not in ("exit", "signal") or not consequence(first.rank):
            return first
        own = [w for w in self.workers
               if w.returncode not in (None, 0) and w.slot.rank != first.rank
               and self.server.get(f"errors/{w.slot.rank}") is not None
               and not consequence(w.slot.rank)]
        if not own:
            return first
        w = min(own, key=lambda x: x.exit_order if x.exit_order >= 0 else len(self.workers))
        rc = w.returncode
        if rc in (-signal.SIGTERM, -signal.SIGKILL):    # our stop overtook its own exit
            return Failure(w.slot.rank, w.slot.hostname, "error", rc,
                           detail="raised an error, and was stopped with the others")
        return Failure(w.slot.rank, w.slot.hostname, "signal" if rc < 0 else "exit", rc)

    def _lost_rank(self) -> Failure | None:
        """The rank the workers' failure causes (fuse.cluster.failure_cause) say was lost:
        found unanswering, or cut from a peer by the network; None when none says so."""
        hosts = {w.slot.rank: w.slot.hostname for w in self.workers}
        found = failure_cause.lost_rank(failure_cause.read_all(self.server), hosts)
        if found is None:
            return None
        rank, why = found
        return Failure(rank, hosts.get(rank, "?"), "lost", None, detail=why)

    # -- the loop's pieces (shared with the elastic driver) --------------------------------
    def open_loop(self) -> dict:
        """Sinks, the selector, the wake-up pipe and the signal handlers; returns the previous
        handlers for :meth:`close_loop`."""
        st = self.settings
        self._out_sink = _Sink(st.stdout or sys.stdout)
        self._err_sink = _Sink(st.stderr or sys.stderr)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        return self._install_signals()

    def wake(self) -> None:
        """Wake the loop from another thread."""
        try:
            os.write(self._wake_w, b"w")
        except OSError:
            pass

    def reap(self, w: WorkerRecord) -> int | None:
        """``w``'s exit code if it has just exited (recorded once), else None."""
        if not w.running:
            return None
        rc = w.proc.poll()
        if rc is None:
            return None
        w.returncode = rc
        w.exit_order = sum(x.exit_order >= 0 for x in self.workers)
        if w.pidfd is not None:
            self._sel.unregister(w.pidfd)
            os.close(w.pidfd)
            w.pidfd = None
        self.debug(f"rank {w.slot.rank} exited with {rc}")
        return rc

    def dispatch(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds and forward whatever output arrived."""
        for key, _ in self._sel.select(timeout):
            obj = key.data
            if obj is None:
                try:
                    os.read(self._wake_r, 512)
                except BlockingIOError:
                    pass
            elif isinstance(obj, _Stream):
                try:
                    data = os.read(obj.fd, 65536)
                except OSError:
                    data = b""
                if data:
                    obj.feed(data)
                else:
                    self._sel.unregister(obj.fd)
                    obj.close()
            # a WorkerRecord's pidfd: the exit is picked up by reap

    def close_loop(self, old_handlers: dict) -> None:
        # nothing outlives the job: signal each worker's group (its leader may be gone
        # while a grandchild still runs), then reap
        st = self.settings
        for w in self.workers:
            w.signal_group(signal.SIGKILL if w.running else signal.SIGTERM)
        for w in self.workers:
            if w.proc is not None:
                try:
                    w.proc.wait(timeout=st.grace_seconds)
                except subprocess.TimeoutExpired:
                    w.signal_group(signal.SIGKILL)
                    w.proc.wait()
                if w.returncode is None:
                    w.returncode = w.proc.poll()
                for s in w.streams:
                    if s.open:
                        s.close()
                for pipe in (w.proc.stdin, w.proc.stdout, w.proc.stderr):
                    if pipe is not None:
                        try:
                            pipe.close()
                        except OSError:
                            pass
                if w.pidfd is not None:
                    os.close(w.pidfd)
                    w.pidfd = None
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        self._sel.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> JobResult:
        """Start every worker, forward output until all have exited, and return the outcome.

        Blocks.  On the main thread it handles SIGINT, SIGTERM and SIGHUP itself (stopping the
        workers) and reports the signal in :attr:`JobResult.interrupted`.
        """
        old_handlers = self.open_loop()
        loop = _LoopState()
        try:
            self.workers = [WorkerRecord(s) for s in self.slots]
            failure = self._start_all()
            if failure is not None:
                self.say(f"rank {failure.rank}: {failure.what()}; stopping the job")
                self._stop_job(loop, failure, time.monotonic())
            have_pidfds = all(w.pidfd is not None for w in self.workers if w.proc)
            while True:
                now = time.monotonic()
                self._take_signals(loop, now)
                self._take_exits(loop, now)
                if not loop.stopping:
                    self._check_start_deadlines(loop, now)
                if loop.kill_at is not None and now >= loop.kill_at:
                    self.stop_all(signal.SIGKILL)
                    loop.kill_at = None
                timeout = self._next_wait(loop, now, 1.0 if have_pidfds else 0.05)
                if timeout is None:
                    break
                self.dispatch(timeout)
        finally:
            self.close_loop(old_handlers)
        return self._result(loop.failure, loop.interrupted)

    def _start_all(self) -> Failure | None:
        """Start every worker, unless a remote host cannot be reached; the first worker that
        could not be started (or the unreachable host) is the failure."""
        unreachable = self.unreachable_hosts() if self.remote_hosts else {}
        if unreachable:
            host = next(iter(unreachable))
            rank = next(s.rank for s in self.slots if s.hostname == host)
            return Failure(rank, host, "start", 255, detail="cannot reach " + "; ".join(
                f"{h} over ssh ({why})" for h, why in unreachable.items())
                + "; no worker was started")
        notice = self.budget_notice()
        if notice:
            self.say(notice)
        for w in self.workers:
            failure = self.start_worker(w)
            if failure is not None:
                return failure
            if self.pending_signals:
                break
        return None

    def _stop_job(self, loop: "_LoopState", failure: Failure | None, now: float) -> None:
        """Ask every worker to stop (SIGTERM), and insist (SIGKILL) after the grace time."""
        if failure is not None:
            loop.failure = failure
        self.stop_all(signal.SIGTERM)
        loop.stopping = True
        loop.kill_at = now + self.settings.grace_seconds

    def _take_signals(self, loop: "_LoopState", now: float) -> None:
        """The launcher's own signals: the first stops the job, a second kills it."""
        while self.pending_signals:
            sig = self.pending_signals.pop(0)
            if loop.interrupted is None and not loop.stopping:
                loop.interrupted = sig
                n = sum(w.running for w in self.workers)
                self.say(f"received {signal.Signals(sig).name}; stopping {n} workers")
                self._stop_job(loop, None, now)
            else:  # a second signal: no more patience
                loop.interrupted = loop.interrupted or sig
                self.stop_all(signal.SIGKILL)
                loop.kill_at = now

    def _take_exits(self, loop: "_LoopState", now: float) -> None:
        """Reap the workers that exited; the first to fail stops the others."""
        for w in self.workers:
            rc = self.reap(w)
            if rc is None or rc == 0 or loop.stopping:
                continue
            if w.remote and not w.started:
                failure = Failure(w.slot.rank, w.slot.hostname, "start", rc,
                                  detail=f"ssh to {w.slot.hostname} failed before the worker "
                                         f"started (ssh exit code {rc})")
            else:
                failure = Failure(w.slot.rank, w.slot.hostname,
                                  "signal" if rc < 0 else "exit", rc)
            others = sum(x.running for x in self.workers)
            self.say(f"rank {w.slot.rank} {failure.what()}; "
                      f"stopping the other {others} worker(s)")
            self._stop_job(loop, failure, now)

    def _check_start_deadlines(self, loop: "_LoopState", now: float) -> None:
        """A remote worker that has not started by its deadline fails the job."""
        for w in self.workers:
            if w.running and not w.started and now >= w.proc.start_deadline:
                failure = Failure(w.slot.rank, w.slot.hostname, "timeout",
                                  detail=f"did not start within {self.settings.start_timeout:g}"
                                         " s (--start-timeout / FUSE_START_TIMEOUT)")
                self.say(f"rank {w.slot.rank} on {w.slot.hostname} "
                          f"{failure.detail}; stopping the job")
                self._stop_job(loop, failure, now)
                return

    def _next_wait(self, loop: "_LoopState", now: float, longest: float) -> float | None:
        """How long the loop may wait for the next event, or None when the job is over (every
        worker exited and its output drained)."""
        live = [w for w in self.workers if w.running]
        if not live:
            if not any(s.open for w in self.workers for s in w.streams):
                return None
            if loop.drain_until is None:
                loop.drain_until = now + 2.0  # a grandchild may still hold a pipe
            elif now >= loop.drain_until:
                return None
        deadlines = [t for t in (loop.kill_at, loop.drain_until) if t is not None]
        deadlines += [w.proc.start_deadline for w in live if not w.started]
        if deadlines:
            return max(0.0, min(longest, min(deadlines) - now))
        return longest

    def _result(self, failure: Failure | None, interrupted: int | None) -> JobResult:
        """The outcome: every rank's exit code and, on failure, the root cause's own report."""
        exit_codes = {w.slot.rank: (w.returncode if w.proc else None) for w in self.workers}
        for s in self.slots:
            exit_codes.setdefault(s.rank, None)
        if failure is not None:
            failure = self._root_cause(failure)
            raw = self.server.get(f"errors/{failure.rank}")
            if raw:
                failure.error = raw.decode("utf-8", "replace")
            w = self.workers[failure.rank] if failure.rank < len(self.workers) else None
            if w is not None:
                failure.stderr_tail = w.tail()
            rc = failure.exit_code
        elif interrupted is not None:
            rc = 128 + interrupted
        else:
            rc = 0
        return JobResult(rc, exit_codes, failure, interrupted)
