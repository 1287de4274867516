"""Automatic names after a call that failed on one rank only (issue 24, item 9): the rank that
caught the error draws the same names for its later unnamed calls as the others, so they pair
up (before, the failed call had used up a name there and every later unnamed call waited for
a partner that never came).  NumPy here; tests/frameworks/torch and tests/frameworks/tensorflow do the frameworks."""

from __future__ import annotations

import numpy as np
import pytest

from engine_util import run_job

pytestmark = pytest.mark.timeout(120)


def one_rank_errors_then_unnamed_calls() -> list:
    import fuse
    fuse.init()
    r = fuse.rank()
    raised = []
    if r == 0:
        bad_dtype = np.array([1j, 2j])   # complex: refused on this rank before queueing
        for bad in (lambda: fuse.allreduce(bad_dtype),
                    lambda: fuse.allgather(bad_dtype),
                    lambda: fuse.grouped_allreduce([np.ones(2), bad_dtype]),
                    lambda: fuse.reducescatter(bad_dtype, op=fuse.Sum),
                    lambda: fuse.broadcast(bad_dtype, 0),
                    lambda: fuse.alltoall(np.ones(3), splits=[3, 1])):
            try:
                bad()
                raised.append(False)
            except (TypeError, ValueError):
                raised.append(True)
    got = [fuse.allreduce(np.full(3, float(i + r)), op=fuse.Sum).tolist() for i in range(2)]
    got.append(fuse.allgather(np.full(1, float(r))).tolist())
    got.append([a.tolist() for a in fuse.grouped_allreduce([np.ones(2), np.ones(1)],
                                                           op=fuse.Sum)])
    got.append(fuse.reducescatter(np.ones(4), op=fuse.Sum).tolist())
    got.append(fuse.broadcast(np.full(2, float(r)), 1).tolist())
    return [raised, got]


def test_unnamed_calls_pair_up_after_a_one_rank_error():
    results = run_job(one_rank_errors_then_unnamed_calls, 2, timeout=60)
    assert results[0][0] == [True] * 6
    expected = [[1.0] * 3, [3.0] * 3, [0.0, 1.0], [[2.0, 2.0], [2.0]], [2.0, 2.0], [1.0, 1.0]]
    for raised, got in results:
        assert got == expected
