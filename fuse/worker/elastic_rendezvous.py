"""A worker's side of an elastic job's rendezvous: which generation to join, and as whom.

``fuse.init()`` calls :func:`join` when ``FUSE_ELASTIC=1`` (the elastic driver sets it): the
worker finds the driver's newest plan (:mod:`fuse.runner.elastic.protocol`), says it is
ready, waits until every worker of the plan is, and returns its rank, size, local and cross
ranks for that generation.  A worker that the newest plan leaves out (its host was removed or
blacklisted) ends its process with exit code 0 (:class:`WorkerRemoved`): the job goes on
without it.
"""

from __future__ import annotations

import os
import sys
import time

from fuse._log import logger
from fuse.cluster import elastic_protocol as protocol
from fuse.cluster.store import store_from_config

# Who this process is in the job, fixed by its first elastic init (the launcher's identity):
# <host>:<slot index>.  Later inits keep it, whatever rank they get.
_worker: str | None = None


class WorkerRemoved(SystemExit):
    """The elastic job goes on without this worker (its host left the job).  A SystemExit with
    code 0, so that the process ends quietly and ``except Exception`` does not catch it."""

    def __init__(self, worker: str, generation: int):
        super().__init__(0)
        self.worker, self.generation = worker, generation


class WorkerSuperseded(SystemExit):
    """The driver runs another process in this worker's slot: this one outlived the guard the
    launcher started it under, and the driver, seeing the guard die, started a replacement.
    Exit code 1: a process nobody supervises any more must not train on."""

    def __init__(self, worker: str, mine: str, theirs: str, generation: int):
        super().__init__(1)
        self.worker, self.mine, self.theirs, self.generation = worker, mine, theirs, generation

    def __str__(self) -> str:
        return (f"fuse: elastic: worker {self.worker} was started for generation {self.mine}, "
                f"but generation {self.generation} runs the process started in its place for "
                f"generation {self.theirs} (this one outlived the launcher's guard of it); "
                "exiting")


def incarnation(environ=os.environ) -> str | None:
    """The generation the driver started this process for (None when not told)."""
    return environ.get(protocol.INCARNATION_ENV) or None


def check_incarnation(me: str, entry: dict, g: int, environ=os.environ) -> None:
    """Raise :class:`WorkerSuperseded` when plan ``g``'s entry for ``me`` names another
    incarnation than this process's (both known)."""
    mine, theirs = incarnation(environ), entry.get("incarnation")
    if mine is not None and theirs is not None and str(theirs) != mine:
        raise WorkerSuperseded(me, mine, str(theirs), g)


def worker_id(config) -> str:
    global _worker
    if _worker is None:
        _worker = protocol.worker_id(config.hostname, config.local_rank)
    return _worker


def _int(raw: bytes | None, default: int = -1) -> int:
    return int(raw.decode()) if raw else default


# The store is the launcher's, on the launcher's host: a request it does not answer within
# this bound (a few tries) means this worker is cut off from it, and waiting longer would only
# keep a cut-off worker alive (StoreUnreachable ends it).
STORE_TIMEOUT_S = 5.0
STORE_ATTEMPTS = 2


def join(config, after: int, lost: list[int] | None = None,
         unreachable: list[int] | None = None) -> dict:
    """Wait for a generation newer than ``after`` that includes this worker and for all its
    workers to be ready; return the Config fields of this worker's identity in it (with
    ``rendezvous_generation``).  ``lost``: ranks of generation ``after`` that stopped answering
    (reported with the reset request), ``unreachable``: ranks whose hosts this one cannot
    reach.  Raises :class:`WorkerRemoved` when the newest plan
    leaves this worker out, TimeoutError when the driver forms none for twice
    ``config.elastic_timeout``, StoreUnreachable when the launcher's store does not answer."""
    began = time.monotonic()
    store = store_from_config(config, timeout=STORE_TIMEOUT_S, attempts=STORE_ATTEMPTS)
    if store is None:
        raise ValueError("FUSE_ELASTIC=1 needs the elastic launcher's rendezvous store: start "
                         "the job with fuserun --min-np/--max-np/--host-discovery-script or "
                         "fuse.run(min_np=...)")
    me = worker_id(config)
    # The driver decides when waiting for slots has lasted too long and ends the job; this is
    # only a backstop for a driver that hangs, so it outlasts the driver's own timeout.
    timeout = 2 * config.elastic_timeout + 30
    deadline = time.monotonic() + timeout
    asked_for = None
    delay = 0.001
    started_for = int(incarnation() or -1)
    warm_said = False
    while True:
        g = _int(store.get(protocol.GENERATION_KEY, timeout))
        if g < started_for:
            # started ahead of its generation (the driver adds it to a running job): say it
            # has started up, and wait for the generation to be published
            if not warm_said:
                store.set(protocol.WARM_KEY.format(worker=me), str(started_for).encode())
                warm_said = True
        elif g <= after:
            # The collective failed but no worker has left (yet): ask for a new generation;
            # the driver makes one (after a moment in which a dying worker's exit shows).
            if asked_for != g:
                store.set(protocol.RESET_KEY.format(g=g, worker=me),
                          protocol.encode_reset(lost or [], unreachable or []))
                asked_for = g
        else:
            workers, _added = protocol.decode_plan(store.get(protocol.PLAN_KEY.format(g=g)))
            if me not in workers:
                print(f"fuse: elastic: worker {me} is not part of generation {g} (its host left "
                      "the job); exiting", file=sys.stderr, flush=True)
                raise WorkerRemoved(me, g)
            try:
                check_incarnation(me, workers[me], g)
            except WorkerSuperseded as refused:
                print(refused, file=sys.stderr, flush=True)
                raise
            store.set(protocol.READY_KEY.format(g=g, worker=me),
                      (incarnation() or "1").encode())
            ready_at = time.monotonic()
            delay = 0.001
            while True:
                if store.try_get(protocol.GO_KEY.format(g=g)) is not None:
                    identity = {k: workers[me][k] for k in protocol.IDENTITY_FIELDS}
                    identity["rendezvous_generation"] = g
                    logger.debug("rendezvous: worker %s joined generation %d: ready %.2f s "
                                 "after it began, the driver's go %.2f s after that", me, g,
                                 ready_at - began, time.monotonic() - ready_at)
                    return identity
                if _int(store.try_get(protocol.GENERATION_KEY)) != g:
                    break               # another worker failed meanwhile: the next plan
                _check_deadline(deadline, timeout, me, g)
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
            continue
        _check_deadline(deadline, timeout, me, after)
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _check_deadline(deadline: float, timeout: float, me: str, g: int) -> None:
    if time.monotonic() >= deadline:
        raise TimeoutError(f"elastic worker {me}: no generation after {g} was formed within "
                           f"{timeout:g} s (twice FUSE_ELASTIC_TIMEOUT, plus 30 s)")
