"""``fuse.spark.run_elastic``: an elastic fuse job whose slots are the tasks of a Spark stage.

The driver is fuse's elastic driver (:class:`fuse.runner.elastic.driver.ElasticJob`); what
Spark changes:

* each of the ``max_num_proc`` slots is a Spark job of one task, so that one task's failure
  fails no other; each task is a host of its own to the driver (``spark-task-<i>-<attempt>``),
  so that a lost task (its rank's process killed, or the task itself gone) blacklists that task
  only, the job re-forms with the others, and a task Spark retries joins as a new host;
* the tasks are hosts of the driver's store (:mod:`fuse.runner.store_hosts`, as fuse's agents
  are): the driver's discovery is the tasks that answer (:class:`SparkTaskDiscovery`, by their
  heartbeats), and its starter asks a task to start its worker (:mod:`fuse.spark.elastic_task`).

Results and errors come back through the store, as with :func:`fuse.spark.run`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from typing import Any, Callable, Mapping, Sequence

from fuse.runner._payload import FUNC_KEY, PATH_KEY, RESULT_KEY, sign, verify
from fuse.runner.api import WorkerError, raise_reported_error
from fuse.runner.elastic.driver import ElasticJob, ElasticJobError, ElasticSettings
from fuse.runner.elastic.launch import elastic_timeout as _elastic_timeout
from fuse.runner.job import Settings
from fuse.runner.store_hosts import StoreHostDiscovery, StoreHostStarter

from .elastic_task import HOST_PREFIX, KEYS, ElasticTaskPlan, task_host

__all__ = ["run_elastic", "SparkTaskDiscovery"]

STALE_SECONDS = 10.0        # a task whose heartbeat has not moved this long is gone


def _order(host: str) -> tuple[int, int]:
    slot, attempt = host[len(HOST_PREFIX):].split("-")
    return int(slot), int(attempt)


class SparkTaskDiscovery(StoreHostDiscovery):
    """The tasks of the stage that answer, one slot each, in the order of their slots."""

    def __init__(self, stale_after: float = STALE_SECONDS):
        super().__init__(KEYS, stale_after, "the Spark tasks")
        self.ended: set[int] = set()        # slots whose Spark job is over (failed, say)

    def slot_ended(self, slot: int) -> None:
        """The Spark job of ``slot`` is over: its task answers no more, whatever its beat."""
        self.ended.add(slot)

    def order(self, host: str):
        return _order(host)

    def alive(self, host: str) -> bool:
        slot, attempt = _order(host)
        if slot in self.ended or \
                self.server.get(KEYS.host(task_host(slot, attempt + 1))) is not None:
            return False        # its job is over, or Spark retries its task: it is gone
        return super().alive(host)


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
    from .runner import start_timeout_seconds, store_address_for

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
    settings = Settings(name="fuse.spark", verbose=verbose >= 2, network_interfaces=nics)
    discovery = SparkTaskDiscovery()
    starter = StoreHostStarter(discovery)
    with ElasticJob(["<fuse.spark task>"], discovery, elastic, settings=settings,
                    store_addr=store_address_for(sc, nics), starter=starter,
                    hosts_join_later=True) as job:
        key = job.secret
        job.server.put(PATH_KEY, json.dumps([p for p in sys.path if p]).encode())
        job.server.put(FUNC_KEY, sign(key, cloudpickle.dumps(
            (fn, tuple(args), dict(kwargs or {})))))
        plan = ElasticTaskPlan(job.addr, job.port, key, env, None, prefix_output_with_timestamp)
        stage = _Stage(sc, plan, high, discovery)
        try:
            try:
                job.wait_for_hosts(start_timeout_seconds(start_timeout),
                                   "(start_timeout); does the cluster have enough free task "
                                   "slots?")
            except ElasticJobError as err:
                raise TimeoutError(f"fuse.spark.run_elastic: {err}") from None
            result = job.run()
        finally:
            starter.finish()
            stage.finish()
        job.raise_for(result, lambda text: WorkerError(text, -1), stage.error)
        return _results(job, stage)


def _results(job: ElasticJob, stage: "_Stage") -> list[Any]:
    """The results of the last generation's ranks, in rank order (a rank's error raised)."""
    import cloudpickle

    from .runner import first_line

    size = len(job.plan)

    def load(rank: int):
        blob = job.server.get(RESULT_KEY.format(rank=rank))
        if blob is None:
            return None
        return cloudpickle.loads(verify(job.secret, blob, f"the result of rank {rank}"))

    results = []
    for rank in range(size):
        raise_reported_error(load, rank, size, None, prefix="fuse.spark: ",
                             raised_by="fuse.spark")
        payload = load(rank)
        if payload is None:
            raise WorkerError(f"fuse.spark: rank {rank} of the last generation ended "
                              "without a result" + (f" ({first_line(stage.error)})"
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
