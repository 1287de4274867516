"""``horovod.common.exceptions``: the exception types Horovod scripts import from there.

The same classes as :mod:`fuse.exceptions` (``except HorovodInternalError`` catches fuse's
collective failures).
"""

from fuse.exceptions import (HorovodInternalError, HorovodVersionMismatchError,  # noqa: F401
                             HostsUpdatedInterrupt)

__all__ = ["HorovodInternalError", "HorovodVersionMismatchError", "HostsUpdatedInterrupt"]
