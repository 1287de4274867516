"""fuse.torch with op=Adasum (issue 24, item 15) on 2 real workers, against a NumPy reference
of Horovod's pairwise formula: allreduce, its gradient, and DistributedOptimizer, which
combines the workers' optimizer steps (start + Adasum of the updates), as Horovod's does."""

import numpy as np
import needs
import pytest

torch = needs.module("torch")

from adasum_util import pair  # noqa: E402
from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)



def test_adasum_allreduce_and_optimizer():
    import workers_torch_adasum as w
    results = run_job(w.adasum)
    ins = [res["inputs"] for res in results]
    for res in results:
        np.testing.assert_allclose(res["allreduce"], pair(*ins), rtol=1e-5, atol=1e-6)
        # the gradient of allreduce(op=Adasum) is the Adasum of the upstream gradients
        np.testing.assert_allclose(res["grad_is_adasum_of_ones"], np.ones(11), rtol=1e-6)
        assert res["isinstance"]
        assert "not supported" in res["skip"]
        for k, start in enumerate(res["start"]):
            updates = [-0.5 * np.asarray(other["grads"][k]) for other in results]
            np.testing.assert_allclose(res["after"][k], np.asarray(start) + pair(*updates),
                                       rtol=1e-5, atol=1e-6)
        assert res["after"] == results[0]["after"]
