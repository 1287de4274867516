"""``fuse.spark.run_elastic``: an elastic fuse job whose slots are the tasks of a Spark stage.

The driver is fuse's elastic driver (:class:`fuse.runner.elastic.driver.ElasticJob`); what
Spark changes:

* each of the ``max_num_proc`` slots is a Spark job of one task, so that one task's failure
  fails no other; each task is a host of its own to the driver (``spark-task-<i>-<attempt>``),
  so that a lost task (its rank's process killed, or the task itself gone) blacklists that task
  only, the job re-forms with the others, and a task Spark retries joins as a new host;
* the driver's discovery is the tasks that answer (:class:`SparkTaskDiscovery`, by their
  heartbeats in the store), and a worker is started by asking its task to start it
  (:mod:`fuse.spark.elastic_task`).

Results and errors come back through the store, as with :func:`fuse.spark.run`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Callable, Mapping, Sequence

from fuse.runner._payload import FUNC_KEY, PATH_KEY, RESULT_KEY, sign, verify
from fuse.runner.api import WorkerError, raise_reported_error
from fuse.runner.elastic.driver import ElasticJob, ElasticSettings
from fuse.runner.elastic.launch import elastic_timeout as _elastic_timeout
from fuse.cluster.hosts import HostSpec, Slot
from fuse.runner.job import Failure, Settings, _Worker
from fuse.runner.worker_env import job_env

from . import elastic_task as keys
from .elastic_task import ElasticTaskPlan

__all__ = ["run_elastic", "SparkTaskDiscovery", "SparkElasticJob"]

HOST_PREFIX = "spark-task-"
STALE_SECONDS = 10.0        # a task whose heartbeat has not moved this long is gone


def task_host(task: str) -> str:
    return f"{HOST_PREFIX}{task}"


def task_of(host: str) -> str:
    return host[len(HOST_PREFIX):]


def _order(task: str) -> tuple[int, int]:
    slot, attempt = task.split("-")
    return int(slot), int(attempt)


class SparkTaskDiscovery:
    """The tasks of the stage that answer, one slot each.  ``attach`` gives it the store."""

    def __init__(self, stale_after: float = STALE_SECONDS):
        self.stale_after = stale_after
        self.server = None
        self.ended: set[int] = set()        # slots whose Spark job is over (failed, say)
        self._seen: dict[str, tuple[bytes, float]] = {}    # task -> (beat, when it changed)
        self._lock = threading.Lock()

    def attach(self, server) -> None:
        self.server = server

    def describe(self) -> str:
        return "the Spark tasks"

    def slot_ended(self, slot: int) -> None:
        """The Spark job of ``slot`` is over: its task answers no more, whatever its beat."""
        self.ended.add(slot)

    def alive(self, index: str) -> bool:
        slot, attempt = _order(index)
        if slot in self.ended or \
                self.server.get(keys.HOST_KEY.format(task=f"{slot}-{attempt + 1}")) is not None:
            return False        # its job is over, or Spark retries its task: it is gone
        beat = self.server.get(keys.ALIVE_KEY.format(task=index))
        if beat is None:
            return False
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(index)
            if last is None or last[0] != beat:
                self._seen[index] = (beat, now)
                return True
            return now - last[1] < self.stale_after

    def find(self) -> list[HostSpec]:
        if self.server is None:
            return []
        tasks = sorted((k.rsplit("/", 1)[1] for k in self.server.keys(keys.ALIVE_PREFIX)),
                       key=_order)
        return [HostSpec(task_host(i), 1) for i in tasks if self.alive(i)]


class _TaskProcess:
    """A worker started in a Spark task, seen as the process the elastic driver expects."""

    stdin = stdout = stderr = None
    pid = None

    def __init__(self, server, discovery: SparkTaskDiscovery, index: str, n: int):
        self.server, self.discovery, self.index, self.n = server, discovery, index, n
        self.returncode: int | None = None
        self.why: str | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            raw = self.server.get(keys.EXIT_KEY.format(task=self.index, n=self.n))
            if raw is not None:
                self.returncode = int(raw.decode())
            elif not self.discovery.alive(self.index):
                self.why = (f"its Spark task {self.index} ended or stopped answering (for "
                            f"{self.discovery.stale_after:g} s)")
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"spark task {self.index}", timeout)
            time.sleep(0.05)
        return self.returncode

    def kill(self) -> None:
        self.server.put(keys.STOP_KEY.format(task=self.index, n=self.n), b"1")


class _TaskWorker(_Worker):
    def signal_group(self, sig: int) -> None:
        if self.proc is not None:       # the task stops its process when told
            self.proc.kill()


class SparkElasticJob(ElasticJob):
    """An elastic job on the tasks :class:`SparkTaskDiscovery` finds."""

    def __init__(self, discovery: SparkTaskDiscovery, elastic: ElasticSettings, store_addr: str,
                 nics: Sequence[str] | None, settings: Settings):
        self.nics = list(nics) if nics else None
        self._starts: dict[str, int] = {}       # task -> how many workers it was asked to start
        super().__init__(["<fuse.spark task>"], discovery, elastic, env=None, settings=settings,
                         store_addr=store_addr)
        discovery.attach(self.server)

    def _first_hosts(self) -> list[HostSpec]:
        return []       # the tasks start after the store does: see wait_for_tasks

    def wait_for_tasks(self, timeout: float) -> None:
        """Wait for the slots needed to start (``num_proc``), up to ``timeout`` seconds."""
        need = self.elastic.start_np or self.elastic.min_np
        deadline = time.monotonic() + timeout
        while len(self.discovery.find()) < need:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"fuse.spark.run_elastic: {len(self.discovery.find())} of the {need} tasks "
                    f"needed started within {timeout:g} s (start_timeout); does the cluster "
                    "have enough free task slots?")
            time.sleep(0.1)
        self.hosts = self.discovery.find()

    def _is_local(self, host: str) -> bool:
        return True         # Spark starts the tasks: nothing is started over ssh

    def budget_notice(self) -> str | None:
        return None         # each task computes its own host's budget (worker_env)

    def _new_worker(self, slot: Slot) -> _Worker:
        return _TaskWorker(slot, remote=False)

    def _start(self, w: _Worker) -> Failure | None:
        index = task_of(w.slot.hostname)
        n = self._starts[index] = self._starts.get(index, -1) + 1
        env = job_env(w.slot, self.addr, self.port, self.secret, self.nics)
        env.update({k: self.base_env[k] for k in ("FUSE_ELASTIC", "FUSE_ELASTIC_TIMEOUT")})
        self.server.put(keys.START_KEY.format(task=index),
                        json.dumps({"n": n, "env": env}).encode())
        w.proc = _TaskProcess(self.server, self.discovery, index, n)
        self._debug(f"rank {w.slot.rank}: Spark task {index} (start {n})")
        return None

    def _tail(self, w: _Worker) -> list[str]:
        proc = w.proc
        if proc is None:
            return []
        if proc.why:
            return [proc.why]
        raw = self.server.get(keys.TAIL_KEY.format(task=proc.index, n=proc.n))
        return raw.decode("utf-8", "replace").splitlines() if raw else []


def run_elastic(fn: Callable[..., Any], args: Sequence[Any] = (),
                kwargs: Mapping[str, Any] | None = None, num_proc: int | None = None,
                min_num_proc: int | None = None, max_num_proc: int | None = None,
                start_timeout: float | None = None, elastic_timeout: float | None = None,
                reset_limit: int | None = None, env: Mapping[str, str] | None = None,
                stdout=None, stderr=None, verbose: int = 1,
                nics: Sequence[str] | str | None = None,
                prefix_output_with_timestamp: bool = False) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` as an elastic job on Spark tasks (``horovod.spark.run_elastic``'s
    arguments) and return the results of the last generation's ranks, in rank order.  ``fn``
    should train under ``fuse.<framework>.elastic.run``.

    The stage has ``max_num_proc`` tasks (default ``num_proc``, whose default is
    ``spark.default.parallelism``); training starts once ``num_proc`` of them run (within
    ``start_timeout``, as for :func:`fuse.spark.run`) and goes on while at least
    ``min_num_proc`` (default ``num_proc``) do.  A task whose rank fails (its process
    killed, or the task lost) leaves the job; the others re-form without it.  ``elastic_timeout``
    (default ``FUSE_ELASTIC_TIMEOUT``/``HOROVOD_ELASTIC_TIMEOUT``, else 600 s) bounds the wait
    for ``min_num_proc`` slots, ``reset_limit`` the number of re-formations.  ``env``,
    ``stdout``, ``stderr``, ``verbose``, ``nics`` and ``prefix_output_with_timestamp`` are as
    for :func:`fuse.spark.run`.
    """
    from pyspark import SparkContext
    import cloudpickle

    from .preflight import check_workers_import_fuse
    from .runner import _first_line, _start_timeout, _store_address

    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("fuse.spark.run_elastic needs an active SparkContext: create a "
                           "SparkSession (or SparkContext) first")
    n = sc.defaultParallelism if num_proc is None else int(num_proc)
    low = n if min_num_proc is None else int(min_num_proc)
    high = n if max_num_proc is None else int(max_num_proc)
    if not 1 <= low <= n <= high:
        raise ValueError(f"need 1 <= min_num_proc ({low}) <= num_proc ({n}) <= max_num_proc "
                         f"({high})")
    if reset_limit is not None and reset_limit < 0:
        raise ValueError(f"reset_limit must be at least 0, got {reset_limit}")
    if isinstance(nics, str):
        nics = [x.strip() for x in nics.split(",") if x.strip()]
    check_workers_import_fuse(sc, n, "fuse.spark.run_elastic")
    elastic = ElasticSettings(min_np=low, max_np=high, start_np=n, reset_limit=reset_limit,
                              elastic_timeout=_elastic_timeout(elastic_timeout))
    settings = Settings(name="fuse.spark", verbose=verbose >= 2)
    discovery = SparkTaskDiscovery()
    with SparkElasticJob(discovery, elastic, _store_address(sc, nics), nics, settings) as job:
        key = job.secret
        job.server.put(PATH_KEY, json.dumps([p for p in sys.path if p]).encode())
        job.server.put(FUNC_KEY, sign(key, cloudpickle.dumps(
            (fn, tuple(args), dict(kwargs or {})))))
        plan = ElasticTaskPlan(job.addr, job.port, key, env, None, prefix_output_with_timestamp)
        stage = _Stage(sc, plan, high, discovery)
        try:
            job.wait_for_tasks(_start_timeout(start_timeout))
            result = job.run()
        finally:
            job.server.put(keys.DONE_KEY, b"1")
            stage.finish()
        if result.interrupted == signal.SIGINT:
            raise KeyboardInterrupt
        if result.elastic_error is not None or result.interrupted is not None:
            text = (job.describe_failure(result) if result.elastic_error
                    else f"fuse.spark: interrupted by signal {result.interrupted}")
            raise WorkerError(text, -1) from stage.error
        size = len(job.plan)

        def load(rank: int):
            blob = job.server.get(RESULT_KEY.format(rank=rank))
            if blob is None:
                return None
            return cloudpickle.loads(verify(key, blob, f"the result of rank {rank}"))

        results = []
        for rank in range(size):
            raise_reported_error(load, rank, size, None, prefix="fuse.spark: ",
                                 raised_by="fuse.spark")
            payload = load(rank)
            if payload is None:
                raise WorkerError(f"fuse.spark: rank {rank} of the last generation ended "
                                  "without a result" + (f" ({_first_line(stage.error)})"
                                                        if stage.error else ""), rank)
            results.append(payload[1])
    return results


class _Stage:
    """The slots' Spark jobs, one task each, each run from a thread of its own for as long as
    the elastic job runs."""

    def __init__(self, sc, plan: ElasticTaskPlan, tasks: int, discovery: SparkTaskDiscovery):
        self.sc, self.discovery = sc, discovery
        self.group = f"fuse-spark-elastic-{uuid.uuid4().hex[:12]}"
        self.error: BaseException | None = None     # the first slot's job that failed
        self._threads = [threading.Thread(target=self._run, args=(plan, slot, tasks),
                                          daemon=True, name=f"fuse-spark-slot-{slot}")
                         for slot in range(tasks)]
        for thread in self._threads:
            thread.start()

    def _run(self, plan: ElasticTaskPlan, slot: int, tasks: int) -> None:
        try:
            self.sc.setJobGroup(self.group, f"fuse.spark.run_elastic: slot {slot} of {tasks}",
                                interruptOnCancel=True)
            self.sc.parallelize([slot], 1).mapPartitions(plan).collect()
        except BaseException as err:        # reported by the caller's thread
            if self.error is None:
                self.error = err
        finally:
            self.discovery.slot_ended(slot)     # a failed task's rank is lost at once

    def finish(self, timeout: float = 30.0) -> None:
        """Wait for the tasks to return (they do once the job is over); cancel them after
        ``timeout`` seconds (a task still waiting for a free slot, say)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            self.sc.cancelJobGroup(self.group)
            for thread in self._threads:
                thread.join(30.0)
