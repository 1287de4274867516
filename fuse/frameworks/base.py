"""The contract a framework adapter plugin fulfils.

An adapter is a class registered in the entry-point group ``fuse.frameworks``; it turns one
framework's tensors into the flat host buffers the engine moves.  This is the minimal, versioned
surface every adapter has; the tensor verbs are added as the adapters arrive.
"""

from __future__ import annotations

import abc
from typing import ClassVar


class FrameworkAdapter(abc.ABC):
    """Adapter for one framework (numpy, torch, tensorflow, mxnet)."""

    api_version: ClassVar[int] = 1
    name: ClassVar[str] = "unnamed"

    @classmethod
    @abc.abstractmethod
    def is_available(cls) -> tuple[bool, str]:
        """(usable here, reason if not).  Must be cheap: find the framework with
        ``importlib.util.find_spec`` / ``importlib.metadata``, never by importing it."""

    @classmethod
    def version(cls) -> str | None:
        """Version of the installed framework, or None when it is not installed."""
        return None
