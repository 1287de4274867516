"""Ray Train on fuse: ``FuseTrainer`` where a script had Ray's removed ``HorovodTrainer``.

Built on Ray Train's documented extension points: :class:`FuseConfig` is a
``ray.train.backend.BackendConfig`` whose :class:`FuseBackend` (a ``ray.train.backend.Backend``)
sets fuse up on each worker group Ray Train starts, and :class:`FuseTrainer` is a
``DataParallelTrainer`` with that backend.  Ray Train keeps what it does for every trainer:
the workers (``ScalingConfig``), ``ray.train.report`` and its checkpoints, dataset shards, and
failure handling (``RunConfig(failure_config=FailureConfig(max_failures=...))`` starts a new
worker group, set up again by the backend, whose training function resumes from
``ray.train.get_checkpoint()``).

What the backend does when a worker group starts: it asks each worker which node it landed on,
gives ranks by node as ``fuserun`` does (:func:`fuse.runner.worker_env.slots_for_hosts`), starts
the job's rendezvous store in the process that runs the backend (Ray Train's controller), and
hands each worker its identity, the store's address and the job's secret in its environment;
the training function then calls ``hvd.init()`` as under ``fuserun``.  When the group stops,
fuse is shut down on the workers that are still there and the store is closed.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

import ray
from ray.train.backend import Backend, BackendConfig

from fuse.cluster.hosts import first_interface_address
from fuse.runner.worker_env import DriverStore, slots_for_hosts

try:    # Ray Train v2 (the default since Ray 2.5x) or, with RAY_TRAIN_V2_ENABLED=0, v1
    from ray.train.v2._internal.constants import is_v2_enabled as _is_v2_enabled
except ImportError:     # a Ray without v2
    def _is_v2_enabled() -> bool:
        return False

if _is_v2_enabled():
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
else:
    from ray.train.data_parallel_trainer import DataParallelTrainer

__all__ = ["FuseConfig", "FuseBackend", "FuseTrainer", "HorovodConfig"]


@dataclasses.dataclass
class FuseConfig(BackendConfig):
    """How fuse is set up on Ray Train's workers (Horovod's ``HorovodConfig`` fields).

    ``nics``: the network interfaces the workers use (the first one's address is the store's);
    ``timeout_s``: how long the backend waits for the workers to answer while setting up.
    ``verbose``, ``key``, ``ssh_port``, ``ssh_identity_file``, ``ssh_str`` and
    ``placement_group_timeout_s`` are Horovod's and unused: Ray Train places and starts the
    workers, nothing goes over ssh, and fuse makes the job's secret itself.
    """
    nics: Sequence[str] | None = None
    verbose: int = 1
    key: str | None = None
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    ssh_str: str | None = None
    timeout_s: int = 300
    placement_group_timeout_s: int = 100

    @property
    def backend_cls(self):
        return FuseBackend


# Horovod's name, for scripts that build one
HorovodConfig = FuseConfig


def _placement() -> tuple[str, str]:
    """(Ray node id, node IP) of the worker this runs on."""
    return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


def _take_job_env(job_env: dict[str, str]) -> int:
    """On a worker: set its fuse identity, store and secret, plus its host's thread budget."""
    from fuse.runner.worker_env import worker_env
    os.environ.update(worker_env(job_env))
    return int(job_env["FUSE_RANK"])


def _shutdown_fuse() -> None:
    """On a worker: end fuse if the training function started it and did not end it."""
    import fuse
    if fuse.is_initialized():
        fuse.shutdown()


class FuseBackend(Backend):
    """Sets fuse up on a Ray Train worker group (see the module's docstring).  Ray makes one
    instance per process (``Backend`` is a singleton), so it keeps at most one store: a new
    worker group (after a failure) gets a new store and the old one is closed."""

    _store: DriverStore | None = None
    # every worker on a node sees all the node's GPUs (Ray sets CUDA_VISIBLE_DEVICES so), as
    # with Horovod's backend: scripts pick theirs with torch.cuda.set_device(hvd.local_rank())
    share_cuda_visible_devices = True

    def on_start(self, worker_group, backend_config: FuseConfig) -> None:
        self._close_store()
        timeout = backend_config.timeout_s
        n = len(worker_group)
        placements = ray.get([worker_group.execute_single_async(i, _placement) for i in range(n)],
                             timeout=timeout)
        nodes = [node for node, _ in placements]
        slots = slots_for_hosts(nodes, dict(placements))
        nics = list(backend_config.nics) if backend_config.nics else None
        if nics:
            addr = first_interface_address(nics, "fuse.ray.train")
        elif all(node == ray.get_runtime_context().get_node_id() for node in nodes):
            addr = "127.0.0.1"
        else:
            addr = ray.util.get_node_ip_address()
        self._store = DriverStore(addr)
        ray.get([worker_group.execute_single_async(i, _take_job_env,
                                                   self._store.job_env(slots[i], nics))
                 for i in range(n)], timeout=timeout)

    def on_shutdown(self, worker_group, backend_config: FuseConfig) -> None:
        try:
            worker_group.execute(_shutdown_fuse)
        finally:     # a crashed worker makes the call above fail: the store goes all the same
            self._close_store()

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


class FuseTrainer(DataParallelTrainer):
    """A Ray Train trainer whose workers run fuse: ``FuseTrainer(train_loop_per_worker,
    scaling_config=ScalingConfig(num_workers=2))`` where a script had ``HorovodTrainer``.

    ``train_loop_per_worker`` (taking nothing, or ``train_loop_config``) calls ``hvd.init()``
    (``import fuse.torch as hvd``) and trains as under ``fuserun``; it reports and checkpoints
    with ``ray.train.report`` and resumes with ``ray.train.get_checkpoint()``.
    ``fuse_config`` (or Horovod's spelling ``horovod_config``) is a :class:`FuseConfig`; the
    other arguments are ``DataParallelTrainer``'s.
    """

    def __init__(self, train_loop_per_worker: Callable[[], Any] | Callable[[dict], Any], *,
                 train_loop_config: dict | None = None, fuse_config: FuseConfig | None = None,
                 horovod_config: FuseConfig | None = None, scaling_config=None,
                 run_config=None, datasets: dict | None = None, dataset_config=None,
                 resume_from_checkpoint=None, metadata: dict | None = None):
        if fuse_config is not None and horovod_config is not None:
            raise ValueError("fuse.ray.train: give fuse_config or horovod_config, not both")
        config = fuse_config or horovod_config or FuseConfig()
        if not isinstance(config, FuseConfig):
            raise TypeError(f"fuse.ray.train: fuse_config must be a FuseConfig, got "
                            f"{type(config).__name__}")
        kwargs = dict(train_loop_config=train_loop_config, backend_config=config,
                      scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                      dataset_config=dataset_config, resume_from_checkpoint=resume_from_checkpoint)
        if metadata is not None:
            kwargs["metadata"] = metadata
        super().__init__(train_loop_per_worker, **kwargs)
