"""Ray Tune on fuse: ``DistributedTrainableCreator``, the entry ``horovod.ray.tune`` had.

It turns a training function into a Tune trainable whose every trial is a fuse job of its
own: the trial runs a :class:`~fuse.ray.train.FuseTrainer` on ``num_hosts * num_workers``
workers (``num_workers`` when ``num_hosts`` is unset), each calling the function with the
trial's config.  What rank 0 reports with ``ray.train.report`` reaches Tune (Ray's
``TuneReportCallback``), checkpoints included, so Tune's searchers and schedulers see every
report of the trial.

Horovod's functions took ``(config, checkpoint_dir=None)`` and reported with
``tune.report``; here a function may still take ``checkpoint_dir`` (it gets the directory of
the trial's last checkpoint, or None), and reports with ``ray.train.report``: Ray 2.x no longer
lets a Train worker report to Tune directly.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable

import ray
from ray import tune

from .train import FuseConfig, FuseTrainer

__all__ = ["DistributedTrainableCreator"]


def _per_worker(func: Callable[..., Any]) -> Callable[[dict], Any]:
    """``func`` as a Ray Train loop: Horovod's ``checkpoint_dir`` argument filled in from
    ``ray.train.get_checkpoint()`` when ``func`` takes one."""
    if "checkpoint_dir" not in inspect.signature(func).parameters:
        return func

    def loop(config):
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return func(config, checkpoint_dir=None)
        with checkpoint.as_directory() as path:
            return func(config, checkpoint_dir=path)
    return loop


def DistributedTrainableCreator(func: Callable[..., Any], use_gpu: bool = False,
                                num_hosts: int | None = None, num_workers: int = 1,
                                num_cpus_per_worker: int = 1, timeout_s: int = 30,
                                replicate_pem: bool = False) -> Callable[[dict], None]:
    """A Tune trainable running ``func(config)`` as a fuse job of ``num_hosts * num_workers``
    workers (Horovod's signature; ``replicate_pem`` is accepted and unused: nothing goes over
    ssh).  Pass it to ``tune.Tuner(...)`` (or ``tune.run``); the trial itself holds one CPU
    while its workers train."""
    if num_workers < 1 or (num_hosts is not None and num_hosts < 1):
        raise ValueError(f"fuse.ray.tune: num_workers={num_workers} and num_hosts={num_hosts} "
                         "must be at least 1")
    total = num_workers * (num_hosts or 1)
    loop = _per_worker(func)

    def trainable(config: dict) -> None:
        from ray.train import RunConfig, ScalingConfig
        from ray.tune.integration.ray_train import TuneReportCallback
        context = tune.get_context()
        trainer = FuseTrainer(
            loop, train_loop_config=config,
            fuse_config=FuseConfig(timeout_s=max(timeout_s, 30)),
            scaling_config=ScalingConfig(num_workers=total, use_gpu=use_gpu,
                                         resources_per_worker={"CPU": num_cpus_per_worker}),
            run_config=RunConfig(name=f"fuse-{context.get_trial_id()}",
                                 storage_path=os.path.join(context.get_trial_dir(), "fuse"),
                                 callbacks=[TuneReportCallback()]))
        trainer.fit()

    trainable.__name__ = f"Distributed{getattr(func, '__name__', 'Trainable')}"
    trainable.__qualname__ = trainable.__name__
    return trainable
