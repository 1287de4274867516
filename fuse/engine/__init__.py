"""The engine's parts: negotiation, execution and their Python helpers.

``fuse/_core.pyx`` holds the :class:`~fuse._core.Engine`, the Python API over them (one per
process); the Cython modules here are its parts (the loop its background thread runs, wire
format, coordinator, executor, handle table, ...), and the Python modules what the engine needs beside them: same-host shared
memory (:mod:`shm`), the host layout of the hierarchical collectives (:mod:`hierarchy`), the
timeline writer and the autotuner.  Nothing here imports a framework.
"""
