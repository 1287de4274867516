"""Horovod's TensorFlow expectations that its own suite checks in TensorFlow 1 graphs as well as
eagerly (issue 24, items 9-11), on 2 real workers: automatic names that hold whatever order a
graph's ops run in, TensorFlow's error types, in-place broadcasts in a graph."""

import needs
import pytest

needs.module("tensorflow")

from tf_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _assert_clean(results, at_least):
    for rank, res in enumerate(results):
        assert not res["failures"], f"rank {rank}: " + "\n".join(res["failures"])
        assert len(res["done"]) >= at_least, res["done"]


def test_unnamed_collectives_in_a_graph_pair_up_across_ranks():
    import workers_graph_mode as w
    _assert_clean(run_job(w.graph_names), 40)


def test_errors_have_horovods_tensorflow_types_in_every_mode():
    import workers_graph_mode as w
    _assert_clean(run_job(w.error_types), 40)


def test_names_stay_in_step_after_a_one_rank_error():
    import workers_graph_mode as w
    _assert_clean(run_job(w.one_rank_error_names), 6)


def test_variable_broadcasts_in_a_graph():
    import workers_graph_mode as w
    _assert_clean(run_job(w.variables_in_graph), 7)
