"""An elastic worker's watch on the driver: when the driver forms a generation that leaves out
a worker of the one this engine runs, this engine's pending collectives fail at once.

Those collectives wait for a peer that will never take part (the driver saw it go: its
process exited, its ssh session died, discovery removed its host), and nothing else may tell
them soon: a peer that stopped without closing its connections, or that lost only its
connections to other workers, is otherwise noticed after the stall or Gloo timeouts, or never.
Failing them makes this worker restore its last commit and join the new generation, as after
any failed collective.  A generation that only adds workers changes nothing here: those reach
the job at its next ``commit()`` (fuse.worker.elastic).

One daemon thread per engine reads the store's generation key every ``POLL_SECONDS``; it ends
when the engine it watches is no longer the running one.
"""

from __future__ import annotations

import threading

from fuse.cluster import elastic_protocol as protocol
from fuse.cluster.store import store_from_config
from fuse.job import state

POLL_SECONDS = 1.0
STORE_TIMEOUT_S = 5.0


def start(engine, config) -> None:
    """Watch the driver's generations on behalf of ``engine`` (elastic jobs only)."""
    if not config.elastic or config.rendezvous_generation < 0 or config.size < 2:
        return
    store = store_from_config(config, timeout=STORE_TIMEOUT_S, attempts=1)
    if store is None:
        return
    threading.Thread(target=_watch, args=(engine, config, store),
                     name="fuse-generation-watch", daemon=True).start()


def _watch(engine, config, store) -> None:
    mine = config.rendezvous_generation
    workers = None      # the worker ids of this engine's generation, read once
    checked = mine      # the newest generation already compared with ours
    stop = threading.Event()
    while not stop.wait(POLL_SECONDS):
        if state.job.engine is not engine or engine.failed:
            return
        try:
            raw = store.try_get(protocol.GENERATION_KEY)
            newest = int(raw.decode()) if raw else -1
            if newest <= checked:
                continue
            if workers is None:
                workers = set(protocol.decode_plan(
                    store.get(protocol.PLAN_KEY.format(g=mine), STORE_TIMEOUT_S))[0])
            left = sorted(workers - set(protocol.decode_plan(
                store.get(protocol.PLAN_KEY.format(g=newest), STORE_TIMEOUT_S))[0]))
        except (OSError, ValueError):
            continue        # the store is busy or out of reach: the engine's own checks remain
        checked = newest    # only additions: keep watching for a generation that drops one
        if left:
            if state.job.engine is engine:
                engine.abort(f"the elastic driver formed generation {newest} without "
                             f"worker(s) {', '.join(left)} of generation {mine}; re-forming")
            return
