"""The elastic driver: starts the workers of each generation, watches them, re-forms the job.

One thread runs the loop (the static :class:`~fuse.runner.job.Job`'s machinery: a selector on
the workers' pipes and pidfds, and a wake-up pipe that signals, the discovery thread and every
write to the store poke).  What makes it elastic:

* a worker of the current generation that fails (non-zero exit, signal) blacklists its host
  and makes a new generation on the hosts left; the survivors see the failure in their next
  collective, roll back to their last commit and join it (:mod:`fuse.worker.elastic`);
* a discovery script whose hosts change makes a new generation; the workers join it at their
  next ``commit()``/``check_host_updates()``.  When the job only grows, the added workers are
  started first and the generation is published once they have started up (their imports
  done, waiting at the rendezvous): the running workers train on meanwhile instead of waiting
  for a new process (or a slow host's ssh) at the rendezvous;
* workers that ask for a new generation without anyone having exited (a collective failed for
  another reason) get one after ``reset_grace`` seconds (up to ``report_settle`` while some
  have not asked yet); workers they report unanswering or unreachable are left out first,
  keeping the largest set of hosts that can all reach each other (:mod:`.partition`);
* once every worker of a generation said it is ready, the driver lets them connect;
* a worker whose heartbeat (fuse.worker.heartbeat) stops for the peer timeout
  (``FUSE_PEER_TIMEOUT_SECONDS``, 15 s) is stopped (SIGSTOP), hung or cut off: it is left out
  and its host blacklisted as for a lost worker, whether the others wait for it in a
  collective or at the next generation's rendezvous; the survivors' collectives fail at once
  (fuse.worker.generation_watch), and should it wake up it is refused at the rendezvous;
* a worker that a generation leaves out exits by itself (its host left); one that does not
  within ``removed_grace`` seconds is stopped;
* under ``FUSE_STRAGGLER_POLICY=remove``, rank 0 reports a worker that keeps the others waiting
  (fuse.worker.straggler); the driver takes it out (:mod:`.stragglers` decides).

The job ends when the workers of the current generation have finished (exit code 0 once the
first of them exited 0), or fails: fewer than ``min_np`` slots for ``elastic_timeout`` seconds,
every worker failed, more than ``reset_limit`` re-formations, or no worker of the previous
generation left to hand the state on.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
from typing import Mapping, Sequence

from fuse.cluster.hosts import HostSpec, Slot
from ..job import Failure, Job, JobResult, Settings, WorkerRecord
from ..starter import WorkerStarter
from fuse.cluster import elastic_protocol as protocol
from .blacklist import Blacklist
from .discovery import DiscoveryError, DiscoveryScript, FixedHosts
from .partition import hosts_to_keep
from .plan import identity, make_plan
from .stragglers import StragglerPolicy

DISCOVERY_INTERVAL = 1.0        # seconds between discovery runs (Horovod's is 1 s too)


@dataclasses.dataclass
class ElasticSettings:
    min_np: int
    max_np: int | None = None
    start_np: int | None = None         # slots needed before training starts (-np)
    reset_limit: int | None = None
    cooldown_range: tuple[int, int] | None = None
    elastic_timeout: float = 600.0
    discovery_interval: float = DISCOVERY_INTERVAL
    reset_grace: float = 0.5            # a reset request waits this long for an exit to show
    dying_grace: float = 10.0           # ... or this long when a worker reported its error
    failure_settle: float = 0.2         # failures this close together make one new generation
    removed_grace: float = 10.0         # a worker left out has this long to exit by itself
    straggler_window: float = 10.0      # FUSE_STRAGGLER_WINDOW: at most one removal per window
    report_settle: float = 3.5          # reset requests wait this long for every worker's
    #                                     report (a worker probes its peers for up to 2 s)


@dataclasses.dataclass
class WorkerFailure:
    worker: str
    hostname: str
    generation: int
    what: str
    stderr_tail: list[str]

    def describe(self) -> str:
        text = f"worker {self.worker} (generation {self.generation}) {self.what}"
        if self.stderr_tail:
            text += "; its last stderr line: " + self.stderr_tail[-1].strip()
        return text


@dataclasses.dataclass
class ElasticResult(JobResult):
    elastic_error: str | None = None    # why the job could not go on (None: it finished)
    failures: list[WorkerFailure] = dataclasses.field(default_factory=list)
    generations: int = 0


class ElasticJobError(RuntimeError):
    """The elastic job could not go on; the message says why and names the failures."""


class ElasticJob(Job):
    """An elastic job.  ``discovery`` has ``find()`` (the hosts now, as
    :class:`~fuse.cluster.hosts.HostSpec`) and ``describe()``: a :class:`FixedHosts`, a
    :class:`DiscoveryScript`, or the hosts of a cluster (Ray's nodes, Spark's tasks, the agents
    that joined).  ``starter`` starts the workers (default: fuserun's processes, here or over
    ssh).

    With ``hosts_join_later`` the hosts are found only once the store runs (they join it: Spark
    tasks, agents): call :meth:`wait_for_hosts` before :meth:`run`.  Otherwise the first
    discovery happens here, and waits up to the elastic timeout for enough slots.
    """

    def __init__(self, command: Sequence[str], discovery, elastic: ElasticSettings,
                 env: Mapping[str, str] | None = None, settings: Settings | None = None,
                 secret: bytes | None = None, store_addr: str | None = None,
                 starter: WorkerStarter | None = None, hosts_join_later: bool = False,
                 store_bind: str | None = None, store_port: int = 0):
        self.discovery = discovery
        self.elastic = elastic
        settings = settings or Settings()
        hosts = [] if hosts_join_later else self._first_hosts()
        start = [Slot(h.hostname, 0, 1, 0, 1, 0, 1) for h in hosts] or \
            [Slot("localhost", 0, 1, 0, 1, 0, 1)]
        super().__init__(command, start, env, settings, secret, store_addr, starter,
                         store_bind, store_port)
        self.job_vars["FUSE_ELASTIC"] = "1"
        self.job_vars["FUSE_ELASTIC_TIMEOUT"] = _num(elastic.elastic_timeout)
        self.blacklist = Blacklist(elastic.cooldown_range)
        self.hosts: list[HostSpec] = hosts
        self._hosts_lock = threading.Lock()
        self._found: list[HostSpec] | None = None      # the discovery thread's latest answer
        self._stop_discovery = threading.Event()
        self.generation = -1
        self.plan: dict[str, Slot] = {}
        self.live: dict[str, WorkerRecord] = {}              # worker id -> process of the plan
        self.leaving: dict[str, tuple[WorkerRecord, float]] = {}   # left out: (process, deadline)
        self.failures: list[WorkerFailure] = []
        self.reset_count = 0
        self.succeeded: set[str] = set()
        self._go_sent = -1
        self._reset_seen_at: float | None = None
        self._waiting_since: float | None = None        # not enough slots since then
        self._replan_reason: str | None = None
        self._last_failure_at = 0.0
        self._release_at: float | None = None         # when a blacklisted host comes back
        self._unreachable_said: set[str] = set()        # remote hosts we said we cannot add
        self.stragglers = StragglerPolicy(_straggler_window(env, elastic.straggler_window))
        self._straggler_keys: set[str] = set()          # reports already considered
        self._incarnations: dict[str, int] = {}         # worker id -> generation started for
        self._partition_checked = -1                    # generation whose cuts were acted on
        # workers added to a job that only grows, started ahead of their generation:
        # worker id -> (process, when started)
        self.warming: dict[str, tuple[WorkerRecord, float]] = {}
        self._broken_at = -1            # the last generation a running worker failed in
        self.peer_timeout = _peer_timeout(env)
        # worker id -> (its last heartbeat, when it changed)
        self._heard: dict[str, tuple[bytes, float]] = {}

    def _first_hosts(self) -> list[HostSpec]:
        """The hosts to start on: the first discovery must succeed (as in Horovod); then wait
        up to the elastic timeout for enough slots."""
        deadline = time.monotonic() + self.elastic.elastic_timeout
        need = self.elastic.start_np or self.elastic.min_np
        while True:
            try:
                hosts = self.discovery.find()
            except DiscoveryError as err:
                raise ElasticJobError(str(err)) from None
            if sum(h.slots for h in hosts) >= need:
                return hosts
            if time.monotonic() >= deadline:
                raise ElasticJobError(
                    f"{self.discovery.describe()} offered {sum(h.slots for h in hosts)} slots, "
                    f"fewer than the {need} needed to start, for "
                    f"{self.elastic.elastic_timeout:g} s (--elastic-timeout)")
            time.sleep(self.elastic.discovery_interval)

    def wait_for_hosts(self, timeout: float, hint: str = "") -> None:
        """Wait up to ``timeout`` seconds for the slots needed to start (hosts that join the
        store once it runs); raises :class:`ElasticJobError` naming what was found."""
        need = self.elastic.start_np or self.elastic.min_np
        deadline = time.monotonic() + timeout
        while True:
            hosts = self.discovery.find()
            have = sum(h.slots for h in hosts)
            if have >= need:
                self.hosts = hosts
                return
            if time.monotonic() >= deadline:
                raise ElasticJobError(
                    f"{self.discovery.describe()} offered {have} of the {need} slots needed to "
                    f"start within {timeout:g} s" + (f"; {hint}" if hint else ""))
            time.sleep(0.1)

    # -- discovery thread ------------------------------------------------------------------
    def _discover(self) -> None:
        failed_since = None
        while not self._stop_discovery.wait(self.elastic.discovery_interval):
            try:
                hosts = self.discovery.find()
                failed_since = None
            except DiscoveryError as err:
                # later failures are retried (as in Horovod); said once per run of failures
                if failed_since is None:
                    failed_since = time.monotonic()
                    self.say(f"host discovery failed (retrying): {err}")
                continue
            with self._hosts_lock:
                self._found = hosts
            self.wake()

    # -- plans -----------------------------------------------------------------------------
    def _usable_hosts(self) -> list[HostSpec]:
        """Discovered hosts, minus the blacklisted, minus slots a leaving worker still holds."""
        out = []
        for h in self.hosts:
            if h.hostname in self.blacklist:
                continue
            slots = self.stragglers.cap(h.hostname, h.slots)
            for wid, (w, _deadline) in self.leaving.items():
                if w.slot.hostname == h.hostname:
                    slots = min(slots, int(wid.rsplit(":", 1)[1]))
            if slots > 0:
                out.append(HostSpec(h.hostname, slots))
        return out

    def _candidate(self) -> dict[str, Slot]:
        return make_plan(self._usable_hosts(), self.plan, self.elastic.max_np)

    def _replan(self, reason: str) -> str | None:
        """Form the next generation; returns why the job cannot go on, or None.  Waits (by
        returning None with ``_waiting_since`` set) while there are too few slots."""
        now = time.monotonic()
        plan = self._candidate()
        if len(plan) < self.elastic.min_np:
            if self._waiting_since is None:
                self._waiting_since = now
                self.say(f"{reason}; waiting up to {self.elastic.elastic_timeout:g} s for "
                          f"{self.elastic.min_np} slots (have {len(plan)})")
            if now - self._waiting_since >= self.elastic.elastic_timeout:
                return (f"only {len(plan)} slots were available, fewer than --min-np "
                        f"{self.elastic.min_np}, for {self.elastic.elastic_timeout:g} s "
                        "(--elastic-timeout)")
            self._replan_reason = reason
            return None
        self._waiting_since = None
        self._replan_reason = None
        survivors = [wid for wid in plan if wid in self.live]
        if self.generation >= 0:
            if not survivors:
                return ("no worker of the previous generation remains to hand the state on "
                        f"({reason})")
            if self.elastic.reset_limit is not None and \
                    self.reset_count >= self.elastic.reset_limit:
                return (f"the job re-formed {self.reset_count} times, the --reset-limit; "
                        f"not again ({reason})")
            self.reset_count += 1
        added = any(wid not in self.live for wid in plan)
        self.generation += 1
        g = self.generation
        for wid in [w for w in self.live if w not in plan]:
            self.leaving[wid] = (self.live.pop(wid), now + self.elastic.removed_grace)
        self.plan = plan
        for wid in plan:
            if wid not in self.live:
                self._incarnations[wid] = g
        self.server.put(protocol.PLAN_KEY.format(g=g), protocol.encode_plan(
            {wid: dict(identity(s), incarnation=self._incarnations[wid])
             for wid, s in plan.items()}, added))
        self.server.put(protocol.GENERATION_KEY, str(g).encode())
        self.server.drop("errors/")     # reported under the ranks of the generation before
        self.say(f"generation {g}: {len(plan)} workers on "
                  f"{', '.join(sorted({s.hostname for s in plan.values()}))} ({reason})")
        self.local_workers = sum(self.starter.is_local(w.slot.hostname)
                                 for w in self.live.values()) + \
            sum(s.hostname not in self.remote_hosts for wid, s in plan.items()
                if wid not in self.live)
        for wid, slot in sorted(plan.items(), key=lambda kv: kv[1].rank):
            if wid in self.live:
                continue
            warm = self.warming.pop(wid, None)
            if warm is not None:        # started ahead of this generation: it joins it now
                warm[0].slot = slot
                self.live[wid] = warm[0]
                continue
            w = WorkerRecord(slot)
            w.wid = wid
            self.workers.append(w)
            self.live[wid] = w
            failure = self.start_worker(w)
            if failure is not None:
                self.live.pop(wid)
                self._record(w, failure.what())
        for wid, (w, _started) in self.warming.items():    # its host left meanwhile
            self.leaving[wid] = (w, now + self.elastic.removed_grace)
        self.warming.clear()
        return None

    def _warming_up(self, now: float) -> bool:
        """Whether to hold the next generation back while the workers it adds start up.
        Only for a job that only grows (no worker failed or asked to re-form in this
        generation, every running worker stays): each added worker is started ahead of its
        generation, and the generation waits until all are warm, or for at most the start
        timeout (then it is published as before, and its rendezvous waits for them)."""
        if self.generation < 0 or self.succeeded or self._broken_at == self.generation or \
                self.server.keys(protocol.RESET_PREFIX.format(g=self.generation)):
            return False
        plan = self._candidate()
        if len(plan) < self.elastic.min_np or not set(self.live) <= set(plan):
            return False
        added = [wid for wid in plan if wid not in self.live]
        if not added:
            if {w: identity(s) for w, s in plan.items()} == \
                    {w: identity(s) for w, s in self.plan.items()}:
                self._replan_reason = None      # what would have grown failed to start
                return True
            return False
        for wid in added:
            if wid not in self.warming:
                self._start_ahead(wid, plan[wid], now)
        limit = self.settings.start_timeout
        return any(wid in self.warming and now - self.warming[wid][1] < limit and
                   self.server.get(protocol.WARM_KEY.format(worker=wid)) !=
                   str(self._incarnations[wid]).encode() for wid in added)

    def _ended_while_warming(self, w: WorkerRecord, what: str) -> bool:
        """Whether ``w`` was an added worker starting up ahead of its generation; it failed
        then, even with code 0: it ended before its generation, and starting it again at once
        would only repeat that."""
        if w.wid not in self.warming or self.warming[w.wid][0] is not w:
            return False
        del self.warming[w.wid]
        w.signal_group(signal.SIGKILL)
        self._record(w, what + " while starting up", running=False)
        return True

    def _start_ahead(self, wid: str, slot: Slot, now: float) -> None:
        """Start the process of an added worker for the generation to come."""
        self._incarnations[wid] = self.generation + 1
        w = WorkerRecord(slot)
        w.wid = wid
        self.workers.append(w)
        failure = self.start_worker(w)
        if failure is not None:
            self._record(w, failure.what(), running=False)
            return
        self.warming[wid] = (w, now)
        self.debug(f"worker {wid} starting ahead of generation {self.generation + 1}")

    def worker_env(self, slot: Slot) -> dict[str, str]:
        return self._with_incarnation(slot, super().worker_env(slot))

    def remote_env(self, slot: Slot) -> dict[str, str]:
        return self._with_incarnation(slot, super().remote_env(slot))

    def _with_incarnation(self, slot: Slot, env: dict[str, str]) -> dict[str, str]:
        """Tell the process started for ``slot`` which incarnation of its worker it is: the
        rendezvous refuses any other (one that outlived its guard)."""
        g = self._incarnations.get(protocol.worker_id(slot.hostname, slot.local_rank))
        if g is not None:
            env[protocol.INCARNATION_ENV] = str(g)
        return env

    def _ready(self, g: int) -> set[str]:
        """The workers of plan ``g`` that said they are ready, as the incarnation the plan
        names (a ready from another process in the same slot does not count)."""
        ready = set()
        for key in self.server.keys(protocol.READY_PREFIX.format(g=g)):
            wid = key.rsplit("/", 1)[1]
            said = (self.server.get(key) or b"").decode(errors="replace")
            if said == "1" or said == str(self._incarnations.get(wid)):
                ready.add(wid)
            else:
                self.debug(f"generation {g}: ignored a ready from {wid} of incarnation "
                            f"{said}, not {self._incarnations.get(wid)}")
        return ready

    def _record(self, w: WorkerRecord, what: str, running: bool = True) -> None:
        """A worker failed: blacklist its host and re-form.  ``running``: a worker of the
        current generation (not one starting up ahead of the next)."""
        if running:
            self._broken_at = self.generation
        self.failures.append(WorkerFailure(w.wid, w.slot.hostname, self.generation, what,
                                           w.tail()))
        seconds = self.blacklist.add(w.slot.hostname)
        self.say(f"worker {w.wid} {what}; host {w.slot.hostname} is blacklisted"
                  + ("" if seconds == float("inf") else f" for {seconds:.0f} s"))
        self._replan_reason = self._replan_reason or f"worker {w.wid} {what}"
        self._last_failure_at = time.monotonic()

    def _hosts_changed(self, now: float) -> None:
        with self._hosts_lock:
            found, self._found = self._found, None
        upcoming = self.blacklist.next_release()
        if upcoming is not None and (self._release_at is None or upcoming < self._release_at):
            self._release_at = upcoming
        if self._release_at is not None and now >= self._release_at:
            # a blacklisted host's cool-down ended: it may join again
            self._release_at = None
            if not self.succeeded and self._replan_reason is None and \
                    self._candidate().keys() != self.plan.keys():
                self._replan_reason = "a blacklisted host's cool-down ended"
        if found is None:
            return
        found = self._check_reachable(found)
        if [(h.hostname, h.slots) for h in found] == [(h.hostname, h.slots) for h in self.hosts]:
            return
        self.debug("discovery: " + ", ".join(f"{h.hostname}:{h.slots}" for h in found))
        self.hosts = found
        for h in found:
            if not self.starter.is_local(h.hostname) and h.hostname not in self.remote_hosts:
                self.remote_hosts.append(h.hostname)
        if self.succeeded:
            return
        candidate = self._candidate()
        if {wid: identity(s) for wid, s in candidate.items()} != \
                {wid: identity(s) for wid, s in self.plan.items()}:
            self._replan_reason = self._replan_reason or "the hosts changed"

    def _check_reachable(self, hosts: list[HostSpec]) -> list[HostSpec]:
        """Remote hosts cannot reach a store that listens on loopback (the job started on
        this machine only, without --network-interface): say so once, and leave them out."""
        if not self.addr.startswith("127."):
            return hosts
        out = []
        for h in hosts:
            if self.starter.is_local(h.hostname):
                out.append(h)
            elif h.hostname not in self._unreachable_said:
                self._unreachable_said.add(h.hostname)
                self.say(f"cannot add remote host {h.hostname}: the job started on this machine "
                          "only, so its store listens on loopback; give --network-interface to "
                          "let remote hosts join later")
        return out

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> "ElasticResult":
        old_handlers = self.open_loop()
        self.server.on_change = self.wake
        self.server.quiet_prefix = protocol.ALIVE_PREFIX    # heartbeats: read each turn
        discovery_thread = None
        error: str | None = None
        interrupted: int | None = None
        try:
            error = self._replan("start")
            notice = self.budget_notice()
            if notice:
                self.say(notice)
            if not isinstance(self.discovery, FixedHosts):
                discovery_thread = threading.Thread(target=self._discover, daemon=True,
                                                    name="fuse-discovery")
                discovery_thread.start()
            while error is None:
                now = time.monotonic()
                if self.pending_signals:
                    interrupted = self.pending_signals.pop(0)
                    self.say(f"received {signal.Signals(interrupted).name}; stopping "
                              f"{sum(w.running for w in self.workers)} workers")
                    break
                error = self._step(now)
                if error is not None or self._finished():
                    break
                timeout = 0.2 if self._waiting_since is not None or self.leaving else 1.0
                if self._reset_seen_at is not None or self._replan_reason is not None:
                    timeout = min(timeout, 0.05)
                if self._release_at is not None:
                    timeout = max(0.0, min(timeout, self._release_at - time.monotonic()))
                self.dispatch(timeout)
        finally:
            self._stop_discovery.set()
            self.server.on_change = None
            if error is not None or interrupted is not None:
                self.stop_all(signal.SIGTERM)
            self.close_loop(old_handlers)
            if discovery_thread is not None:
                discovery_thread.join(timeout=5)
        return self._result(error, interrupted)

    def _step(self, now: float) -> str | None:
        """One turn of the loop; returns why the job must stop, or None."""
        # exits
        for w in list(self.workers):
            rc = self.reap(w)
            if rc is None:
                continue
            wid = w.wid
            if wid in self.leaving:
                del self.leaving[wid]
                self.debug(f"worker {wid} left the job (exit code {rc})")
                self._replan_reason = self._replan_reason or (
                    None if self.succeeded else self._pending_growth())
                continue
            what = (f"exited with code {rc}" if rc > 0
                    else f"was killed by signal {_signame(-rc)}")
            if self._ended_while_warming(w, what):
                continue
            if self.live.get(wid) is not w:
                continue
            del self.live[wid]
            if rc == 0:
                self.succeeded.add(wid)
                continue
            # whatever the worker's process group still holds goes too: when its guard was
            # killed, the worker under it (or a shell's child) must not train on as a ghost
            w.signal_group(signal.SIGKILL)
            if self.succeeded:
                self.failures.append(WorkerFailure(wid, w.slot.hostname, self.generation, what,
                                                   w.tail()))
                return f"worker {wid} {what} after other workers had finished"
            self._record(w, what)
        if self.succeeded:
            return None
        if not self.live:       # nobody holds the state any more
            return "every worker failed"
        # hosts
        self._hosts_changed(now)
        self._check_stragglers(now)
        self._check_silent(now)
        # reset requests: a collective failed without anyone exiting (yet)
        if self.server.keys(protocol.RESET_PREFIX.format(g=self.generation)):
            if self._reset_seen_at is None:
                self._reset_seen_at = now
            waiting = self._drop_partitioned(now)
            # a worker that raised has said so (errors/<rank>) and is on its way out: its
            # exit, not a generation without it, is what the others wait for
            grace = self.elastic.reset_grace if not self._dying() else self.elastic.dying_grace
            if not waiting and not self._reports_complete(self._reset_reports()):
                # a worker still probing its peers may report a cut: give it a moment
                grace = max(grace, self.elastic.report_settle)
            if not waiting and now - self._reset_seen_at >= grace and \
                    self._replan_reason is None:
                self._replan_reason = "workers asked to re-form after a failed collective"
        if self._replan_reason is not None and \
                now - self._last_failure_at < self.elastic.failure_settle:
            return None     # workers that fail together (one error, many exits): one plan
        if self._replan_reason is not None and not self._warming_up(now):
            self._reset_seen_at = None
            error = self._replan(self._replan_reason)
            if error is not None:
                return error
        # the generation's barrier
        if self._go_sent < self.generation and self.plan:
            ready_ids = self._ready(self.generation)
            if all(wid in ready_ids for wid in self.plan):
                self._go_sent = self.generation
                self.server.put(protocol.GO_KEY.format(g=self.generation), b"1")
                self.debug(f"generation {self.generation}: every worker is ready")
        # workers left out that linger
        for wid, (w, deadline) in list(self.leaving.items()):
            if now >= deadline and w.running:
                self.say(f"worker {wid} was left out of the job but did not exit within "
                          f"{self.elastic.removed_grace:g} s; stopping it")
                w.signal_group(signal.SIGKILL if now >= deadline + self.settings.grace_seconds
                               else signal.SIGTERM)
        return None

    def _check_stragglers(self, now: float) -> None:
        """Rank 0's straggler reports for this generation: take the worker (or host) out
        when the policy allows (see .stragglers), and re-form without it."""
        prefix = protocol.STRAGGLER_PREFIX.format(g=self.generation)
        for key in sorted(self.server.keys(prefix)):
            if key in self._straggler_keys:
                continue
            self._straggler_keys.add(key)
            try:
                evidence = json.loads(self.server.get(key) or b"{}")
            except ValueError:
                continue
            if self.succeeded or self._replan_reason is not None:
                self.say(f"straggler report ignored: the job is re-forming already "
                          f"({evidence.get('text', '')})")
                continue
            decision = self.stragglers.decide(
                evidence, self.plan, self.live, now, self.elastic.min_np,
                lambda: len(self._candidate()), self.blacklist)
            self.say(decision.text)
            if decision.remove:
                self._replan_reason = decision.reason

    def _check_silent(self, now: float) -> None:
        """Leave out the running workers of the plan whose heartbeat has not changed for the
        peer timeout: stopped, hung or cut off from this host.  A worker is judged only once
        this very process of it has beaten (its start-up is the start timeout's business) and
        until it says it is exiting (its exit shows by itself)."""
        if self.succeeded:
            return
        for wid, w in list(self.live.items()):
            if not w.running:
                continue
            beat = self.server.get(protocol.ALIVE_KEY.format(worker=wid))
            if beat is None or \
                    beat.split(b":")[0] != str(self._incarnations.get(wid, 1)).encode() or \
                    beat.endswith(b":" + protocol.ALIVE_EXITING.encode()):
                continue        # not started up yet, another process of its slot, or exiting
            heard = self._heard.get(wid)
            if heard is None or heard[0] != beat:
                self._heard[wid] = (beat, now)
                continue
            silent = now - heard[1]
            if silent < self.peer_timeout:
                continue
            del self.live[wid]
            del self._heard[wid]
            # left out like a worker whose host left: should it wake up, it finds itself out
            # of the plan and exits; one that does not within removed_grace is stopped
            self.leaving[wid] = (w, now + self.elastic.removed_grace)
            self._record(w, f"stopped answering: no heartbeat for {silent:.0f} s "
                            f"(FUSE_PEER_TIMEOUT_SECONDS={self.peer_timeout:g}); it is "
                            "stopped, hung or cut off from this host")

    def _reset_reports(self) -> dict[int, tuple[list[int], list[int]]]:
        """This generation's reset requests, by the reporter's rank: (ranks it found
        unanswering, ranks whose hosts it cannot reach)."""
        prefix = protocol.RESET_PREFIX.format(g=self.generation)
        rank_of = {wid: s.rank for wid, s in self.plan.items()}
        reports = {}
        for key in self.server.keys(prefix):
            wid = key[len(prefix):]
            if wid in rank_of:
                reports[rank_of[wid]] = protocol.decode_reset(self.server.get(key))
        return reports

    def _reports_complete(self, reports: dict) -> bool:
        """Whether every running worker of this generation has reported, but those others
        found unanswering (cut off from rank 0: they cannot reach the store either)."""
        lost = {r for unanswering, _ in reports.values() for r in unanswering}
        return all(s.rank in reports or s.rank in lost for wid, s in self.plan.items()
                   if wid in self.live and self.live[wid].running)

    def _drop_partitioned(self, now: float) -> bool:
        """Leave out the workers that the others report they cannot reach: a host cut off
        from everyone (rank 0's engine found it unanswering; its ssh session may take a
        minute to notice) or the hosts on the far side of a cut between workers
        (:mod:`.partition` keeps the largest set of hosts that can all reach each other).
        Waits for every running worker's report, at most ``report_settle`` seconds after the
        first.  Their ssh is stopped; a worker cut off from the job exits by itself (it cannot
        reach the store either).  Returns whether it is still waiting for reports."""
        if self._partition_checked == self.generation:
            return False
        reports = self._reset_reports()
        named = any(lost or cut for lost, cut in reports.values())
        if not named:
            return False
        if self._reset_seen_at is not None and not self._reports_complete(reports) and \
                now - self._reset_seen_at < self.elastic.report_settle:
            return True
        self._partition_checked = self.generation
        host_of = {s.rank: s.hostname for s in self.plan.values()}
        cuts = {frozenset((host_of[a], host_of[b])) for a, (lost, cut) in reports.items()
                for b in lost + cut if b in host_of and host_of[b] != host_of[a]}
        hosts = []
        for s in sorted(self.plan.values(), key=lambda s: s.rank):
            if s.hostname not in hosts:
                hosts.append(s.hostname)
        slots = {h: sum(s.hostname == h for s in self.plan.values()) for h in hosts}
        keep = set(hosts_to_keep(hosts, slots, cuts, {host_of[r] for r in reports}))
        for wid, slot in sorted(self.plan.items(), key=lambda kv: kv[1].rank):
            w = self.live.get(wid)
            if slot.hostname in keep or w is None or not w.running:
                continue
            del self.live[wid]
            w.signal_group(signal.SIGKILL)
            self._record(w, self._why_left_out(slot, reports, host_of))
        return False

    @staticmethod
    def _why_left_out(slot: Slot, reports: dict, host_of: dict[int, str]) -> str:
        if any(slot.rank in lost for lost, _ in reports.values()):
            return (f"(rank {slot.rank}) stopped answering its peers (their control "
                    "connections' keep-alive, FUSE_PEER_TIMEOUT_SECONDS): its host is cut off "
                    "or down")
        peers = sorted({a for a, (_, cut) in reports.items() if slot.rank in cut} |
                       set(reports.get(slot.rank, ([], []))[1]))
        named = ", ".join(f"rank {r} (host {host_of[r]})" for r in peers if r in host_of)
        return (f"(rank {slot.rank}) and {named} cannot reach each other: the network "
                "between their hosts is cut; the job goes on with the largest set of hosts "
                "that can")

    def _dying(self) -> bool:
        """Whether a worker of this generation reported its own fatal error (not one caused by
        another rank's) and has not exited yet."""
        for key in self.server.keys("errors/"):
            parts = key.split("/")
            if len(parts) != 2 or self.server.get(key + "/consequence") is not None:
                continue
            if any(s.rank == int(parts[1]) for wid, s in self.plan.items() if wid in self.live):
                return True
        return False

    def _pending_growth(self) -> str | None:
        """A leaving worker's exit may free slots a new generation could use."""
        if self._candidate().keys() - self.plan.keys():
            return "a host's slots became free"
        return None

    def _waiting_for_slots(self) -> bool:
        return self._waiting_since is not None

    def _finished(self) -> bool:
        return bool(self.succeeded) and not self.live

    def _result(self, error: str | None, interrupted: int | None) -> "ElasticResult":
        exit_codes = {s.rank: None for s in self.plan.values()}
        for wid, s in self.plan.items():
            for w in self.workers:
                if w.wid == wid and w.proc is not None:
                    exit_codes[s.rank] = w.returncode
        failure = None
        if error is not None:
            first = self.failures[0] if self.failures else None
            failure = Failure(-1, first.hostname if first else "-", "error", None,
                              detail=error)
            rc = 1
        elif interrupted is not None:
            rc = 128 + interrupted
        else:
            rc = 0
        return ElasticResult(rc, exit_codes, failure, interrupted, elastic_error=error,
                             failures=list(self.failures), generations=self.generation + 1)

    def raise_for(self, result: "ElasticResult", error=RuntimeError,
                  cause: BaseException | None = None) -> None:
        """For a launcher that runs the job from Python (Ray, Spark): KeyboardInterrupt when
        SIGINT stopped it; ``error(text)``, from ``cause``, when it could not go on or another
        signal stopped it; nothing when it finished."""
        if result.interrupted == signal.SIGINT:
            raise KeyboardInterrupt
        if result.elastic_error is not None or result.interrupted is not None:
            text = (self.describe_failure(result) if result.elastic_error
                    else f"{self.settings.name}: interrupted by signal {result.interrupted}")
            raise error(text) from cause

    def describe_failure(self, result: "ElasticResult") -> str:
        name = self.settings.name
        lines = [f"{name}: the elastic job failed: {result.elastic_error}."]
        if result.failures:
            lines.append(f"{name}: failures ({len(result.failures)}):")
            lines.extend(f"    {f.describe()}" for f in result.failures)
        return "\n".join(lines)


def _signame(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({sig})"
    except ValueError:
        return str(sig)


def _peer_timeout(env: Mapping[str, str] | None) -> float:
    """FUSE_PEER_TIMEOUT_SECONDS as the workers get it (the job's environment; its bounds are
    fuse.config's): how long a worker's heartbeat may stop before it counts as lost."""
    from fuse.config import Config
    text = (env or {}).get("FUSE_PEER_TIMEOUT_SECONDS", "").strip()
    return Config.from_env({"FUSE_PEER_TIMEOUT_SECONDS": text} if text else {}) \
        .peer_timeout_seconds


def _straggler_window(env: Mapping[str, str] | None, fallback: float) -> float:
    """FUSE_STRAGGLER_WINDOW as the workers get it (the job's environment), else
    ``fallback``: the driver removes at most one straggler per window."""
    text = (env or {}).get("FUSE_STRAGGLER_WINDOW", "").strip()
    if not text:
        return fallback
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"FUSE_STRAGGLER_WINDOW={text!r}: expected seconds") from None
    if not 1.0 <= value <= 3600.0:
        raise ValueError(f"FUSE_STRAGGLER_WINDOW={text!r} is out of range: it must be from 1 "
                         "to 3600")
    return value


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def discovery_from(hosts: list[HostSpec] | None, script: str | None,
                   slots_per_host: int | None):
    if script:
        return DiscoveryScript(script, slots_per_host)
    return FixedHosts(hosts or [HostSpec("localhost", 1)])
