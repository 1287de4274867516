"""DistributedOptimizer, broadcast helpers and SyncBatchNorm on 2 real workers."""

import needs
import pytest

torch = needs.module("torch")

from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_numerical_equivalence_with_one_process():
    import workers_torch_optimizer as w
    for res in run_job(w.equivalence):
        assert res["sgd"] < 2e-5, res
        assert res["adam"] < 2e-5, res
        assert res["bpps2"] < 2e-5, res


def test_gradient_layout_spares_the_fusion_buffer():
    import workers_torch_optimizer as w
    results = run_job(w.gradient_layout)
    assert len(results) == 2
    for res in (r[label] for r in results for label in ("hooks", "one group")):
        assert res["diff"] < 2e-5, res
        # the two hidden weights (64 KiB, 256 KiB) fuse; the rest is small and travels inline
        assert res["fusable"] == [True, False, True, False, False, False], res
        assert res["slot_bytes"] == (64 * 256 + 256 * 256) * 4, res
        assert res["storages"] == 1, res           # their gradients share one buffer
        assert sum(res["copied"][1:]) == 0, res      # after the first step nothing is copied
        # from the second step on, backward writes the two weights' gradients into their
        # slots (set_to_none=True: steps 1-9) or accumulates into them (steps 10-19), and
        # the hook after accumulation never copies one in
        assert res["received"] == [0] + [2] * 9 + [0] * 10, res
        assert res["placed"] == [0] * 20, res
    grouped = [r["one group"] for r in results]
    for res in grouped:
        assert res["copied"][0] == 1, res            # the first step learns the order...
        assert all(a == 1 for a in res["adjacent"][1:]), res   # ...then reduces in place
        # ...straight between the ranks' shared gradient buffers, from the second step on
        assert res["direct"][0] == 0 and all(d == 1 for d in res["direct"][1:]), res


def test_gradient_reduced_in_place_gets_a_shared_slot():
    import workers_torch_optimizer as w
    results = run_job(w.in_place_gradient_slot,
                      env={"FUSE_ZERO_COPY_THRESHOLD": str(128 * 1024)})
    for res in results:
        assert res["diff"] < 2e-5, res
        assert res["slot_bytes"] == 256 * 256 * 4, res      # l2.weight's slot alone
        # backward writes it into the slot, and the engine reduces it straight between the
        # ranks' slots, from the second step (the first learns the layout)
        assert res["received"] == [0, 1, 1, 1], res
        assert res["direct"] == [0, 1, 1, 1], res
        assert res["in_slot"], res


def test_hooks_queue_gradients_in_batches():
    import workers_torch_optimizer as w
    results = run_job(w.batched_hooks)
    for r, res in enumerate(results):
        assert res["default"]["default_cap"] == 1024 * 1024, res
        for label, case in res.items():
            assert case["diff"] < 2e-5, (r, label, case)
            # the end-of-backward callback queued what was left before backward returned
            assert case["queued_in_backward"], (r, label, case)
    # all 6 gradients reached the coordinator (rank 0) in one message from each rank: one
    # cycle answered them all, every step after the first (which also builds the layout)
    assert results[0]["default"]["cycles"][1:] == [1] * 3, results[0]


def test_optimizer_options_and_errors():
    import workers_torch_optimizer as w
    assert run_job(w.options) == [{"ok": True}, {"ok": True}]


def test_broadcast_optimizer_state_every_optimizer():
    import workers_torch_optimizer as w
    done = run_job(w.optimizer_state)
    assert done[0] == done[1]
    assert {"SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "LBFGS", "SparseAdam"} <= set(done[0])


def test_sync_batch_norm():
    import workers_torch_optimizer as w
    assert run_job(w.sync_batch_norm) == [True, True]
