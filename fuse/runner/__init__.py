"""Launching fuse jobs: ``fuserun`` on the command line and :func:`run` from Python."""
