"""An elastic worker's sign of life to the driver (``elastic/alive/<worker>``, see
fuse.cluster.elastic_protocol).

A worker stopped by SIGSTOP, or whose host is cut off from the launcher's, keeps its TCP
connections acknowledged or simply says nothing: its peers wait for it in a collective, and the
driver waits for it at the next generation's rendezvous.  A thread of the worker's own, which
runs whatever the training code does (a long step, a re-form, the rendezvous), counts up in the
store about once a second; the driver takes a worker whose count stops for the peer timeout
out of the job.  One thread per process, from its first elastic ``init()`` to its exit, which
it announces (the count becomes ``exiting``): a process tearing down is not judged.
"""

from __future__ import annotations

import atexit
import threading

from fuse.cluster import elastic_protocol as protocol
from fuse.cluster.store import store_from_config

INTERVAL_S = 1.0
STORE_TIMEOUT_S = 2.0

_started = False


def start(config, worker: str, incarnation: str | None) -> None:
    """Start this process's heartbeat as ``worker`` (once; later calls do nothing)."""
    global _started
    if _started:
        return
    store = store_from_config(config, timeout=STORE_TIMEOUT_S, attempts=1)
    if store is None:
        return
    _started = True
    key = protocol.ALIVE_KEY.format(worker=worker)
    threading.Thread(target=_beat, args=(store, key, incarnation or "1"),
                     name="fuse-heartbeat", daemon=True).start()
    # Once the interpreter exits, this (daemon) thread no longer runs, while tearing the
    # process down may take a while (a framework's clean-up, a loaded host): say so first,
    # so that the driver waits for the exit instead of taking the silence for a stop.
    atexit.register(_farewell, store, key, incarnation or "1")


def _farewell(store, key: str, incarnation: str) -> None:
    try:
        store.set(key, f"{incarnation}:{protocol.ALIVE_EXITING}".encode())
    except Exception:   # noqa: BLE001 -- out of reach: the driver sees the exit itself
        pass


def _beat(store, key: str, incarnation: str) -> None:
    count = 0
    pause = threading.Event()       # never set: the wait is the interval
    while True:
        count += 1
        try:
            store.set(key, f"{incarnation}:{count}".encode())
        except Exception:   # noqa: BLE001 -- the store is busy or out of reach: try again
            pass            # at the next beat (a heartbeat that died would get us dropped)
        pause.wait(INTERVAL_S)
