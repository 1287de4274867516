"""Launching fuse jobs: ``fuserun`` on the command line and :func:`run` from Python."""

from .api import WorkerError, run

__all__ = ["run", "WorkerError"]
