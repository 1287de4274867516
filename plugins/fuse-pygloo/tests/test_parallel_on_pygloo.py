"""fuse's multi-process engine tests (tests/collectives, tests/engine), the part of it that fits pygloo, on pygloo.

Nothing is copied: the test functions below are fuse's own, imported, and the
``on_pygloo`` fixture swaps engine_util's ``job_env`` (which both of its launchers, ``run_job``
and ``run_script``, build the workers' environment with) for one that selects
FUSE_BACKEND=pygloo.  Chosen: process sets (static and dynamic: a group per set, allreduce,
allgather, broadcast, alltoall, reducescatter inside sets), collectives from several threads,
a mismatch reported on every rank, failures (an exception, a stall, a SIGKILLed rank in
negotiation and inside a backend allreduce: the others raise promptly, nothing hangs), and
tests/collectives' allgather, broadcast and alltoall checks for every dtype (run here without
their reducescatter part, below).

Left out: what reduces a type pygloo has no reduction for through the backend (the dtype
matrices of test_allreduce and test_gather_scatter's reducescatter reduce bool, int16, uint16
and bfloat16; test_join_barrier reduces int16), which pygloo refuses (test_collectives.py
checks the refusal); what is about fuse's own Gloo binding (the split over a second
connection, which needs native ops) or about the launcher and the engine alone (they run on
fuse's Gloo backend in tests/collectives, and nothing there depends on the backend).
"""

from __future__ import annotations

import pytest

import engine_util
import test_gather_scatter
from engine_util import Checker, assert_counts, run_job
from pygloo_util import pygloo_job_env
from test_errors import test_mismatch_raises_everywhere_and_job_continues  # noqa: F401
from test_failures import (stalled,  # noqa: F401
                           test_exception_in_fuse_run_function_reaches_the_waiting_ranks,
                           test_sigkill_does_not_hang_the_others,
                           test_stall_shutdown_raises_stall_error,
                           test_stall_shutdown_reaches_other_ranks_as_stall_error)
from test_process_sets import test_dynamic_process_sets, test_static_process_sets  # noqa: F401
from test_threads import test_collectives_from_several_threads_do_not_deadlock  # noqa: F401

# the imported engine tests and fixture pytest collects here (listed, so that no
# linter drops them)
__all__ = ["stalled", "test_collectives_from_several_threads_do_not_deadlock",
           "test_dynamic_process_sets",
           "test_exception_in_fuse_run_function_reaches_the_waiting_ranks",
           "test_gather_broadcast_alltoall_every_dtype",
           "test_mismatch_raises_everywhere_and_job_continues",
           "test_sigkill_does_not_hang_the_others", "test_stall_shutdown_raises_stall_error",
           "test_stall_shutdown_reaches_other_ranks_as_stall_error", "test_static_process_sets"]


@pytest.fixture(scope="module", autouse=True)
def on_pygloo():
    """Every job the imported tests start, through either launcher, runs on pygloo."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine_util, "job_env", pygloo_job_env)
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
    assert_counts(run_job(gather_broadcast_alltoall, np_, test_gather_scatter.CONFIGS[config]),
                  minimum=300)
