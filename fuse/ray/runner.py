"""``RayExecutor``: fuse workers as Ray actors, as ``horovod.ray.RayExecutor`` runs them.

The executor reserves the workers' resources with a placement group (one bundle per worker,
packed; or with ``num_hosts``, one bundle per host holding ``num_workers_per_host`` workers,
strictly spread), starts one :class:`~fuse.ray.worker.FuseWorker` actor per worker, asks each
which node it landed on, and gives ranks by node (:func:`fuse.runner.worker_env.slots_for_hosts`).
The rendezvous store runs here, in the driver; the actors get its address, the job's secret
and their identity in their environment, and fuse's ``init()`` in a function they run reads it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fuse.runner.api import WorkerError
from fuse.cluster.hosts import Slot, first_interface_address
from fuse.runner.worker_env import DriverStore, root_cause, slots_for_hosts

from .worker import FuseWorker

__all__ = ["RayExecutor", "RaySettings"]

# After the first worker fails, how long the others get to fail too (fuse takes a job down
# within seconds), so that the rank that failed of its own accord can be told from its victims.
_FAILURE_GRACE_S = 20.0


@dataclasses.dataclass
class RaySettings:
    """What :meth:`RayExecutor.create_settings` makes.  ``timeout_s`` bounds the start of the
    workers (actors placed and answering); ``placement_group_timeout_s`` the wait for the
    placement group's resources; ``nics`` the network interfaces the workers use (the first
    one's address is the store's).  ``ssh_identity_file``/``ssh_str`` are Horovod's and unused:
    Ray starts the workers, nothing goes over ssh."""
    timeout_s: float = 30
    placement_group_timeout_s: float = 100
    nics: Sequence[str] | None = None
    ssh_identity_file: str | None = None
    ssh_str: str | None = None


class RayExecutor:
    """Run fuse jobs on a Ray cluster: ``num_workers`` actors (or ``num_hosts`` x
    ``num_workers_per_host``), each with ``cpus_per_worker`` CPUs and, with ``use_gpu``,
    ``gpus_per_worker`` GPUs (default 1).  Call :meth:`start`, then :meth:`run` or
    :meth:`execute` any number of times, then :meth:`shutdown`.

    A worker that raises, or whose actor dies, ends the call with an error naming its rank:
    its own exception (the Ray wrapper removed) chained from a :class:`WorkerError`, or a
    :class:`WorkerError` for a dead actor.

    With ``min_workers`` (instead of ``num_workers``/``num_hosts``) the job is elastic, as
    :class:`~fuse.ray.ElasticRayExecutor` runs it: between ``min_workers`` and ``max_workers``
    workers of ``cpus_per_worker`` CPUs on the cluster's alive nodes, re-formed when one is
    lost or a node joins; only :meth:`run` is available then (each call is one elastic job).
    """

    @staticmethod
    def create_settings(timeout_s: float = 30, ssh_identity_file: str | None = None,
                        ssh_str: str | None = None, placement_group_timeout_s: float = 100,
                        nics: Sequence[str] | str | None = None) -> RaySettings:
        if isinstance(nics, str):
            nics = [n.strip() for n in nics.split(",") if n.strip()]
        return RaySettings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s,
                           nics=list(nics) if nics else None, ssh_identity_file=ssh_identity_file,
                           ssh_str=ssh_str)

    def __init__(self, settings: RaySettings | None = None, num_workers: int | None = None,
                 num_hosts: int | None = None, num_workers_per_host: int = 1,
                 cpus_per_worker: int = 1, use_gpu: bool = False,
                 gpus_per_worker: int | None = None, use_current_placement_group: bool = True,
                 min_workers: int | None = None, max_workers: int | None = None,
                 reset_limit: int | None = None, cooldown_range: tuple[int, int] | None = None,
                 elastic_timeout: int = 600, override_discovery: bool = True):
        self._elastic = None
        if min_workers is not None:
            if num_workers is not None or num_hosts is not None:
                raise ValueError("give num_workers/num_hosts (a fixed job) or min_workers (an "
                                 "elastic one), not both")
            self._elastic = _elastic_executor(settings, min_workers, max_workers, reset_limit,
                                              cooldown_range, elastic_timeout, cpus_per_worker,
                                              use_gpu, gpus_per_worker, override_discovery)
            self.settings = self._elastic.settings
            self.workers = []
            return
        extra = [name for name, value in (("max_workers", max_workers),
                                          ("reset_limit", reset_limit),
                                          ("cooldown_range", cooldown_range))
                 if value is not None]
        if extra:
            raise ValueError(f"fuse.ray: {', '.join(extra)} only apply to an elastic job: "
                             "give min_workers too")
        if num_workers is None and num_hosts is None:
            raise ValueError("give num_workers, or num_hosts and num_workers_per_host")
        if num_workers is not None and num_hosts is not None:
            raise ValueError("give num_workers or num_hosts, not both")
        if num_hosts is not None and (num_hosts < 1 or num_workers_per_host < 1):
            raise ValueError(f"num_hosts={num_hosts} and num_workers_per_host="
                             f"{num_workers_per_host} must both be at least 1")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be at least 1, got {num_workers}")
        if gpus_per_worker and not use_gpu:
            raise ValueError("gpus_per_worker needs use_gpu=True")
        self.settings = settings or self.create_settings()
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.num_workers = (num_workers if num_workers is not None
                            else num_hosts * num_workers_per_host)
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self.workers: list = []             # actor handles, in rank order
        self.slots: list[Slot] = []         # each worker's identity, in rank order
        self.placements: list[tuple] = []   # (node id, node ip, host name, pid), in rank order
        self._store: DriverStore | None = None
        self._pg = None
        self._own_pg = False

    # -- starting ---------------------------------------------------------------------------
    def _bundles(self) -> tuple[list[dict], str, list[int]]:
        """The placement group's bundles, its strategy, and each worker's bundle index."""
        per_worker = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            per_worker["GPU"] = self.gpus_per_worker
        if self.num_hosts is None:
            return ([dict(per_worker) for _ in range(self.num_workers)], "PACK",
                    list(range(self.num_workers)))
        per_host = {k: v * self.num_workers_per_host for k, v in per_worker.items()}
        return ([dict(per_host) for _ in range(self.num_hosts)], "STRICT_SPREAD",
                [h for h in range(self.num_hosts) for _ in range(self.num_workers_per_host)])

    def _placement_group(self):
        current = ray.util.get_current_placement_group()
        if self.use_current_placement_group and current is not None and self.num_hosts is None:
            return current, None, False
        bundles, strategy, index = self._bundles()
        pg = placement_group(bundles, strategy=strategy)
        try:
            ray.get(pg.ready(), timeout=self.settings.placement_group_timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(pg)
            raise TimeoutError(
                f"fuse.ray: the cluster did not grant {len(bundles)} bundle(s) of {bundles[0]} "
                f"({strategy}) within {self.settings.placement_group_timeout_s:g} s "
                f"(placement_group_timeout_s); it has {ray.available_resources()} free") from None
        return pg, index, True

    def start(self, executable_cls: type | None = None, executable_args: Sequence | None = None,
              executable_kwargs: dict | None = None, extra_env_vars: dict | None = None) -> None:
        """Place the workers, give them their ranks and environment, and create
        ``executable_cls(*executable_args, **executable_kwargs)`` in each (for :meth:`execute`)."""
        if self._elastic is not None:
            if executable_cls is not None:
                raise NotImplementedError("fuse.ray: an elastic RayExecutor (min_workers) runs "
                                          "functions only: use run(fn), not executable_cls")
            self._elastic.env_vars.update(extra_env_vars or {})
            self._elastic.start()
            return
        if self.workers:
            raise RuntimeError("fuse.ray: this RayExecutor is started already")
        pg, index, self._own_pg = self._placement_group()
        self._pg = pg
        actor_cls = ray.remote(FuseWorker)
        actors = []
        for i in range(self.num_workers):
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=pg,
                placement_group_bundle_index=index[i] if index is not None else -1)
            options = actor_cls.options(num_cpus=self.cpus_per_worker,
                                        num_gpus=self.gpus_per_worker,
                                        scheduling_strategy=strategy)
            actors.append(options.remote(i, self.num_workers))
        try:
            placements = self._get([a.placement.remote() for a in actors], self.settings.timeout_s,
                                   "start")
            nodes = [p[0] for p in placements]
            slots = slots_for_hosts(nodes, {p[0]: p[1] for p in placements})
            driver_node = ray.get_runtime_context().get_node_id()
            self._store = DriverStore(self._store_address(all(n == driver_node for n in nodes)))
            order = sorted(range(len(actors)), key=lambda i: slots[i].rank)
            self.workers = [actors[i] for i in order]
            self.slots = [slots[i] for i in order]
            self.placements = [placements[i] for i in order]
            envs = [self._store.job_env(s, self.settings.nics) for s in self.slots]
            self._get([w.set_job_env.remote({**e, **(extra_env_vars or {})})
                       for w, e in zip(self.workers, envs)], self.settings.timeout_s, "start")
            if executable_cls is not None:
                self._get([w.start_executable.remote(executable_cls, executable_args,
                                                     executable_kwargs)
                           for w in self.workers], None, "start")
        except BaseException:
            self.workers = actors   # every actor, so that shutdown() removes them all
            self.shutdown()
            raise

    def _store_address(self, driver_node_only: bool) -> str:
        nics = self.settings.nics
        if nics:
            return first_interface_address(nics, "fuse.ray")
        if driver_node_only:
            return "127.0.0.1"
        return ray.util.get_node_ip_address()

    # -- running ----------------------------------------------------------------------------
    def _require_started(self) -> None:
        if self._elastic is not None:
            raise NotImplementedError("fuse.ray: an elastic RayExecutor (min_workers) has no "
                                      "workers between runs; use run(fn)")
        if not self.workers:
            raise RuntimeError("fuse.ray: call start() first")

    def run_remote(self, fn: Callable[..., Any], args: Sequence | None = None,
                   kwargs: dict | None = None) -> list:
        """``fn(*args, **kwargs)`` on every worker; returns the ObjectRefs, in rank order."""
        self._require_started()
        return [w.run.remote(fn, tuple(args or ()), dict(kwargs or {})) for w in self.workers]

    def run(self, fn: Callable[..., Any], args: Sequence | None = None,
            kwargs: dict | None = None, callbacks: list | None = None) -> list:
        """``fn(*args, **kwargs)`` on every worker; returns the results in rank order."""
        if callbacks:
            raise NotImplementedError("fuse.ray: run(callbacks=...) is not supported; return "
                                      "what the driver needs from fn instead")
        if self._elastic is not None:   # the workers of the last generation, in rank order
            call_args, call_kwargs = tuple(args or ()), dict(kwargs or {})
            return self._elastic.run(lambda: fn(*call_args, **call_kwargs))
        return self._get(self.run_remote(fn, args, kwargs), None, "run")

    def execute(self, fn: Callable[[Any], Any], callbacks: list | None = None) -> list:
        """``fn(executable)`` on every worker (the object ``start(executable_cls=...)`` made,
        else None); returns the results in rank order."""
        if callbacks:
            raise NotImplementedError("fuse.ray: execute(callbacks=...) is not supported")
        self._require_started()
        return self._get([w.execute.remote(fn) for w in self.workers], None, "execute")

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 only."""
        self._require_started()
        return self._get([self.workers[0].execute.remote(fn)], None, "execute_single")[0]

    def _get(self, refs: list, timeout: float | None, what: str) -> list:
        """The values of ``refs`` (one per worker, in rank order).  When a worker fails, wait
        a little for the others, then raise the failure of the rank to blame."""
        results: dict[int, Any] = {}
        failed: dict[int, BaseException] = {}
        seen: list[int] = []
        index = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        deadline = None if timeout is None else time.monotonic() + timeout
        grace_end = None
        while pending:
            now = time.monotonic()
            limits = [t for t in (deadline, grace_end) if t is not None]
            if limits and now >= min(limits):
                break
            wait = min(1.0, min(limits) - now) if limits else 1.0
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=wait)
            for ref in sorted(done, key=index.get):
                i = index[ref]
                try:
                    results[i] = ray.get(ref)
                except Exception as err:        # RayTaskError, RayActorError, ...
                    failed[i] = err
                    seen.append(i)
            if failed and grace_end is None:
                grace_end = time.monotonic() + _FAILURE_GRACE_S
        if failed:
            blame = seen[0] if self._store is None else root_cause(seen, self._store.server)
            raise self._failure(blame, failed[blame], what)
        if pending:
            late = sorted(index[r] for r in pending)
            raise TimeoutError(f"fuse.ray: {what}: rank(s) {late} did not answer within "
                               f"{timeout:g} s (create_settings(timeout_s=...))")
        return [results[i] for i in range(len(refs))]

    def _describe(self, rank: int) -> str:
        if rank < len(self.placements):
            node, ip, host, pid = self.placements[rank]
            return (f"rank {rank} of {len(self.workers)} (Ray actor pid {pid} on {host}, "
                    f"node {ip} {node[:12]})")
        return f"worker {rank}"

    def _failure(self, rank: int, err: BaseException, what: str) -> BaseException:
        who = self._describe(rank)
        if isinstance(err, ray.exceptions.RayTaskError):
            cause = getattr(err, "cause", None)
            tb = str(err)
            if isinstance(cause, BaseException):
                name = type(cause).__qualname__
                wrapper = WorkerError(f"fuse.ray: {who} raised {name}: {cause}\n\n{tb}", rank,
                                      name, tb)
                if hasattr(cause, "add_note"):
                    cause.add_note(f"(raised by fuse.ray worker {who})")
                cause.__cause__ = wrapper
                return cause
            return WorkerError(f"fuse.ray: {who} failed: {tb}", rank, None, tb)
        if isinstance(err, ray.exceptions.RayActorError):
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            out = WorkerError(f"fuse.ray: {who} died during {what}(): its actor is gone "
                              f"({first})", rank)
            out.__cause__ = err
            return out
        out = WorkerError(f"fuse.ray: {who} failed during {what}(): {type(err).__name__}: {err}",
                          rank)
        out.__cause__ = err
        return out

    # -- stopping ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Kill the workers, release their placement group and stop the store."""
        if self._elastic is not None:
            self._elastic.shutdown()
            return
        for w in self.workers:
            try:
                ray.kill(w)
            except Exception:
                pass
        self.workers, self.slots, self.placements = [], [], []
        if self._pg is not None and self._own_pg:
            try:
                remove_placement_group(self._pg)
            except Exception:
                pass
        self._pg = None
        if self._store is not None:
            self._store.close()
            self._store = None


def _elastic_executor(settings, min_workers, max_workers, reset_limit, cooldown_range,
                      elastic_timeout, cpus_per_worker, use_gpu, gpus_per_worker,
                      override_discovery):
    """The ElasticRayExecutor that an elastic RayExecutor (``min_workers``) runs its jobs on;
    ``settings`` (from RayExecutor.create_settings) gives its start timeout and interfaces."""
    from .elastic import ElasticRayExecutor
    base = settings or RayExecutor.create_settings()
    elastic = ElasticRayExecutor.create_settings(
        min_np=min_workers, max_np=max_workers, reset_limit=reset_limit,
        elastic_timeout=elastic_timeout, timeout_s=base.timeout_s, nics=base.nics,
        cooldown_range=cooldown_range)
    return ElasticRayExecutor(elastic, use_gpu=use_gpu, cpus_per_slot=cpus_per_worker,
                              gpus_per_slot=gpus_per_worker,
                              override_discovery=override_discovery)
