"""Model-parallel (local) gradients, PartialDistributedGradientTape, Keras's
PartialDistributedOptimizer and BestModelCheckpoint, SyncBatchNormalization(fused=False)
(issue 24, items 11 and 16), and op=Adasum (item 15), on 2 real workers."""

import needs
import numpy as np
import pytest

needs.module("tensorflow")

from adasum_util import pair  # noqa: E402
from tf_util import assert_clean, run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_local_gradients_in_tapes():
    import workers_tf_partial as w
    assert_clean(run_job(w.tapes), 8)


def test_keras_partial_optimizer_checkpoint_and_sync_batch_norm(tmp_path):
    import workers_tf_partial as w
    assert_clean(run_job(w.keras_partial_and_checkpoint, args=(str(tmp_path),)), 6)


def test_adasum_in_tensorflow():
    import workers_tf_partial as w
    results = run_job(w.adasum)
    ins = [res["inputs"] for res in results]
    for res in results:
        for mode in ("eager", "function", "graph"):
            np.testing.assert_allclose(res[mode], pair(*ins), rtol=1e-5, atol=1e-6,
                                       err_msg=mode)
        np.testing.assert_allclose(res["tape"], pair(*[2 * np.asarray(i) for i in ins]),
                                   rtol=1e-5, atol=1e-6)
