"""What Horovod scripts and test suites expect of fuse.torch (issue 24), on 2 real workers."""

import needs
import pytest

torch = needs.module("torch")

from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_reducescatter_gradient_follows_horovod():
    import workers_torch_compat as w
    for got in run_job(w.reducescatter_gradient):
        assert got["sum"] == [2.0]              # allgather(ones) * size
        assert got["average"] == [1.0]
        assert got["default"] == [1.0]
        assert got["sum_scaled"] == [12.0]      # * size * prescale * postscale
        assert got["average_scaled"] == [0.5]
        assert got["blocks"] == [2.0, 2.0, 4.0, 4.0]


def test_grouped_allgather_and_reducescatter_are_differentiable():
    import workers_torch_compat as w
    for got in run_job(w.grouped_gradients):
        for label, (single, grouped) in got.items():
            assert grouped == single, (label, single, grouped)


def test_scalar_reducescatter_raises_value_error():
    import workers_torch_compat as w
    for raised, ok in run_job(w.scalar_reducescatter):
        assert raised == {"reducescatter": "ValueError", "reducescatter_async": "ValueError",
                          "grouped_reducescatter": "ValueError",
                          "grouped_reducescatter_async": "ValueError"}, raised
        assert ok


def test_broadcast_optimizer_state_leaves_gradients():
    import workers_torch_compat as w
    res = run_job(w.optimizer_state_grads)
    for rank_res in res:
        for wrapped in (False, True):
            got = rank_res[wrapped]
            assert got["with_grad"] == ["0.bias", "0.weight", "2.weight"], got
            assert got["lr"] == pytest.approx(0.1)       # the root's options
            assert got["state"] == 0      # Adam's state is made lazily at the first step


def test_parameter_names_without_named_parameters():
    import workers_torch_compat as w
    for generated, by_param, named in run_job(w.parameter_names):
        assert generated == ["allreduce.noname.0.0", "allreduce.noname.0.1",
                             "allreduce.noname.1.0", "allreduce.noname.1.1"]
        assert by_param == "allreduce.noname.1.0"
        assert named == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_sparse_gradients_stay_sparse_for_sparse_adam():
    import workers_torch_compat as w
    for got in run_job(w.sparse_gradients):
        for sparse_as_dense in (False, True):
            steps, moved, same = got[sparse_as_dense]
            for step, (is_sparse, dense) in enumerate(steps):
                assert is_sparse, (sparse_as_dense, step)
                # rank 0 looks up 1+s, 2+s (three times), rank 1 looks up 3+s, 2+s
                want = [0.0] * 6
                for i, count in ((1, 1), (2, 4), (3, 1)):
                    want[i + step] = count / 2
                assert dense == want, (sparse_as_dense, step, dense)
            assert moved == [False, True, True, True, True, True], moved
            assert same
        assert got["sum"] == [2.0, 0.0, 0.0, 0.0]


def test_help_before_init():
    import workers_torch_compat as w
    for shown, text, out in run_job(w.help_before_init):
        assert shown
        assert text == "ProcessSet(process_set_id=0, ranks=[0, 1])"
        assert out == [1.0]


def test_horovod_submodules():
    import workers_torch_compat as w
    for checks in run_job(w.submodules):
        assert all(checks.values()), checks


def test_ignored_horovod_knobs_warn_once():
    import workers_torch_compat as w
    env = {"HOROVOD_NUM_NCCL_STREAMS": "2", "HOROVOD_TORUS_ALLREDUCE": "1",
           "HOROVOD_BATCH_D2D_MEMCOPIES": "0", "HOROVOD_CYCLE_TIME": "2",
           "HOROVOD_HIERARCHICAL_ALLGATHER": "0"}
    first, second = run_job(w.ignored_knobs, env=env)
    assert len(first) == 1, first
    for var in ("HOROVOD_NUM_NCCL_STREAMS", "HOROVOD_TORUS_ALLREDUCE",
                "HOROVOD_BATCH_D2D_MEMCOPIES"):
        assert var in first[0]
    assert "HOROVOD_CYCLE_TIME" not in first[0]      # implemented, so not named
    assert "HIERARCHICAL" not in first[0]             # implemented, so not named
    assert second == []                               # rank 1 shares rank 0's host
