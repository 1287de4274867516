"""tests/parallel on the MPI backend: the same tests, at 2 and 3 ranks, under mpirun."""

from __future__ import annotations

import pytest

import test_allreduce
import test_errors
import test_failures
import test_gather_scatter
import test_join_barrier
import test_process_sets
from test_allreduce import (test_allreduce_all_dtypes_ops_and_paths,  # noqa: F401
                            test_buffers_in_shared_regions_are_reduced_between_them,
                            test_shared_memory_allreduce_on_one_host,
                            test_waiting_thread_drives_a_lone_collective,
                            test_zero_dim_arrays_keep_their_shape)
from test_errors import (lifecycle_results,  # noqa: F401
                         test_duplicate_names_calls_after_shutdown_and_peer_shutdown,
                         test_mismatch_raises_everywhere_and_job_continues,
                         test_peer_shutdown_raises_shutdown_error)
from test_failures import test_exception_in_fuse_run_function_reaches_the_waiting_ranks  # noqa
from test_gather_scatter import test_gather_broadcast_alltoall_reducescatter  # noqa: F401
from test_join_barrier import test_join_uneven_steps_and_barrier  # noqa: F401
from test_process_sets import test_dynamic_process_sets, test_static_process_sets  # noqa: F401

PARALLEL_MODULES = (test_allreduce, test_errors, test_failures, test_gather_scatter,
                    test_join_barrier, test_process_sets)

pytestmark = pytest.mark.timeout(180)


def _backend_report():
    import fuse
    fuse.init()
    try:
        from fuse.common import basics
        return (basics.backend_name(), fuse.mpi_enabled(), fuse.rank(), fuse.size())
    finally:
        fuse.shutdown()


def test_imported_tests_really_run_on_mpi():
    """The swap worked: the run_job the imported tests call starts MPI jobs."""
    out = test_allreduce.run_job(_backend_report, 3)
    assert out == [("mpi", True, r, 3) for r in range(3)], out

