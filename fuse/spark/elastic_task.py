"""The Spark side of :func:`fuse.spark.run_elastic`: what each task of the stage does.

A task is one slot of the elastic job, and a Spark job of its own (so that its failure fails
no other task).  It says it is there (its host, then a heartbeat
every second) and waits for the driver: each time the driver starts a worker on it, the task
runs ``python -m fuse.runner.run_task`` with the environment the driver gave (as
:func:`fuse.spark.run`'s tasks do), stops it when told to, and records how it ended.  It
returns when the driver says the job is over.  What the keys hold:

* ``spark/elastic/host/<task>``: the task's host; ``spark/elastic/alive/<task>``: a counter
  the task raises every second (the driver notices when it stops moving);
* ``spark/elastic/start/<task>``: JSON ``{"n": start number, "env": {...}}`` from the driver;
* ``spark/elastic/stop/<task>/<n>`` from the driver, ``spark/elastic/exit/<task>/<n>``
  (the exit code) and ``spark/elastic/tail/<task>/<n>`` (the last stderr lines) from the task;
* ``spark/elastic/done``: the job is over; every task returns.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Mapping

from fuse.cluster.store import HTTPStore
from fuse.runner.worker_env import worker_env

from .task import start_rank_process, wait_rank_process

__all__ = ["ElasticTaskPlan"]

HOST_KEY = "spark/elastic/host/{task}"
ALIVE_KEY = "spark/elastic/alive/{task}"
ALIVE_PREFIX = "spark/elastic/alive/"
START_KEY = "spark/elastic/start/{task}"
STOP_KEY = "spark/elastic/stop/{task}/{n}"
EXIT_KEY = "spark/elastic/exit/{task}/{n}"
TAIL_KEY = "spark/elastic/tail/{task}/{n}"
DONE_KEY = "spark/elastic/done"

HEARTBEAT_SECONDS = 1.0
_POLL_SECONDS = 0.1


class ElasticTaskPlan:
    """What every task gets from the driver (pickled with the task function)."""

    def __init__(self, addr: str, port: int, secret: bytes, env: Mapping[str, str] | None,
                 executable: str | None, prefix_timestamp: bool):
        self.addr, self.port, self.secret = addr, port, secret
        self.env = dict(env) if env is not None else None
        self.executable, self.prefix_timestamp = executable, prefix_timestamp

    def __call__(self, partition):
        """The task of slot ``i`` (its partition holds ``i``); a retried task is a new task,
        ``<i>-<attempt>``, which the driver sees as a new host."""
        from pyspark import TaskContext

        slot = next(iter(partition))
        index = f"{slot}-{TaskContext.get().attemptNumber()}"
        store = HTTPStore(self.addr, self.port, secret=self.secret, timeout=30.0)
        store.set(HOST_KEY.format(task=index), socket.gethostname().encode())
        beat = _Heartbeat(store, index)
        ran = -1
        while store.try_get(DONE_KEY) is None:
            beat.tick()
            raw = store.try_get(START_KEY.format(task=index))
            if raw is not None:
                request = json.loads(raw.decode())
                if request["n"] > ran:
                    ran = request["n"]
                    self._run_worker(store, beat, index, ran, request["env"])
                    continue
            time.sleep(_POLL_SECONDS)
        yield index

    def _run_worker(self, store: HTTPStore, beat: "_Heartbeat", index: str, n: int,
                    given: Mapping[str, str]) -> None:
        base = dict(self.env if self.env is not None else os.environ)
        base.update(worker_env(given, base))
        proc, pumps, tail = start_rank_process(self, base, int(given["FUSE_RANK"]))
        stop = STOP_KEY.format(task=index, n=n)
        while proc.poll() is None:
            beat.tick()
            if store.try_get(stop) is not None or store.try_get(DONE_KEY) is not None:
                proc.kill()
                break
            time.sleep(_POLL_SECONDS)
        rc = wait_rank_process(proc, pumps)
        if rc != 0 and tail:
            store.set(TAIL_KEY.format(task=index, n=n), "\n".join(tail).encode())
        store.set(EXIT_KEY.format(task=index, n=n), str(rc).encode())


class _Heartbeat:
    def __init__(self, store: HTTPStore, index: str):
        self.store, self.key = store, ALIVE_KEY.format(task=index)
        self.count, self.last = 0, 0.0

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last >= HEARTBEAT_SECONDS:
            self.count += 1
            self.last = now
            self.store.set(self.key, str(self.count).encode())
