"""Hosts that join the driver's store and start workers when it asks: Spark tasks, agents.

Written once for both sides:

* the host (:class:`HostLoop`): says it is there (``host/<id>``: its name and slots), raises a
  heartbeat (``alive/<id>``) every ``HEARTBEAT_SECONDS``, and starts the workers the driver asks
  for (``start/<id>/<n>``, n = 0, 1, ...: JSON ``{"env": {...}, "argv": [...]}``), stops one
  when told (``stop/<id>/<n>``) and records how each ended (``exit/<id>/<n>``, its exit code, and
  ``tail/<id>/<n>``, its last stderr lines).  It returns when the driver says the job is over
  (``done``);
* the driver: :class:`StoreHostDiscovery` (the hosts whose heartbeat moves, for the elastic
  driver's discovery) and :class:`StoreHostStarter` (a :class:`~fuse.runner.starter.
  WorkerStarter` that writes the start requests and watches the answers).

Every key sits under a prefix (``spark/elastic/``, ``agents/``), so that two kinds of hosts
never mix.  The store serves only requests that prove the job's secret: a host without it is
refused at its first request and never joins.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Callable, Mapping, Sequence

from fuse.cluster.hosts import HostSpec, Slot

from .starter import PolledHandle, WorkerStarter

__all__ = ["HostKeys", "StoreHostDiscovery", "StoreHostStarter", "HostLoop",
           "HEARTBEAT_SECONDS"]

HEARTBEAT_SECONDS = 0.5
POLL_SECONDS = 0.1


class HostKeys:
    """The store's keys of one kind of host, under ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.host_prefix = prefix + "host/"
        self.alive_prefix = prefix + "alive/"
        self.done = prefix + "done"
        self.left_prefix = prefix + "left/"

    def host(self, host: str) -> str:
        return f"{self.host_prefix}{host}"

    def alive(self, host: str) -> str:
        return f"{self.alive_prefix}{host}"

    def left(self, host: str) -> str:
        return f"{self.left_prefix}{host}"

    def start(self, host: str, n: int) -> str:
        return f"{self.prefix}start/{host}/{n}"

    def stop(self, host: str, n: int) -> str:
        return f"{self.prefix}stop/{host}/{n}"

    def exit(self, host: str, n: int) -> str:
        return f"{self.prefix}exit/{host}/{n}"

    def tail(self, host: str, n: int) -> str:
        return f"{self.prefix}tail/{host}/{n}"


# -- the driver's side ----------------------------------------------------------------------
class StoreHostDiscovery:
    """The hosts that joined (``host/<id>``) and whose heartbeat moved within ``stale_after``
    seconds, each with the slots it offered.  ``attach`` gives it the driver's store."""

    def __init__(self, keys: HostKeys, stale_after: float, what: str):
        self.keys = keys
        self.stale_after = stale_after
        self.what = what
        self.server = None
        self._seen: dict[str, tuple[bytes, float]] = {}    # host -> (beat, when it changed)
        self._joined: dict[str, float] = {}                 # host -> when we first saw it
        self._lock = threading.Lock()

    def attach(self, server) -> None:
        self.server = server

    def describe(self) -> str:
        return self.what

    def order(self, host: str):
        """How hosts are sorted (the order ranks are given in): the order they joined in."""
        return self._joined.get(host, float("inf"))

    def alive(self, host: str) -> bool:
        beat = self.server.get(self.keys.alive(host))
        if beat is None:
            return False
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(host)
            if last is None or last[0] != beat:
                self._seen[host] = (beat, now)
                return True
            return now - last[1] < self.stale_after

    def slots(self, host: str) -> int:
        raw = self.server.get(self.keys.host(host))
        try:
            return max(0, int(json.loads(raw.decode()).get("slots", 1)))
        except (ValueError, AttributeError, TypeError):
            return 0        # not what a host of ours writes: not a host

    def find(self) -> list[HostSpec]:
        if self.server is None:
            return []
        hosts = []
        for key in self.server.keys(self.keys.host_prefix):
            host = key[len(self.keys.host_prefix):]
            self._joined.setdefault(host, time.monotonic())
            n = self.slots(host)
            if n > 0 and self.alive(host):
                hosts.append(HostSpec(host, n))
        return sorted(hosts, key=lambda h: (self.order(h.hostname), h.hostname))


class StoreHostHandle(PolledHandle):
    """A worker started by a host of the store, seen as the process the job expects: it ended
    when the host recorded its exit, or when the host stopped answering (-SIGKILL)."""

    def __init__(self, server, discovery: StoreHostDiscovery, host: str, n: int):
        self.server, self.discovery, self.host, self.n = server, discovery, host, n
        self.keys = discovery.keys
        self.returncode: int | None = None
        self.why: str | None = None

    def __repr__(self) -> str:
        return f"worker {self.n} of {self.host}"

    def poll(self) -> int | None:
        if self.returncode is None:
            raw = self.server.get(self.keys.exit(self.host, self.n))
            if raw is not None:
                self.returncode = int(raw.decode())
            elif not self.discovery.alive(self.host):
                self.why = (f"its host {self.host} ended or stopped answering (for "
                            f"{self.discovery.stale_after:g} s)")
                self.returncode = -signal.SIGKILL
        return self.returncode

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        self.server.put(self.keys.stop(self.host, self.n), str(int(sig)).encode())

    def stderr_tail(self) -> list[str]:
        if self.why:
            return [self.why]
        raw = self.server.get(self.keys.tail(self.host, self.n))
        return raw.decode("utf-8", "replace").splitlines() if raw else []


class StoreHostStarter(WorkerStarter):
    """Starts each worker by asking its host (a host of ``discovery``) to: ``argv`` is the
    command the host runs (None: the host's own)."""

    def __init__(self, discovery: StoreHostDiscovery, argv: Sequence[str] | None = None):
        self.discovery = discovery
        self.argv = list(argv) if argv else None
        self._starts: dict[str, int] = {}       # host -> how many workers it was asked for

    def bind(self, server) -> None:
        super().bind(server)
        self.discovery.attach(server)

    def start(self, slot: Slot, env: Mapping[str, str]) -> StoreHostHandle:
        host = slot.hostname
        n = self._starts[host] = self._starts.get(host, -1) + 1
        request = {"env": dict(env)}
        if self.argv:
            request["argv"] = self.argv
        self.server.put(self.discovery.keys.start(host, n), json.dumps(request).encode())
        return StoreHostHandle(self.server, self.discovery, host, n)

    def finish(self, linger: float = 3.0) -> None:
        """Tell every host the job is over, and wait up to ``linger`` seconds for the hosts
        that answer to say they saw it (so that none takes the store's end for a lost driver)."""
        keys, server = self.discovery.keys, self.server
        server.put(keys.done, b"1")
        deadline = time.monotonic() + linger
        while time.monotonic() < deadline:
            hosts = [k[len(keys.host_prefix):] for k in server.keys(keys.host_prefix)]
            if all(server.get(keys.left(h)) is not None or not self.discovery.alive(h)
                   for h in hosts):
                return
            time.sleep(POLL_SECONDS)


# -- the host's side ------------------------------------------------------------------------
class RunningWorker:
    """What :class:`HostLoop`'s ``launch`` returns: a started worker it can poll and kill."""

    def poll(self) -> int | None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def finish(self) -> tuple[int, list[str]]:
        """Wait for the end (output included): its exit code and last stderr lines."""
        raise NotImplementedError


class HostLoop:
    """A host of the store (see the module's docstring).  ``store`` is an
    :class:`~fuse.cluster.store.HTTPStore` with the job's secret; ``launch(request, n)`` starts
    worker ``n`` from the driver's request and returns a :class:`RunningWorker`."""

    def __init__(self, store, keys: HostKeys, host: str, info: Mapping,
                 launch: Callable[[dict, int], RunningWorker]):
        self.store, self.keys, self.host, self.info, self.launch = store, keys, host, info, launch
        self.running: dict[int, RunningWorker] = {}
        self.next = 0
        self._beats = 0
        self._last_beat = 0.0

    def announce(self) -> None:
        self.store.set(self.keys.host(self.host), json.dumps(dict(self.info)).encode())
        self.beat(force=True)

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_beat >= HEARTBEAT_SECONDS:
            self._beats += 1
            self._last_beat = now
            self.store.set(self.keys.alive(self.host), str(self._beats).encode())

    def run(self, one_at_a_time: bool = False, leave_on_failure: bool = False) -> int | None:
        """Serve the driver until it says the job is over.  ``one_at_a_time``: a new worker
        waits for the one before to end (a Spark task holds one slot).  ``leave_on_failure``:
        return as soon as a worker fails by itself (not stopped by the driver), with its exit
        code, so that whatever runs this host can fail and be run again (a Spark task, which
        Spark retries as a new host); None when the job ended."""
        failed = None
        try:
            while self.store.try_get(self.keys.done) is None:
                self.beat()
                failed = self._reap()
                if failed is not None and leave_on_failure:
                    return failed
                if not (one_at_a_time and self.running):
                    raw = self.store.try_get(self.keys.start(self.host, self.next))
                    if raw is not None:
                        self.running[self.next] = self.launch(json.loads(raw.decode()), self.next)
                        self.next += 1
                        continue
                time.sleep(POLL_SECONDS)
        finally:
            self.stop_all()
            if failed is None or not leave_on_failure:
                self.store.set(self.keys.left(self.host), b"1")
        return None

    def _reap(self) -> int | None:
        """Record the workers that ended or were told to stop; the exit code of one that
        failed by itself, if any."""
        failed = None
        for n, worker in list(self.running.items()):
            ended = worker.poll() is not None
            stopped = self.store.try_get(self.keys.stop(self.host, n)) is not None
            if not (ended or stopped):
                continue
            worker.kill()
            rc = self._record(n, worker)
            if ended and not stopped and rc != 0:
                failed = rc
        return failed

    def _record(self, n: int, worker: RunningWorker) -> int:
        del self.running[n]
        rc, tail = worker.finish()
        try:
            if rc != 0 and tail:
                self.store.set(self.keys.tail(self.host, n), "\n".join(tail).encode())
            self.store.set(self.keys.exit(self.host, n), str(rc).encode())
        except (ConnectionError, OSError):
            pass        # the driver is gone: nobody to tell
        return rc

    def stop_all(self) -> None:
        """Kill and reap every worker still running (the job is over, or we are going)."""
        for n, worker in list(self.running.items()):
            worker.kill()
            self._record(n, worker)
