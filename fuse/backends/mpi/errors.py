"""Errors of the MPI backend (pure Python, importable without mpi4py)."""

from fuse.exceptions import BackendError


class MpiError(BackendError):
    """An MPI call failed.  The message names the operation, the rank in the group and MPI's
    own error string; ``code`` is the MPI error code (or None when fuse itself refused)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message, code)
        self.code = code

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):
        return (type(self), self.args)


def __getattr__(name: str):
    if name == "MPIError":      # the old second spelling: deprecated, MpiError is the name
        import warnings

        warnings.warn("fuse.backends.mpi.MPIError is deprecated; use MpiError (the same class)",
                      DeprecationWarning, stacklevel=2)
        return MpiError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
