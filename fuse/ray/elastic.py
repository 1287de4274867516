"""Elastic jobs on Ray: ``ElasticRayExecutor`` (and ``RayExecutor(min_workers=...)``).

The job is fuse's elastic driver (:class:`fuse.runner.elastic.driver.ElasticJob`), with two
things changed for Ray:

* hosts come from the cluster itself (:class:`RayHostDiscovery`): every alive node, with as
  many slots as its CPUs (GPUs) hold ``cpus_per_slot`` (``gpus_per_slot``); a node's id is its
  host name, so two nodes on one machine are two hosts, and a node that leaves or joins the
  cluster shrinks or grows the job at the driver's next discovery;
* a worker is a Ray actor pinned to its node (:class:`RayActorStarter`, the job's starter), not
  a process: its exit is the end of its ``run_elastic`` call, and a dead actor (its process
  killed, its node gone) counts as a worker killed by SIGKILL, which blacklists its node as any
  failed host.

Everything else (generations, the blacklist, the reset limit, the elastic timeout, how the
survivors re-form) is the driver's, as for ``fuserun --min-np``.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from typing import Any, Callable, Mapping, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fuse.runner.elastic.driver import ElasticJob, ElasticJobError, ElasticSettings
from fuse.cluster.hosts import HostSpec, Slot, first_interface_address
from fuse.runner.job import Settings
from fuse.cluster.elastic_protocol import worker_id
from fuse.runner.starter import PolledHandle, WorkerStarter

from .worker import FuseWorker

__all__ = ["ElasticRayExecutor", "ElasticRaySettings", "RayHostDiscovery", "RayActorStarter"]


class RayHostDiscovery:
    """The Ray cluster's alive nodes as hosts: node id -> how many slots its resources hold."""

    def __init__(self, use_gpu: bool = False, cpus_per_slot: int = 1,
                 gpus_per_slot: int | None = None):
        if cpus_per_slot < 0 or (use_gpu and (gpus_per_slot or 1) < 1):
            raise ValueError(f"cpus_per_slot={cpus_per_slot} and gpus_per_slot={gpus_per_slot} "
                             "must be positive")
        self.use_gpu = use_gpu
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = (gpus_per_slot or 1) if use_gpu else 0

    def describe(self) -> str:
        return "the Ray cluster's alive nodes"

    def slots(self, resources: Mapping[str, float]) -> int:
        counts = []
        if self.cpus_per_slot:
            counts.append(int(resources.get("CPU", 0) // self.cpus_per_slot))
        if self.gpus_per_slot:
            counts.append(int(resources.get("GPU", 0) // self.gpus_per_slot))
        return min(counts) if counts else 0

    def find(self) -> list[HostSpec]:
        hosts = []
        for node in ray.nodes():
            if node.get("Alive") and node.get("NodeID"):
                n = self.slots(node.get("Resources") or {})
                if n > 0:
                    hosts.append(HostSpec(node["NodeID"], n))
        return hosts

    # Horovod's HostDiscovery interface, for scripts that call it
    def find_available_hosts_and_slots(self) -> dict[str, int]:
        return {h.hostname: h.slots for h in self.find()}


@dataclasses.dataclass
class ElasticRaySettings:
    """What :meth:`ElasticRayExecutor.create_settings` makes.  ``timeout_s`` bounds the start
    of one worker (its actor placed on its node and answering)."""
    min_np: int = 1
    max_np: int | None = None
    reset_limit: int | None = None
    cooldown_range: tuple[int, int] | None = None
    elastic_timeout: float = 600
    timeout_s: float = 30
    nics: Sequence[str] | None = None
    ssh_identity_file: str | None = None       # Horovod's; unused (nothing goes over ssh)
    verbose: bool = False


class _ActorHandle(PolledHandle):
    """A worker actor seen as the process the elastic driver expects: ``poll()`` and ``wait()``
    give its exit code once its ``run_elastic`` call ended (0: returned or left the job;
    1: raised; -SIGKILL: the actor died or did not start in time)."""

    def __init__(self, actor, placed, call, start_timeout: float):
        self.actor, self._placed, self._call = actor, placed, call
        self._start_deadline = time.monotonic() + start_timeout
        self._start_timeout = start_timeout
        self.started = False
        self.returncode: int | None = None
        self.outcome: tuple | None = None       # ("ok", rank, value) or ("removed", ...)
        self.error: BaseException | None = None
        self.why: str | None = None             # one line on how it ended, for a failure

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if not self.started:
            if ray.wait([self._placed], timeout=0)[0]:
                self.started = True
            elif time.monotonic() >= self._start_deadline:
                self.kill()
                self.why = (f"its actor was not placed within {self._start_timeout:g} s "
                            "(create_settings(timeout_s=...))")
                self.returncode = -signal.SIGKILL
                return self.returncode
        if ray.wait([self._call], timeout=0)[0]:
            self._settle()
        return self.returncode

    def _settle(self) -> None:
        try:
            self._outcome()
        finally:
            self.kill()     # an actor left idle would keep its CPUs from the next generation

    def _outcome(self) -> None:
        try:
            self.outcome = ray.get(self._call)
            self.returncode = 0
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            self.error = cause if isinstance(cause, BaseException) else err
            self.why = f"raised {type(self.error).__name__}: {self.error}".splitlines()[0]
            self.returncode = 1
        except ray.exceptions.RayError as err:      # the actor died, or its node
            self.error = err
            text = str(err).strip()
            self.why = f"its actor died ({text.splitlines()[0] if text else type(err).__name__})"
            self.returncode = -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int:
        ray.wait([self._call], timeout=timeout)
        return super().wait(0 if timeout is not None else None)

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        self.kill()         # an actor takes no signals: any stop is ray.kill

    def stderr_tail(self) -> list[str]:
        return [self.why] if self.why else []

    def kill(self) -> None:
        try:
            ray.kill(self.actor)
        except Exception:
            pass


class RayActorStarter(WorkerStarter):
    """Starts each worker as an actor running ``func()`` on the node its slot names (host
    names are Ray node ids, as :class:`RayHostDiscovery` gives them); keeps the handles, whose
    outcomes are the job's results."""

    def __init__(self, func: Callable[[], Any], settings: ElasticRaySettings,
                 cpus_per_slot: float = 1, gpus_per_slot: float = 0,
                 env_vars: Mapping[str, str] | None = None):
        self.func = func
        self.ray_settings = settings
        self.cpus_per_slot, self.gpus_per_slot = cpus_per_slot, gpus_per_slot
        self.env_vars = {str(k): str(v) for k, v in (env_vars or {}).items()}
        self.handles: dict[str, _ActorHandle] = {}      # worker id -> its last actor

    def start(self, slot: Slot, env: Mapping[str, str]) -> _ActorHandle:
        env = {**env, **self.env_vars}      # the job's identity and store, and the caller's
        try:
            actor = _actor_class().options(
                num_cpus=self.cpus_per_slot, num_gpus=self.gpus_per_slot,
                scheduling_strategy=NodeAffinitySchedulingStrategy(slot.hostname, soft=False)
            ).remote(slot.rank, slot.size)
            handle = _ActorHandle(actor, actor.placement.remote(),
                                  actor.run_elastic.remote(dict(env), self.func),
                                  self.ray_settings.timeout_s)
        except Exception as err:
            raise OSError(f"could not start a Ray actor: {err}") from err
        self.handles[worker_id(slot.hostname, slot.local_rank)] = handle
        return handle

    def results(self, succeeded: set[str]) -> list:
        """The return values of the workers in ``succeeded`` (the last generation's, by worker
        id), in their final rank order."""
        done = [(h.outcome[1], h.outcome[2]) for wid, h in self.handles.items()
                if wid in succeeded and h.outcome is not None and h.outcome[0] == "ok"]
        return [value for _rank, value in sorted(done, key=lambda rv: rv[0])]

    def first_error(self) -> BaseException | None:
        """The first exception a worker raised (not an actor that died), if any."""
        for h in self.handles.values():
            if h.returncode == 1 and h.error is not None:
                return h.error
        return None


def _actor_class():
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = ray.remote(FuseWorker)
    return _ACTOR


_ACTOR = None


def store_address(nics: Sequence[str] | None) -> str:
    """Where the actors reach the driver's store: the first of ``nics`` that has an address
    here, else the driver's node address (a node added later may be on another machine)."""
    if nics:
        return first_interface_address(nics, "fuse.ray")
    return ray.util.get_node_ip_address()


class ElasticRayExecutor:
    """Horovod's elastic executor on Ray: workers on every slot of the cluster's alive nodes
    (between ``min_np`` and ``max_np``), re-formed when a node leaves, a worker dies or a node
    joins.  ``worker_fn`` should train under ``fuse.<framework>.elastic.run``.

    ``settings`` comes from :meth:`create_settings`; ``env_vars`` are set in every worker.
    ``override_discovery=False`` (a discovery of one's own) is not supported.
    """

    @staticmethod
    def create_settings(min_np: int | None = None, max_np: int | None = None,
                        reset_limit: int | None = None, elastic_timeout: float = 600,
                        timeout_s: float = 30, ssh_identity_file: str | None = None,
                        nics: Sequence[str] | str | None = None, min_num_proc: int | None = None,
                        max_num_proc: int | None = None,
                        cooldown_range: tuple[int, int] | None = None,
                        verbose: bool | int = False) -> ElasticRaySettings:
        """Horovod's arguments; ``min_num_proc``/``max_num_proc`` are the newer names of
        ``min_np``/``max_np``."""
        for a, b, name in ((min_np, min_num_proc, "min_np"), (max_np, max_num_proc, "max_np")):
            if a is not None and b is not None and a != b:
                raise ValueError(f"{name}={a} and {name.replace('np', 'num_proc')}={b} "
                                 "disagree; give one of them")
        lo = min_np if min_np is not None else (min_num_proc if min_num_proc is not None else 1)
        hi = max_np if max_np is not None else max_num_proc
        if lo < 1:
            raise ValueError(f"min_np must be at least 1, got {lo}")
        if hi is not None and hi < lo:
            raise ValueError(f"max_np={hi} is below min_np={lo}")
        if reset_limit is not None and reset_limit < 0:
            raise ValueError(f"reset_limit must be at least 0, got {reset_limit}")
        if isinstance(nics, str):
            nics = [n.strip() for n in nics.split(",") if n.strip()]
        return ElasticRaySettings(min_np=lo, max_np=hi, reset_limit=reset_limit,
                                  cooldown_range=tuple(cooldown_range) if cooldown_range
                                  else None, elastic_timeout=elastic_timeout,
                                  timeout_s=timeout_s, nics=list(nics) if nics else None,
                                  ssh_identity_file=ssh_identity_file, verbose=bool(verbose))

    def __init__(self, settings: ElasticRaySettings, use_gpu: bool = False,
                 cpus_per_slot: int = 1, gpus_per_slot: int | None = None,
                 env_vars: Mapping[str, str] | None = None, override_discovery: bool = True):
        if not isinstance(settings, ElasticRaySettings):
            raise TypeError("fuse.ray.ElasticRayExecutor: settings must come from "
                            "ElasticRayExecutor.create_settings(...)")
        if not override_discovery:
            raise NotImplementedError("fuse.ray.ElasticRayExecutor: override_discovery=False "
                                      "(a discovery of your own) is not supported; the "
                                      "cluster's nodes are the hosts")
        if gpus_per_slot and not use_gpu:
            raise ValueError("gpus_per_slot needs use_gpu=True")
        self.settings = settings
        self.use_gpu = use_gpu
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = (gpus_per_slot or 1) if use_gpu else 0
        self.env_vars = dict(env_vars or {})
        self.discovery = RayHostDiscovery(use_gpu, cpus_per_slot, gpus_per_slot)
        self.started = False
        self.last_job: ElasticJob | None = None         # the job of the last run()

    def start(self) -> None:
        """Check that Ray is up (``ray.init()`` first); the workers start with each run()."""
        if not ray.is_initialized():
            raise RuntimeError("fuse.ray.ElasticRayExecutor: call ray.init() before start()")
        self.started = True

    def run(self, worker_fn: Callable[[], Any], callbacks: list | None = None) -> list:
        """Run ``worker_fn()`` on the workers until those of the last generation return; returns
        their results in rank order.  Raises RuntimeError when the job cannot go on (too few
        slots for ``elastic_timeout``, ``reset_limit`` reached, every worker failed), chained
        from the first exception a worker raised, if one did."""
        if callbacks:
            raise NotImplementedError("fuse.ray: run(callbacks=...) is not supported; return "
                                      "what the driver needs from worker_fn instead")
        if not self.started:
            raise RuntimeError("fuse.ray.ElasticRayExecutor: call start() first")
        s = self.settings
        elastic = ElasticSettings(min_np=s.min_np, max_np=s.max_np, reset_limit=s.reset_limit,
                                  cooldown_range=s.cooldown_range,
                                  elastic_timeout=s.elastic_timeout)
        starter = RayActorStarter(worker_fn, s, self.cpus_per_slot, self.gpus_per_slot,
                                  self.env_vars)
        try:
            job = ElasticJob(["<fuse.ray actor>"], self.discovery, elastic,
                             settings=Settings(name="fuse.ray", verbose=s.verbose,
                                               network_interfaces=s.nics),
                             store_addr=store_address(s.nics), starter=starter)
        except ElasticJobError as err:
            raise RuntimeError(f"fuse.ray: {err}") from None
        self.last_job = job
        with job:
            result = job.run()
        job.raise_for(result, RuntimeError, starter.first_error())
        return starter.results(job.succeeded)

    def shutdown(self) -> None:
        """Nothing to release between runs: each run's actors end with it."""
        self.started = False
