"""``FuseStrategy``: Lightning 2.x training on fuse, where ``HorovodStrategy`` used to be.

What it does, as Lightning 1.x's ``HorovodStrategy`` did:

* one process per worker, started by ``fuserun`` (or Ray, Spark): Lightning starts nothing, and
  reads ranks and sizes from :class:`~fuse.lightning.environment.FuseEnvironment`;
* at the start of ``fit``: the learning rate of every optimizer (and its schedulers' base
  rates) multiplied by the number of workers, as Horovod did for the larger global batch
  (``scale_lr=False`` keeps the rates), rank 0's parameters and optimizer state broadcast,
  and each optimizer wrapped in fuse's ``DistributedOptimizer``;
* each step's gradients averaged while backward runs (the optimizer's hooks), and waited for
  right after the closure's backward, before gradient clipping and the optimizer step;
  ``accumulate_grad_batches`` becomes the optimizer's ``backward_passes_per_step``;
* checkpoints written by rank 0 only (Lightning's default for a strategy) and logging on rank 0
  only (``rank_zero_only``);
* ``sharded=True``: the optimizers wrapped with ``DistributedOptimizer(..., sharded=True)``
  (ZeRO stage 2: each worker holds the optimizer state of its share of the parameters);
  a checkpoint holds the full, consolidated optimizer state (every worker takes part in
  gathering it; rank 0 writes it), and norm clipping (``gradient_clip_val``) clips by the
  norm of the whole gradient, of which each worker holds a shard;
* ``reduce``, ``all_gather``, ``barrier`` and ``broadcast`` on fuse's collectives.

:class:`FuseStrategyBase` holds all of it without importing Lightning, because ``lightning``
and ``pytorch_lightning`` each have their own ``ParallelStrategy`` and each Trainer accepts
only its own: :mod:`fuse.lightning.bindings` and :mod:`fuse.lightning.pytorch_lightning` join
this base to each package's class, naming that package's environment class and rank-zero
switches.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Callable

import torch

import fuse.torch as hvd
from fuse.frameworks.torch.optimizer_wrapper import HookedOptimizer

from .environment import ensure_initialized

__all__ = ["FuseStrategyBase", "fuse_op"]

# Lightning's reduce_op spellings (strings, torch.distributed.ReduceOp) -> fuse's ops
_OPS = {"mean": hvd.Average, "avg": hvd.Average, "average": hvd.Average, "sum": hvd.Sum,
        "max": hvd.Max, "min": hvd.Min, "product": hvd.Product, "prod": hvd.Product}


def fuse_op(reduce_op: Any):
    """fuse's op for Lightning's ``reduce_op`` (None means the mean)."""
    if reduce_op is None:
        return hvd.Average
    name = reduce_op if isinstance(reduce_op, str) else getattr(reduce_op, "name", str(reduce_op))
    op = _OPS.get(str(name).lower().rsplit(".", 1)[-1])
    if op is None:
        raise ValueError(f"fuse.lightning: reduce_op={reduce_op!r} is not supported; use one of "
                         f"{sorted(_OPS)} (or torch.distributed.ReduceOp.SUM/MAX/MIN/PRODUCT)")
    return op


def _unwrapped(optimizer):
    """The optimizer under Lightning's wrapper (LightningOptimizer keeps it as _optimizer)."""
    return optimizer.__dict__.get("_optimizer", optimizer)


class FuseStrategyBase:
    """Data-parallel training over fuse: ``Trainer(strategy=FuseStrategy())`` (or
    ``strategy="fuse"`` once :mod:`fuse.lightning` is imported), started with
    ``fuserun -np N python train.py``.

    Args beyond Lightning's: ``scale_lr`` (default True, as Horovod did) multiplies every
    optimizer's learning rate by the number of workers when ``fit`` starts; ``compression``
    (``hvd.Compression.none``/``fp16``/``bf16``) and ``gradient_predivide_factor`` are handed
    to fuse's ``DistributedOptimizer``; ``sharded=True`` shards the optimizer state over the
    workers (``DistributedOptimizer(..., sharded=True)``).
    """

    strategy_name = "fuse"
    # set by each binding: its package's FuseEnvironment, and its rank_zero_only objects
    environment_cls: type = None
    rank_zero_switches: tuple = ()

    def __init__(self, accelerator=None, parallel_devices=None, checkpoint_io=None,
                 precision_plugin=None, scale_lr: bool = True,
                 compression=hvd.Compression.none, gradient_predivide_factor: float = 1.0,
                 sharded: bool = False):
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=self.environment_cls(), checkpoint_io=checkpoint_io,
                         precision_plugin=precision_plugin)
        self.scale_lr = scale_lr
        self.compression = compression
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sharded = sharded
        self._exit_stack: contextlib.ExitStack | None = None

    # -- who and where ----------------------------------------------------------------------
    @property
    def root_device(self) -> torch.device:
        devices = self.parallel_devices or [torch.device("cpu")]
        if devices[0].type == "cpu":
            return torch.device("cpu")
        # one GPU per worker, chosen by local rank as HorovodStrategy did: the local rank's
        # entry of the Trainer's devices when it lists that many, else GPU <local rank>
        if self.local_rank < len(devices):
            return devices[self.local_rank]
        return torch.device(devices[0].type, self.local_rank)

    @property
    def is_distributed(self) -> bool:
        return True     # Lightning then gives each worker its share of the data

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self) -> None:
        """Called while the Trainer is built: start fuse, and let Lightning's rank-zero-only
        helpers (logging, progress bars, warnings) know this worker's rank."""
        ensure_initialized()
        for switch in self.rank_zero_switches:
            switch.rank = self.global_rank

    def model_to_device(self) -> None:
        if self.root_device.type == "cuda":
            torch.cuda.set_device(self.root_device)
        assert self.model is not None
        self.model.to(self.root_device)

    # -- fit: broadcast, wrap, synchronize --------------------------------------------------
    def setup(self, trainer) -> None:
        super().setup(trainer)
        if trainer.state.fn != "fit":     # TrainerFn.FITTING, a str enum
            return
        optimizers = [_unwrapped(o) for o in self.optimizers]
        if self.scale_lr and self.world_size > 1:
            for optimizer in optimizers:
                for group in optimizer.param_groups:
                    group["lr"] *= self.world_size
            for config in self.lr_scheduler_configs:
                scheduler = config.scheduler
                if hasattr(scheduler, "base_lrs"):
                    scheduler.base_lrs = [lr * self.world_size for lr in scheduler.base_lrs]
        assert self.lightning_module is not None
        hvd.broadcast_parameters(self.lightning_module.state_dict(), root_rank=0)
        for optimizer in optimizers:
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        self.optimizers = [self._wrap(o, trainer.accumulate_grad_batches) for o in optimizers]
        # the strategy synchronizes after each closure (optimizer_step), so the optimizers'
        # own step() must not do it again
        self._exit_stack = contextlib.ExitStack()
        for optimizer in self.optimizers:
            if isinstance(optimizer, HookedOptimizer):
                self._exit_stack.enter_context(optimizer.skip_synchronize())
        if self.sharded:
            self._clip_sharded_gradients_by_norm()

    def _clip_sharded_gradients_by_norm(self) -> None:
        """Lightning clips by norm with ``torch.nn.utils.clip_grad_norm_`` over the optimizer's
        parameters (the precision plugin's ``clip_grad_by_norm``), which would see only this
        worker's shard of the gradient: the sharded optimizer's ``clip_grad_norm_`` takes the
        norm of the whole gradient instead.  (Clipping by value is element by element: each
        worker clips its shard, as Lightning does.)"""
        plugin = self.precision_plugin

        def clip_grad_by_norm(optimizer, clip_val, norm_type: float = 2.0):
            _unwrapped(optimizer).clip_grad_norm_(clip_val, norm_type)
        plugin.clip_grad_by_norm = clip_grad_by_norm

    def _wrap(self, optimizer, accumulate_grad_batches: int):
        if isinstance(optimizer, HookedOptimizer):
            return optimizer
        mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
        assert self.lightning_module is not None
        named = [(n, p) for n, p in self.lightning_module.named_parameters() if id(p) in mine]
        return hvd.DistributedOptimizer(optimizer, named_parameters=named,
                                        compression=self.compression,
                                        backward_passes_per_step=accumulate_grad_batches,
                                        gradient_predivide_factor=self.gradient_predivide_factor,
                                        sharded=self.sharded)

    def optimizer_step(self, optimizer, closure: Callable[[], Any], model=None, **kwargs: Any):
        """Run the closure (forward and backward; the gradients' allreduces start during
        backward), wait for the averaged gradients, then let Lightning clip and step.  With
        manual optimization the closure does nothing and backward ran before: the wait is the
        same."""
        inner = _unwrapped(optimizer)

        def synchronized_closure():
            result = closure()
            if isinstance(inner, HookedOptimizer):
                inner.synchronize()
            return result
        return super().optimizer_step(optimizer, synchronized_closure, model, **kwargs)

    # -- collectives ------------------------------------------------------------------------
    def reduce(self, tensor, group: Any | None = None, reduce_op: Any = "mean"):
        if group is not None:
            raise ValueError("fuse.lightning: reduce over a process group is not supported; "
                             "leave group unset (every worker takes part)")
        if not isinstance(tensor, torch.Tensor):
            return tensor
        return hvd.allreduce(tensor, op=fuse_op(reduce_op))

    def all_gather(self, tensor: torch.Tensor, group: Any | None = None,
                   sync_grads: bool = False) -> torch.Tensor:
        """Every worker's ``tensor``, stacked: shape ``(world_size, *tensor.shape)``, as
        Lightning's other strategies return it (Horovod's concatenated along dim 0)."""
        if group is not None:
            raise ValueError("fuse.lightning: all_gather over a process group is not "
                             "supported; leave group unset (every worker takes part)")
        with contextlib.nullcontext() if sync_grads else torch.no_grad():
            return hvd.allgather(tensor.unsqueeze(0))

    def barrier(self, name: str | None = None) -> None:
        hvd.barrier()

    def broadcast(self, obj, src: int = 0):
        return hvd.broadcast_object(obj, root_rank=src)

    # -- end --------------------------------------------------------------------------------
    def teardown(self) -> None:
        if self._exit_stack is not None:
            self._exit_stack.close()
            self._exit_stack = None
        for optimizer in self.optimizers:
            inner = _unwrapped(optimizer)
            if isinstance(inner, HookedOptimizer):
                inner.remove_hooks()
        # every worker has finished before fit() returns to the script (Horovod joined here)
        hvd.barrier()
        super().teardown()

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        strategy_registry.register("fuse", cls, description="data-parallel training on fuse "
                                   "(workers started by fuserun)", override=True)


def _joined(name: str, bases: tuple, namespace: dict) -> type:
    """The class ``name`` of ``bases`` with ``namespace``, as ``type()`` makes it; through
    ``types.new_class`` so that a base standing in for a class (``__mro_entries__``: the docs
    build mocks Lightning where it is not installed) is resolved instead of refused."""
    return types.new_class(name, bases, exec_body=lambda ns: ns.update(namespace))


def bind(cluster_environment, parallel_strategy, registry, rank_zero_switches, module: str):
    """``(FuseEnvironment, FuseStrategy)`` for one Lightning package: each package's Trainer
    takes only its own classes, so the behaviour above is joined to the given package's
    ``ClusterEnvironment`` and ``ParallelStrategy``, and ``strategy="fuse"`` registered in its
    ``StrategyRegistry``.  ``rank_zero_switches``: the package's ``rank_zero_only`` objects
    whose rank the strategy sets.  ``module``: where the classes are bound (so that they
    pickle by name)."""
    from .environment import FuseEnvironmentBase
    environment = _joined("FuseEnvironment", (FuseEnvironmentBase, cluster_environment),
                          {"__doc__": FuseEnvironmentBase.__doc__, "__module__": module})
    strategy = _joined("FuseStrategy", (FuseStrategyBase, parallel_strategy),
                       {"__doc__": FuseStrategyBase.__doc__, "__module__": module,
                        "environment_cls": environment,
                        "rank_zero_switches": tuple(rank_zero_switches)})
    strategy.register_strategies(registry)
    return environment, strategy
