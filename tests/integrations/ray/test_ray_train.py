"""fuse.ray.train on a real local Ray cluster (one per module): FuseTrainer fits with Ray Train's
reports and checkpoints and trains to the combined-batch weights, and after a worker is killed
Ray Train starts a new worker group that resumes from the last checkpoint (workers_ray_train.py
is the training function)."""

import os
import sys

import needs
import pytest

ray = needs.module("ray")
needs.module("ray.train", "ray")      # Ray's train and tune extras (pandas, pydantic, ...)
needs.module("ray.tune", "ray")
needs.module("torch")

import workers_ray_train  # noqa: E402

from ray.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from fuse.ray.train import FuseTrainer  # noqa: E402

# the workers import nothing from tests/: the functions travel by value, as a script's do
ray.cloudpickle.register_pickle_by_value(workers_ray_train)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster for the whole module (Ray starts slowly): 2 workers of 1 CPU, and
    one more CPU for a Tune trial's own process."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("FUSE_", "HOROVOD_"))}
    for k in env:       # the workers inherit the driver's environment: no outer job's identity
        del os.environ[k]
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        os.environ.update(env)


def _weights_close(mine, theirs):
    for a, b in zip(mine, theirs):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


def test_fit_resumes_from_its_checkpoint_after_a_worker_is_killed(cluster, tmp_path):
    marker = str(tmp_path / "killed")
    trainer = FuseTrainer(
        workers_ray_train.train_loop,
        train_loop_config={"kill_at": 2, "marker": marker},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="fuse_kill", storage_path=str(tmp_path / "results"),
                             failure_config=FailureConfig(max_failures=1)))
    result = trainer.fit()
    assert os.path.exists(marker), "rank 1 was never killed: the test did not test recovery"
    assert result.error is None, result.error
    metrics = result.metrics
    assert metrics["epoch"] == workers_ray_train.EPOCHS - 1
    assert metrics["size"] == 2 and metrics["rank"] == 0
    # the second worker group resumed from a checkpoint, not from scratch: epoch 1's, or
    # epoch 0's when Ray Train had not registered epoch 1's when the worker died (it takes
    # reports in asynchronously)
    assert metrics["started_at"] in (1, 2), metrics
    assert result.checkpoint is not None
    # and the job trained to the weights of one process with both ranks' data, kill or not
    _weights_close(metrics["weights"], workers_ray_train.reference_weights())


def test_tune_search_of_two_trials_on_two_workers_each(cluster, tmp_path):
    from ray import tune
    from fuse.ray.tune import DistributedTrainableCreator

    trainable = DistributedTrainableCreator(workers_ray_train.tune_loop, num_workers=2)
    tuner = tune.Tuner(trainable, param_space={"lr": tune.grid_search([0.001, 0.1])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min",
                                                   max_concurrent_trials=1),
                       run_config=tune.RunConfig(name="fuse_tune",
                                                 storage_path=str(tmp_path / "tune")))
    results = tuner.fit()
    assert not results.errors, results.errors
    assert len(results) == 2
    assert all(r.metrics["size"] == 2 and r.metrics["epoch"] == 2 for r in results)
    # a larger step descends faster on this quadratic: the search must find it
    assert results.get_best_result().config == {"lr": 0.1}
