"""Horovod's TensorFlow expectations that its own suite checks in TensorFlow 1 graphs as well as
eagerly (issue 24, items 9-11), on 2 real workers: automatic names that hold whatever order a
graph's ops run in, TensorFlow's error types, in-place broadcasts in a graph."""

import needs
import pytest

needs.module("tensorflow")

from tf_util import assert_clean, run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_unnamed_collectives_in_a_graph_pair_up_across_ranks():
    import workers_tf_graph_mode as w
    assert_clean(run_job(w.graph_names), 40)


def test_errors_have_horovods_tensorflow_types_in_every_mode():
    import workers_tf_graph_mode as w
    assert_clean(run_job(w.error_types), 40)


def test_names_stay_in_step_after_a_one_rank_error():
    import workers_tf_graph_mode as w
    assert_clean(run_job(w.one_rank_error_names), 6)


def test_variable_broadcasts_in_a_graph():
    import workers_tf_graph_mode as w
    assert_clean(run_job(w.variables_in_graph), 7)


def test_a_run_fetching_many_collectives_on_one_session_thread_completes():
    """Before the collectives left the session's threads, this run waited forever (each
    rank's only thread held by a collective the other rank had not started); the stall
    shutdown turns such a wait into an error here."""
    import workers_tf_graph_mode as w
    assert_clean(run_job(w.many_collectives_few_threads,
                          env={"FUSE_STALL_SHUTDOWN_TIME_SECONDS": "20",
                               "FUSE_STALL_CHECK_TIME_SECONDS": "10"}), 36 * 3)
