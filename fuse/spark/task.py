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

import os
import signal
import sys
import time
from typing import Mapping, Sequence

from fuse.cluster.store import HTTPStore
from fuse.runner.rank_process import start_rank_process, wait_rank_process
from fuse.runner.worker_env import job_env, slots_for_hosts, worker_env

__all__ = ["TaskPlan", "run_rank"]

STARTED_KEY = "spark/started/{rank}"   # set once the rank's process runs
EXIT_KEY = "spark/exit/{rank}"      # "<returncode> <time> <host>" when the rank's process ended
FAILED_KEY = "spark/failed"         # set by the first task whose rank failed
TAIL_KEY = "spark/stderr_tail/{rank}"


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


def _command(plan) -> list[str]:
    """The rank's process: the worker of ``fuse.run``, which fetches the function from the
    driver's store and leaves its result there."""
    return [plan.executable or sys.executable, "-m", "fuse.runner.run_task"]


def run_rank(plan: TaskPlan, slot, store: HTTPStore) -> int:
    """Start the rank's process, forward its output, wait for it; record and return its
    exit code."""
    base = dict(plan.env if plan.env is not None else os.environ)
    base.update(worker_env(job_env(slot, plan.addr, plan.port, plan.secret, plan.nics), base))
    proc, pumps, tail = start_rank_process(_command(plan), base, slot.rank,
                                           plan.prefix_timestamp)
    store.set(STARTED_KEY.format(rank=slot.rank), b"1")
    rc = wait_rank_process(proc, pumps)
    store.set(EXIT_KEY.format(rank=slot.rank), f"{rc} {time.time()!r} {slot.hostname}".encode())
    if rc != 0 and tail:
        store.set(TAIL_KEY.format(rank=slot.rank), "\n".join(tail).encode())
    return rc


def _signame(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({sig})"
    except ValueError:
        return str(sig)
