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
FINISH_ATTEMPTS = 3


class _Heart:
    def __init__(self, store, key: str, incarnation: str):
        self.store, self.key, self.incarnation = store, key, incarnation
        self.done = threading.Event()
        self.lock = threading.Lock()        # a beat never overwrites the last word

    def beat(self) -> None:
        count = 0
        while not self.done.is_set():
            count += 1
            with self.lock:
                if self.done.is_set():
                    return
                try:
                    self.store.set(self.key, f"{self.incarnation}:{count}".encode())
                except Exception:   # noqa: BLE001 -- busy or out of reach: the next beat
                    pass            # tries again (a heartbeat that died would get us dropped)
            self.done.wait(INTERVAL_S)

    def finish(self) -> None:
        with self.lock:
            if self.done.is_set():
                return
            self.done.set()
            for _ in range(FINISH_ATTEMPTS):
                try:
                    self.store.set(self.key,
                                   f"{self.incarnation}:{protocol.ALIVE_EXITING}".encode())
                    return
                except Exception:   # noqa: BLE001 -- out of reach: the driver sees the exit
                    pass


_heart: _Heart | None = None


def start(config, worker: str, incarnation: str | None) -> None:
    """Start this process's heartbeat as ``worker`` (once; later calls do nothing)."""
    global _heart
    if _heart is not None:
        return
    store = store_from_config(config, timeout=STORE_TIMEOUT_S, attempts=1)
    if store is None:
        return
    _heart = _Heart(store, protocol.ALIVE_KEY.format(worker=worker), incarnation or "1")
    threading.Thread(target=_heart.beat, name="fuse-heartbeat", daemon=True).start()
    # Once the interpreter exits, this (daemon) thread no longer runs, while tearing the
    # process down may take a while (a framework's clean-up, a loaded host)
    atexit.register(finish)


def finish() -> None:
    """This worker is done (its training returned, or its interpreter exits): say so and stop
    beating, so that the driver waits for its exit instead of taking the silence for a stop."""
    if _heart is not None:
        _heart.finish()
