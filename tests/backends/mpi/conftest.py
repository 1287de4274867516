"""The engine's multi-process tests (tests/collectives, tests/engine, tests/worker: the ones
that start their jobs with engine_util.run_job), run again on the MPI backend.

Nothing is copied: ``test_parallel_on_mpi.py`` imports those test functions, and
the ``on_mpi`` fixture below swaps the ``run_job`` those modules call for one that starts the
job under ``mpirun`` (``fuse.run(..., use_mpi=True)``, ``FUSE_BACKEND=mpi``) for as long as
the imported tests run.  The worker functions, parameters (2 and 3 ranks, every engine
configuration) and checks are the originals.

Skipped, with the reason, when mpi4py or an mpiexec is missing (``pip install 'fuse-dl[mpi]'``);
failed instead where FUSE_TEST_REQUIRE names ``mpi``.
"""

from __future__ import annotations

import sys

import pytest

from mpi_util import PARALLEL_FOLDERS, mpi_run_job, require_mpi

for folder in PARALLEL_FOLDERS:  # test_parallel_on_mpi.py imports their modules by name
    if folder not in sys.path:
        sys.path.insert(0, folder)


@pytest.fixture(autouse=True)
def _needs_mpi():
    """Every test here: skipped with the reason when MPI is missing (failed where
    FUSE_TEST_REQUIRE names mpi)."""
    require_mpi()


@pytest.fixture(scope="module", autouse=True)
def on_mpi(request):
    """Point every engine test module this test module imported at :func:`mpi_run_job`."""
    with pytest.MonkeyPatch.context() as mp:
        for module in getattr(request.module, "PARALLEL_MODULES", ()):
            mp.setattr(module, "run_job", mpi_run_job)
        yield
