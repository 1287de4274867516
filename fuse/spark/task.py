"""The Spark side of :func:`fuse.spark.run`: what each barrier task does on its executor.

A task learns where every task of the stage runs (``BarrierTaskContext.getTaskInfos``), so each
computes the same ranks (:func:`fuse.runner.worker_env.slots_for_hosts`) without asking the
driver.  It then starts its rank as a process of its own, ``python -m fuse.runner.run_task``
(the worker of ``fuse.run``, which fetches the function from the driver's store and leaves its
result there), forwards the process's output with a ``[rank]<stream>:`` prefix, and records how
it ended in the store.  A rank that fails fails its task, and so the barrier stage: Spark then
stops the other tasks, whose rank processes die with them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Mapping, Sequence

from fuse.cluster.store import HTTPStore
from fuse.runner.worker_env import job_env, slots_for_hosts, worker_env

__all__ = ["TaskPlan", "run_rank"]

STARTED_KEY = "spark/started/{rank}"   # set once the rank's process runs
EXIT_KEY = "spark/exit/{rank}"      # "<returncode> <time> <host>" when the rank's process ended
FAILED_KEY = "spark/failed"         # set by the first task whose rank failed
TAIL_KEY = "spark/stderr_tail/{rank}"
_TAIL_LINES = 20


class TaskPlan:
    """What every task gets from the driver (pickled with the task function): where the store
    is, the job's secret, and how to start a rank."""

    def __init__(self, addr: str, port: int, secret: bytes, num_proc: int,
                 env: Mapping[str, str] | None, executable: str | None,
                 nics: Sequence[str] | None, prefix_timestamp: bool):
        self.addr, self.port, self.secret, self.num_proc = addr, port, secret, num_proc
        self.env = dict(env) if env is not None else None
        self.executable, self.nics, self.prefix_timestamp = executable, nics, prefix_timestamp

    def __call__(self, partition):
        """The barrier stage's function: one task, one rank."""
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        store = HTTPStore(self.addr, self.port, secret=self.secret, timeout=30.0)
        if store.try_get(FAILED_KEY) is not None:
            # Spark retries a failed barrier stage; a fuse job is not restartable that way
            raise RuntimeError("fuse.spark: the job failed already (see the first attempt's "
                               "error); not running it again")
        hosts = [info.address.rsplit(":", 1)[0] for info in ctx.getTaskInfos()]
        if len(hosts) != self.num_proc:
            raise RuntimeError(f"fuse.spark: the barrier stage has {len(hosts)} tasks, the job "
                               f"{self.num_proc} ranks")
        slot = slots_for_hosts(hosts)[ctx.partitionId()]
        rc = run_rank(self, slot, store)
        if rc != 0:
            store.set(FAILED_KEY, str(slot.rank).encode())
            how = (f"was killed by signal {_signame(-rc)}" if rc < 0 else f"exited with code {rc}")
            raise RuntimeError(f"fuse.spark: rank {slot.rank} (partition {ctx.partitionId()}, "
                               f"host {slot.hostname}) {how}")
        yield slot.rank


def run_rank(plan: TaskPlan, slot, store: HTTPStore) -> int:
    """Start the rank's process, forward its output, wait for it; record and return its
    exit code."""
    base = dict(plan.env if plan.env is not None else os.environ)
    base.update(worker_env(job_env(slot, plan.addr, plan.port, plan.secret, plan.nics), base))
    proc, pumps, tail = start_rank_process(plan, base, slot.rank)
    store.set(STARTED_KEY.format(rank=slot.rank), b"1")
    rc = wait_rank_process(proc, pumps)
    store.set(EXIT_KEY.format(rank=slot.rank), f"{rc} {time.time()!r} {slot.hostname}".encode())
    if rc != 0 and tail:
        store.set(TAIL_KEY.format(rank=slot.rank), "\n".join(tail).encode())
    return rc


def start_rank_process(plan: TaskPlan, env: Mapping[str, str], rank: int
                       ) -> tuple[subprocess.Popen, list[threading.Thread], list[str]]:
    """``python -m fuse.runner.run_task`` with ``env``, its output forwarded with a
    ``[rank]<stream>:`` prefix; returns the process, the forwarding threads and the list that
    keeps the last lines of its stderr."""
    command = [plan.executable or sys.executable, "-m", "fuse.runner.run_task"]
    proc = subprocess.Popen(command, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_die_with_parent)
    tail: list[str] = []
    pumps = [threading.Thread(target=_forward, args=(proc.stdout, sys.stdout, rank,
                                                     "stdout", plan.prefix_timestamp, None),
                              daemon=True),
             threading.Thread(target=_forward, args=(proc.stderr, sys.stderr, rank,
                                                     "stderr", plan.prefix_timestamp, tail),
                              daemon=True)]
    for pump in pumps:
        pump.start()
    return proc, pumps, tail


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
    """In the rank's process before exec: die when the task's Python worker does (Spark kills
    it to stop a task), instead of training on alone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)       # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _signame(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({sig})"
    except ValueError:
        return str(sig)
