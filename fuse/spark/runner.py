"""``fuse.spark.run``: a fuse job as one Spark barrier stage, as ``horovod.spark.run`` runs it.

The driver keeps the rendezvous store (with the job's secret) and the pickled function in it;
a barrier stage of ``num_proc`` tasks starts one rank each (:mod:`fuse.spark.task`), ranks
grouped by the executors' hosts.  Results and errors come back through the store, as with
:func:`fuse.run`, whose worker the ranks run.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, Callable, Mapping, Sequence

from fuse.runner._payload import FUNC_KEY, PATH_KEY, RESULT_KEY, sign, verify
from fuse.runner.api import WorkerError, raise_reported_error
from fuse.cluster.hosts import first_interface_address
from fuse.runner.job import Failure
from fuse.runner.worker_env import DriverStore, root_cause

from .preflight import check_workers_import_fuse
from .task import EXIT_KEY, STARTED_KEY, TAIL_KEY, TaskPlan

__all__ = ["run"]

_DEFAULT_START_TIMEOUT = 600.0      # Horovod's default for Spark (HOROVOD_SPARK_START_TIMEOUT)


def run(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
        num_proc: int | None = None, start_timeout: float | None = None,
        use_mpi: bool | None = None, use_gloo: bool | None = None,
        extra_mpi_args: str | None = None, env: Mapping[str, str] | None = None,
        stdout=None, stderr=None, verbose: int = 1, nics: Sequence[str] | str | None = None,
        prefix_output_with_timestamp: bool = False, executable: str | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_proc`` ranks, one Spark task each (a barrier
    stage of the active SparkContext), and return the results in rank order.  The arguments
    are ``horovod.spark.run``'s.

    ``num_proc`` defaults to ``spark.default.parallelism``.  ``start_timeout`` (default
    ``FUSE_SPARK_START_TIMEOUT``/``HOROVOD_SPARK_START_TIMEOUT``, else 600 s) bounds the wait
    for every task to start its rank.  ``env`` is the ranks' whole environment (default: the
    executor's); ``executable`` the Python they run (default: the executor's).  The ranks'
    output goes to the executors' stdout and stderr, each line prefixed with its rank;
    ``stdout``, ``stderr`` and ``verbose`` are accepted for compatibility and unused.  fuse
    always runs on Gloo here: ``use_mpi=True`` and ``extra_mpi_args`` raise.

    A rank that fails fails the stage; this raises its own exception (chained from a
    :class:`~fuse.runner.api.WorkerError` with the rank) or, for a rank that died without
    raising, a ``WorkerError`` saying how it ended.
    """
    if use_mpi or extra_mpi_args:
        raise NotImplementedError("fuse.spark.run runs on Gloo only; drop use_mpi and "
                                  "extra_mpi_args")
    from pyspark import SparkContext
    import cloudpickle

    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("fuse.spark.run needs an active SparkContext: create a SparkSession "
                           "(or SparkContext) first")
    n = sc.defaultParallelism if num_proc is None else int(num_proc)
    if n < 1:
        raise ValueError(f"num_proc must be at least 1, got {n}")
    # the tasks run fuse's code in Spark's Python worker, whatever Python the ranks run
    check_workers_import_fuse(sc, n, "fuse.spark.run")
    if isinstance(nics, str):
        nics = [x.strip() for x in nics.split(",") if x.strip()]
    timeout = start_timeout_seconds(start_timeout)

    store = DriverStore(store_address_for(sc, nics))
    try:
        key = store.secret
        store.server.put(PATH_KEY, json.dumps([p for p in sys.path if p]).encode())
        store.server.put(FUNC_KEY, sign(key, cloudpickle.dumps(
            (fn, tuple(args), dict(kwargs or {})))))
        plan = TaskPlan(store.addr, store.port, key, n, env, executable, nics,
                        prefix_output_with_timestamp)
        error = _run_stage(sc, plan, n, timeout, store)
        return _outcome(store, n, key, error)
    finally:
        store.close()


def start_timeout_seconds(value: float | None) -> float:
    if value is not None:
        return float(value)
    for name in ("FUSE_SPARK_START_TIMEOUT", "HOROVOD_SPARK_START_TIMEOUT"):
        if os.environ.get(name, "").strip():
            return float(os.environ[name])
    return _DEFAULT_START_TIMEOUT


def store_address_for(sc, nics: Sequence[str] | None) -> str:
    """Where the executors reach the driver: loopback for a local master, else the address
    of the first of ``nics``, else spark.driver.host's."""
    if nics:
        return first_interface_address(nics, "fuse.spark.run")
    if sc.master.startswith("local"):
        return "127.0.0.1"
    host = sc.getConf().get("spark.driver.host") or socket.gethostname()
    return socket.gethostbyname(host)


def _run_stage(sc, plan: TaskPlan, n: int, timeout: float, store: DriverStore
               ) -> BaseException | None:
    """Run the barrier stage; return the exception it failed with (None when it succeeded).
    Cancels it when not every rank has started within ``timeout`` seconds."""
    group = f"fuse-spark-{uuid.uuid4().hex[:12]}"
    outcome: dict[str, Any] = {}

    def stage() -> None:
        try:
            sc.setJobGroup(group, f"fuse.spark.run: {n} ranks", interruptOnCancel=True)
            rdd = sc.parallelize(range(n), n).barrier().mapPartitions(plan)
            outcome["ranks"] = rdd.collect()
        except BaseException as err:        # reported by the caller's thread
            outcome["error"] = err

    thread = threading.Thread(target=stage, name="fuse-spark-stage", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while thread.is_alive():
        thread.join(0.5)
        if thread.is_alive() and time.monotonic() > deadline and not _all_started(store, n):
            sc.cancelJobGroup(group)
            thread.join(60.0)
            return TimeoutError(
                f"fuse.spark.run: not all {n} ranks started within {timeout:g} s "
                "(start_timeout); does the cluster have enough free task slots?")
    return outcome.get("error")


def _all_started(store: DriverStore, n: int) -> bool:
    return all(store.server.get(STARTED_KEY.format(rank=r)) is not None for r in range(n))


def _outcome(store: DriverStore, n: int, key: bytes, error: BaseException | None) -> list:
    server = store.server

    def load(rank: int):
        blob = server.get(RESULT_KEY.format(rank=rank))
        if blob is None:
            return None
        import cloudpickle
        return cloudpickle.loads(verify(key, blob, f"the result of rank {rank}"))

    exits = {}
    for rank in range(n):
        raw = server.get(EXIT_KEY.format(rank=rank))
        if raw:
            rc, when, host = raw.decode().split(" ", 2)
            exits[rank] = (int(rc), float(when), host)
    failed = sorted((r for r, (rc, _, _) in exits.items() if rc != 0), key=lambda r: exits[r][1])
    # A rank that raised may not have ended by itself: the stage stops every task once one
    # fails, and that may be a peer that failed only because of it.  Its error counts too.
    failed += [r for r in range(n) if r not in failed and server.get(f"errors/{r}") is not None]
    if failed:
        rank = root_cause(failed, server)
        raise_reported_error(load, rank, n, exits.get(rank, (None,))[0], prefix="fuse.spark: ",
                             raised_by="fuse.spark")
    if failed and rank in exits:
        rc = exits[rank][0]
        tail = server.get(TAIL_KEY.format(rank=rank))
        failure = Failure(rank, exits[rank][2], "signal" if rc < 0 else "exit", rc,
                          stderr_tail=tail.decode("utf-8", "replace").splitlines() if tail
                          else [])
        raise WorkerError(failure.describe("fuse.spark"), rank,
                          exit_code=failure.exit_code) from error
    if error is not None:       # the stage failed before any rank did (or a rank never ran)
        raise WorkerError(f"fuse.spark: the Spark stage failed before the ranks finished: "
                          f"{first_line(error)}", -1) from error
    results = []
    for rank in range(n):
        payload = load(rank)
        if payload is None:
            raise WorkerError(f"fuse.spark: rank {rank} ended without a result", rank)
        results.append(payload[1])
    return results


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
