"""Model-parallel (local) gradients, PartialDistributedGradientTape, Keras's
PartialDistributedOptimizer and BestModelCheckpoint, SyncBatchNormalization(fused=False)
(issue 24, items 11 and 16), on 2 real workers."""

import needs
import pytest

needs.module("tensorflow")

from tf_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _assert_clean(results, at_least):
    for rank, res in enumerate(results):
        assert not res["failures"], f"rank {rank}: " + "\n".join(res["failures"])
        assert len(res["done"]) >= at_least, res["done"]


def test_local_gradients_in_tapes():
    import workers_partial as w
    _assert_clean(run_job(w.tapes), 8)


def test_keras_partial_optimizer_checkpoint_and_sync_batch_norm(tmp_path):
    import workers_partial as w
    _assert_clean(run_job(w.keras_partial_and_checkpoint, args=(str(tmp_path),)), 6)
