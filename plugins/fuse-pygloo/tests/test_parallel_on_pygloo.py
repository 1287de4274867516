"""fuse's multi-process suite (tests/parallel), the part of it that fits pygloo, on pygloo.

Nothing is copied: the test functions below are tests/parallel's own, imported, and the
``on_pygloo`` fixture swaps the ``run_job`` their modules call for one that starts the job
on FUSE_BACKEND=pygloo.  Chosen: process sets (static and dynamic: a group per set, allreduce,
allgather, broadcast, alltoall, reducescatter inside sets), collectives from several threads,
a mismatch reported on every rank, and tests/parallel's allgather, broadcast and alltoall
checks for every dtype (run here without their reducescatter part, below).

Left out: what reduces a type pygloo has no reduction for through the backend (the dtype
matrices of test_allreduce and test_gather_scatter's reducescatter reduce bool, int16, uint16
and bfloat16; test_join_barrier reduces int16), which pygloo refuses (test_collectives.py
checks the refusal); what is about fuse's own Gloo binding (the split over a second
connection, which needs native ops) or about the launcher and the engine alone (they run on
fuse's Gloo backend in tests/parallel, and nothing there depends on the backend).
"""

from __future__ import annotations

import pytest

import test_errors
import test_gather_scatter
import test_process_sets
import test_threads
from par_util import Checker, assert_counts, run_job
from pygloo_util import pygloo_run_job
from test_errors import test_mismatch_raises_everywhere_and_job_continues  # noqa: F401
from test_process_sets import test_dynamic_process_sets, test_static_process_sets  # noqa: F401
from test_threads import test_collectives_from_several_threads_do_not_deadlock  # noqa: F401

PARALLEL_MODULES = (test_errors, test_process_sets, test_threads)
# the imported tests/parallel tests pytest collects here (listed, so no linter drops them)
__all__ = ["test_mismatch_raises_everywhere_and_job_continues", "test_dynamic_process_sets",
           "test_static_process_sets", "test_collectives_from_several_threads_do_not_deadlock",
           "test_gather_broadcast_alltoall_every_dtype"]


@pytest.fixture(scope="module", autouse=True)
def on_pygloo():
    """Point every tests/parallel module imported here at :func:`pygloo_run_job`."""
    with pytest.MonkeyPatch.context() as mp:
        for module in PARALLEL_MODULES:
            mp.setattr(module, "run_job", pygloo_run_job)
        yield


def gather_broadcast_alltoall() -> int:
    """test_gather_scatter's worker side, less its reducescatter of every dtype."""
    import fuse

    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    test_gather_scatter._allgather(c, r, n)
    test_gather_scatter._broadcast(c, r, n)
    test_gather_scatter._alltoall(c, r, n)
    fuse.shutdown()
    return c.finish()


@pytest.mark.parametrize("np_,config", [(2, "default"), (3, "noinline-smallfusion")])
def test_gather_broadcast_alltoall_every_dtype(np_, config):
    env = {**test_gather_scatter.CONFIGS[config], "FUSE_BACKEND": "pygloo"}
    assert_counts(run_job(gather_broadcast_alltoall, np_, env), minimum=300)
