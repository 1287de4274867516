"""Exception types of fuse.

Pure Python, so they import even when the compiled engine does not.  Every exception pickles
with its message, so an error can travel between ranks and back to the launcher.
The Horovod names are aliases of the fuse ones, so ``except hvd.HorovodInternalError`` works.
"""


class FuseError(RuntimeError):
    """Base class: a collective or the engine failed."""

    def __reduce__(self):
        return (type(self), self.args)


class FuseInternalError(FuseError):
    """A collective failed (peer lost, backend error, mismatch).  Elastic training treats it as
    recoverable, as Horovod treats ``HorovodInternalError``."""


class MismatchError(FuseInternalError, ValueError):
    """Ranks submitted the same tensor name with different shape, dtype, op or root."""


class ShutdownError(FuseInternalError):
    """The engine has shut down (on this rank, or because another rank failed or exited)."""


class StallError(FuseInternalError):
    """Some ranks never submitted a tensor the others are waiting on."""


class BackendError(FuseInternalError):
    """The communication backend reported an error."""


class UnsupportedOpError(FuseError, ValueError):
    """A collective was asked for a reduction it does not do (reducescatter with Adasum or
    Min).  Horovod raises a ``RuntimeError`` there (``torch.FatalError`` from its C++ op)
    and callers catch that; earlier fuse code and tests catch ``ValueError``: it is both."""


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic mode: the host set changed.  ``skip_sync`` says whether state must be resynced."""

    def __init__(self, skip_sync=False):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync


class BackendUnavailable(ImportError):
    """A backend plugin cannot be loaded here; the message says which and why."""

    def __reduce__(self):
        return (type(self), self.args)


class FrameworkUnavailable(ImportError):
    """A framework adapter cannot be loaded (framework missing or unsupported version)."""

    def __reduce__(self):
        return (type(self), self.args)


# Horovod spellings.
HorovodInternalError = FuseInternalError
HorovodVersionMismatchError = FrameworkUnavailable
