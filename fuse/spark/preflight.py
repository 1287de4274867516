"""Before a fuse job on Spark: can Spark's Python workers import fuse?

Spark starts its Python workers with ``PYSPARK_PYTHON`` (else ``python3`` from PATH), not
with the driver's interpreter.  A driver run as ``.venv/bin/python`` without activating the
virtualenv then ships the job to a Python that has no fuse, and the stage fails with a long
Java trace whose last line is ``No module named 'fuse'``.  :func:`check_workers_import_fuse`
runs a plain Spark job first (not a barrier stage: it needs no free slot for every rank at
once) and turns that case into one line that names the fix.  ``fuse.spark.run``,
``run_elastic`` and the estimators call it.
"""

from __future__ import annotations

import sys

__all__ = ["check_workers_import_fuse", "WorkersCannotImportFuse"]


class WorkersCannotImportFuse(RuntimeError):
    """Spark's Python workers cannot import fuse; the message says which Python and the fix."""


def _make_probe():
    # Made inside a function so that cloudpickle ships it by value: a module-level function
    # would travel as a reference to fuse.spark.preflight, and unpickling it would need the
    # very import that is being checked.
    def probe(_partition):
        import socket
        import sys as worker_sys
        try:
            import fuse  # noqa: F401
            return [(True, worker_sys.executable, socket.gethostname(), "")]
        except Exception as err:                    # reported by the driver
            return [(False, worker_sys.executable, socket.gethostname(),
                     f"{type(err).__name__}: {err}")]
    return probe


def _fix() -> str:
    return (f"start Spark with PYSPARK_PYTHON set to a Python that has fuse installed, e.g. "
            f"PYSPARK_PYTHON={sys.executable} (this driver's Python; on a cluster the same "
            "path must exist on every executor), or activate the virtualenv before starting "
            "Spark")


def check_workers_import_fuse(sc, tasks: int = 1, what: str = "fuse.spark") -> None:
    """Raise :class:`WorkersCannotImportFuse` (one line, with the fix) unless a Python worker
    of each of ``tasks`` Spark tasks imports fuse."""
    tasks = max(1, int(tasks))
    try:
        answers = sc.parallelize(range(tasks), tasks).mapPartitions(_make_probe()).collect()
    except Exception as err:
        # the worker did not even run the probe (its Python failed to start, say)
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        cause = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else
                     type(err).__name__)
        raise WorkersCannotImportFuse(
            f"{what}: Spark's Python workers failed before they could import fuse "
            f"({cause[:300]}); {_fix()}") from None
    failed = [a for a in answers if not a[0]]
    if failed:
        _, python, host, error = failed[0]
        raise WorkersCannotImportFuse(
            f"{what}: Spark's Python workers cannot import fuse ({error}; worker Python "
            f"{python} on {host}, {len(failed)} of {len(answers)} tasks); {_fix()}")
