"""The Spark side of :func:`fuse.spark.run_elastic`: what each task of the stage does.

A task is one slot of the elastic job, and a Spark job of its own (so that its failure fails
no other task).  It is a host of the driver's store (:class:`fuse.runner.store_hosts.HostLoop`,
keys under ``spark/elastic/``): it joins, raises a heartbeat, and each time the driver starts a
worker on it, runs ``python -m fuse.runner.run_task`` with the environment the driver gave (as
:func:`fuse.spark.run`'s tasks do), stops it when told to, and records how it ended.  It returns
when the driver says the job is over, and fails when its worker fails by itself, so that Spark
runs it again: a retried task is a new host, ``spark-task-<i>-<attempt>``.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Mapping

from fuse.cluster.store import HTTPStore
from fuse.runner.rank_process import RankProcess
from fuse.runner.store_hosts import HostKeys, HostLoop
from fuse.runner.worker_env import worker_env

__all__ = ["ElasticTaskPlan", "KEYS", "HOST_PREFIX", "task_host"]

KEYS = HostKeys("spark/elastic/")
HOST_PREFIX = "spark-task-"


def task_host(slot: int, attempt: int) -> str:
    return f"{HOST_PREFIX}{slot}-{attempt}"


class ElasticTaskPlan:
    """What every task gets from the driver (pickled with the task function)."""

    def __init__(self, addr: str, port: int, secret: bytes, env: Mapping[str, str] | None,
                 executable: str | None, prefix_timestamp: bool):
        self.addr, self.port, self.secret = addr, port, secret
        self.env = dict(env) if env is not None else None
        self.executable, self.prefix_timestamp = executable, prefix_timestamp

    def __call__(self, partition):
        """The task of slot ``i`` (its partition holds ``i``)."""
        from pyspark import TaskContext

        slot = next(iter(partition))
        host = task_host(slot, TaskContext.get().attemptNumber())
        store = HTTPStore(self.addr, self.port, secret=self.secret, timeout=30.0)
        loop = HostLoop(store, KEYS, host, {"hostname": socket.gethostname(), "slots": 1},
                        self._launch)
        loop.announce()
        failed = loop.run(one_at_a_time=True, leave_on_failure=True)
        if failed is not None:
            # The driver counts this host out; failing the task lets Spark run it again (as
            # many times as spark.task.maxFailures allows), and the new attempt joins the
            # job as a new host.
            raise RuntimeError(f"fuse.spark.run_elastic: the worker of {host} failed (exit "
                               f"code {failed}); its task fails so that Spark runs it again")
        yield host

    def _launch(self, request: dict, n: int) -> RankProcess:
        given = request["env"]
        base = dict(self.env if self.env is not None else os.environ)
        base.update(worker_env(given, base))
        command = [self.executable or sys.executable, "-m", "fuse.runner.run_task"]
        return RankProcess(command, base, int(given["FUSE_RANK"]), self.prefix_timestamp)
