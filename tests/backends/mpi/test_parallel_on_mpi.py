"""The engine's multi-process tests on the MPI backend: the same tests, at 2 and 3 ranks,
under mpirun.

Every test function of tests/collectives, tests/engine and tests/worker whose job is started
by ``run_job`` runs here again (35 test functions).  Left out, and why (LEFT_OUT below, 13
names; a test checks that every other test function of those modules is imported here):

- ``test_large_allreduce_splits_in_two_halves``: the split sends half of a large allreduce over
  a second connection of a backend with native ops (Gloo); the MPI backend has none, so nothing
  splits there by design (``FUSE_SPLIT_THRESHOLD`` in the configuration reference).
- ``test_bfloat16_available``: it checks the test environment (ml_dtypes), not a backend; the
  bfloat16 cases themselves run here in the dtype matrices.
- The tests that start their job with ``run_script`` (fuserun's own launcher) and check its
  report: ``test_uncaught_exception_*`` and ``test_the_engines_name_the_failed_rank_as_data``
  (the same job), ``test_sigkill_does_not_hang_the_others``,
  ``test_stall_warning_names_missing_rank_and_tensor``, and test_stopped_ranks.py's three
  (a stopped rank 0, a rank stopped inside a shared-memory allreduce: what they check is the
  engine's and backend-neutral, but their job ends by fuserun's clean-up of the stopped
  process).  Under mpirun the launcher is mpirun;
  ``test_twenty_reforms_leak_nothing`` (test_reinit.py) re-initialises fuse with new ranks and
  sizes in one process, which MPI (initialised once per process) cannot do;
  test_mpi_backend.py checks what it does with a failing or killed rank
  (``test_a_dead_rank_does_not_hang_the_others``) and ``fuserun --mpi``;
  ``test_fork_after_init`` (test_fork.py) forks a process after init(), which MPI libraries
  do not support in an initialised process (the child's first fuse call raises before any MPI
  call either way: that check is the engine's, not the backend's);
  ``test_init_again_in_a_new_process_of_the_same_rank`` (test_fork.py) checks that the Gloo
  backend's rendezvous keys are gone once a group has formed, so that a forked child of the same
  rank can init() again; MPI has no such keys, and an MPI library cannot be initialised in a
  forked child of an initialised process.
"""

from __future__ import annotations

import ast
import glob
import os

import pytest
from mpi_util import PARALLEL_FOLDERS

import test_adasum
import test_allreduce
import test_auto_names
import test_autotune
import test_errors
import test_failures
import test_gather_scatter
import test_hierarchical
import test_join_barrier
import test_mailbox
import test_process_sets
import test_threads
import test_timeline
from test_adasum import (test_adasum_matches_the_pairwise_reference,  # noqa: F401
                         test_adasum_refuses_a_set_that_is_not_a_power_of_two)
from test_auto_names import test_unnamed_calls_pair_up_after_a_one_rank_error  # noqa: F401
from test_allreduce import (test_a_burst_hands_lone_requests_to_the_engine_thread,  # noqa: F401
                            test_allreduce_all_dtypes_ops_and_paths,
                            test_allreduce_path_by_size_on_one_host,
                            test_buffers_in_shared_regions_are_reduced_between_them,
                            test_shared_memory_allreduce_on_one_host,
                            test_waiting_thread_drives_a_lone_collective,
                            test_zero_dim_arrays_keep_their_shape)
from test_autotune import (test_autotune_converges_and_ranks_agree,  # noqa: F401
                           test_autotune_keeps_explicit_knobs)
from test_errors import (lifecycle_results,  # noqa: F401
                         test_duplicate_names_calls_after_shutdown_and_peer_shutdown,
                         test_mismatch_raises_everywhere_and_job_continues,
                         test_peer_shutdown_raises_shutdown_error)
from test_failures import (stalled,  # noqa: F401
                           test_exception_in_fuse_run_function_reaches_the_waiting_ranks,
                           test_stall_shutdown_raises_stall_error,
                           test_stall_shutdown_reaches_other_ranks_as_stall_error)
from test_gather_scatter import (test_allgather_into_outputs_and_reducescatter_in_scratch,  # noqa: F401
                                 test_gather_broadcast_alltoall_reducescatter,
                                 test_large_outputs_ask_for_huge_pages)
from test_hierarchical import (test_a_layout_that_does_not_fit_stays_flat,  # noqa: F401
                               test_automatic_choice_and_off,
                               test_every_dtype_and_op_on_two_hosts_of_two)
from test_join_barrier import test_join_uneven_steps_and_barrier  # noqa: F401
from test_mailbox import (test_a_corrupt_ring_fails_the_job_with_a_clear_error,  # noqa: F401
                          test_collectives_with_the_mailbox_on_and_off,
                          test_ranks_sending_each_other_more_than_the_channel_holds_do_not_wait_for_each_other)
from test_process_sets import (test_collectives_are_not_held_for_requests_they_cannot_fuse_with,  # noqa: F401
                               test_dynamic_process_sets, test_static_process_sets)
from test_threads import test_collectives_from_several_threads_do_not_deadlock  # noqa: F401
from test_timeline import (test_dynamic_start_stop_inline, test_env_timeline_phases,  # noqa
                           test_no_timeline_without_env)

PARALLEL_MODULES = (test_adasum, test_allreduce, test_auto_names, test_autotune, test_errors,
                    test_failures, test_gather_scatter, test_hierarchical, test_join_barrier,
                    test_mailbox, test_process_sets, test_threads, test_timeline)
LEFT_OUT = {"test_large_allreduce_splits_in_two_halves", "test_bfloat16_available",
            "test_uncaught_exception_reaches_the_waiting_ranks",
            "test_uncaught_exception_message_reaches_every_rank",
            "test_the_engines_name_the_failed_rank_as_data",
            "test_sigkill_does_not_hang_the_others",
            "test_stall_warning_names_missing_rank_and_tensor",
            "test_a_stopped_coordinator_is_named_by_the_waiting_workers",
            "test_a_rank_stopped_inside_a_shared_memory_allreduce_is_named",
            "test_a_stopped_coordinator_inside_a_shared_memory_allreduce_is_named",
            "test_twenty_reforms_leak_nothing", "test_fork_after_init",
            "test_init_again_in_a_new_process_of_the_same_rank"}

pytestmark = pytest.mark.timeout(180)


def _backend_report():
    import fuse
    fuse.init()
    try:
        from fuse.worker import lifecycle
        return (lifecycle.backend_name(), fuse.mpi_enabled(), fuse.rank(), fuse.size())
    finally:
        fuse.shutdown()


def test_imported_tests_really_run_on_mpi():
    """The swap worked: the run_job the imported tests call starts MPI jobs."""
    out = test_allreduce.run_job(_backend_report, 3)
    assert out == [("mpi", True, r, 3) for r in range(3)], out


def test_every_parallel_test_runs_here_or_is_left_out_with_a_reason():
    """A test added to a module whose jobs start through engine_util (in tests/collectives,
    tests/engine or tests/worker) runs on MPI too, or joins LEFT_OUT (and the docstring)."""
    here = {name for name in globals() if name.startswith("test_")}
    modules = []
    for folder in PARALLEL_FOLDERS:
        for path in glob.glob(os.path.join(folder, "test_*.py")):
            with open(path) as f:
                source = f.read()
            if "from engine_util import" in source:
                modules.append(path)
                tests = {node.name for node in ast.parse(source).body
                         if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
                missing = tests - here - LEFT_OUT
                assert not missing, f"{path}: {sorted(missing)} neither run on MPI nor left out"
    assert len(modules) >= len(PARALLEL_MODULES), modules
