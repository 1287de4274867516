"""Errors of the Gloo backend (pure Python, importable without the compiled module)."""

from fuse.exceptions import BackendError


class GlooError(BackendError):
    """A Gloo collective or rendezvous failed; the message names the operation, the group
    rank and Gloo's reason (for example "Connection closed by peer ...")."""
