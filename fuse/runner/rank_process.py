"""A rank's process started by something other than fuserun's job loop (a Spark task, an agent):
its output forwarded to ours, line by line, with fuserun's ``[rank]<stream>:`` prefix, the last
lines of its stderr kept for the failure's report, and its death tied to ours."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Mapping, Sequence

from .store_hosts import RunningWorker

__all__ = ["start_rank_process", "wait_rank_process", "forward_output", "RankProcess",
           "ForkedRank"]

_TAIL_LINES = 20


def start_rank_process(command: Sequence[str], env: Mapping[str, str], rank: int,
                       prefix_timestamp: bool = False
                       ) -> tuple[subprocess.Popen, list[threading.Thread], list[str]]:
    """``command`` with ``env``, its output forwarded to ours with a ``[rank]<stream>:``
    prefix; returns the process, the forwarding threads and the list that keeps the last lines
    of its stderr."""
    proc = subprocess.Popen(list(command), env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_die_with_parent)
    pumps, tail = forward_output(proc.stdout, proc.stderr, rank, prefix_timestamp)
    return proc, pumps, tail


def forward_output(stdout: IO[bytes], stderr: IO[bytes], rank: int,
                   prefix_timestamp: bool = False) -> tuple[list[threading.Thread], list[str]]:
    """Forward a rank's two pipes to ours (threads); returns them and the list that keeps the
    last lines of its stderr."""
    tail: list[str] = []
    pumps = [threading.Thread(target=_forward, args=(stdout, sys.stdout, rank,
                                                     "stdout", prefix_timestamp, None),
                              daemon=True),
             threading.Thread(target=_forward, args=(stderr, sys.stderr, rank,
                                                     "stderr", prefix_timestamp, tail),
                              daemon=True)]
    for pump in pumps:
        pump.start()
    return pumps, tail


def wait_rank_process(proc: subprocess.Popen, pumps: list[threading.Thread]) -> int:
    """Wait for the rank's process (killed if this task is being stopped meanwhile) and
    for its output; returns its exit code."""
    try:
        rc = proc.wait()
    finally:
        if proc.poll() is None:      # the task is being stopped: the rank goes with it
            proc.kill()
            proc.wait()
    for pump in pumps:
        pump.join(timeout=5.0)
    return rc


def _forward(pipe: IO[bytes], out: IO, rank: int, name: str, timestamps: bool,
             tail: list[str] | None) -> None:
    prefix = f"[{rank}]<{name}>:".encode()
    sink = getattr(out, "buffer", None)
    for line in iter(pipe.readline, b""):
        if tail is not None:
            tail.append(line.rstrip(b"\r\n").decode("utf-8", "replace"))
            del tail[:-_TAIL_LINES]
        stamp = time.strftime("%Y-%m-%d %H:%M:%S").encode() if timestamps else b""
        data = stamp + prefix + (line if line.endswith(b"\n") else line + b"\n")
        try:
            if sink is not None:
                sink.write(data)
                sink.flush()
            else:
                out.write(data.decode("utf-8", "replace"))
                out.flush()
        except (OSError, ValueError):
            pass
    pipe.close()


def _die_with_parent() -> None:
    """In the rank's process before exec: die when the process that started it does (Spark
    kills a task's Python worker to stop the task; an agent's pod is deleted), instead of
    training on alone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)       # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class RankProcess(RunningWorker):
    """A rank's process as a host of the store runs it (:class:`~.store_hosts.HostLoop`)."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], rank: int,
                 prefix_timestamp: bool = False):
        self.proc, self.pumps, self.tail = start_rank_process(command, env, rank,
                                                              prefix_timestamp)

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def finish(self) -> tuple[int, list[str]]:
        return wait_rank_process(self.proc, self.pumps), list(self.tail)


class ForkedRank(RunningWorker):
    """A rank's process forked by the agent's zygote (:mod:`fuse.runner.zygote`): not our child,
    so its end is read from the status pipe the zygote writes its exit code to."""

    def __init__(self, pid: int, stdout: IO[bytes], stderr: IO[bytes], status_fd: int,
                 rank: int):
        self.pid, self.status_fd = pid, status_fd
        self.returncode: int | None = None
        self.pumps, self.tail = forward_output(stdout, stderr, rank)
        os.set_blocking(status_fd, False)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                data = os.read(self.status_fd, 32)
            except BlockingIOError:
                return None
            self._ended(data)
        return self.returncode

    def _ended(self, data: bytes) -> None:
        # empty: the zygote died before it could say (its child dies with it): a kill
        self.returncode = int(data) if data.strip() else -signal.SIGKILL
        os.close(self.status_fd)

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def finish(self) -> tuple[int, list[str]]:
        if self.returncode is None:
            os.set_blocking(self.status_fd, True)
            self._ended(os.read(self.status_fd, 32))
        for pump in self.pumps:
            pump.join(timeout=5.0)
        return self.returncode, list(self.tail)
