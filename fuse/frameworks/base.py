"""The contract a framework adapter plugin fulfils.

An adapter is a class registered in the entry-point group ``fuse.frameworks``; it turns one
framework's tensors into the flat host buffers the engine moves.  The contract has two halves:
this class, the versioned surface the registry checks without importing the framework (name,
module, availability, version), and what it hands out once the framework is imported: its
public API (``api()``) and its tensor verbs (``ops()``, a
:class:`fuse.collectives.array_ops.ArrayOps`: buffers, new tensors, dtype casts), the only thing
the shared code (collectives, compression, gradient bookkeeping) calls on its tensors.
"""

from __future__ import annotations

import abc
import importlib
import importlib.util
from importlib import metadata
from typing import ClassVar


class FrameworkAdapter(abc.ABC):
    """Adapter for one framework (numpy, torch, tensorflow, mxnet).

    A subclass names its framework's import name (``module``), the PyPI distributions that
    provide it (``distributions``), the oldest version it supports (``min_version``) and the
    extra that installs it (``extra``); ``is_available`` and ``version`` then need no code of
    their own."""

    api_version: ClassVar[int] = 1
    name: ClassVar[str] = "unnamed"
    module: ClassVar[str] = ""
    distributions: ClassVar[tuple[str, ...]] = ()
    min_version: ClassVar[tuple[int, ...]] = ()
    extra: ClassVar[str] = ""
    # where the framework-importing halves live: the public API's module, and the ArrayOps
    # instance as "module:attribute" (imported only when asked for)
    api_module: ClassVar[str] = ""
    ops_object: ClassVar[str] = ""

    @classmethod
    def api(cls):
        """The module holding the framework's public names (imports the framework)."""
        return importlib.import_module(cls.api_module)

    @classmethod
    def ops(cls):
        """The framework's ArrayOps (imports the framework)."""
        module, _, attr = cls.ops_object.partition(":")
        return getattr(importlib.import_module(module), attr)

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        """(usable here, reason if not).  Must be cheap: finds the framework with
        ``importlib.util.find_spec`` and ``importlib.metadata``, never by importing it."""
        if cls.module and importlib.util.find_spec(cls.module) is None:
            hint = f" (pip install fuse-dl[{cls.extra}])" if cls.extra else ""
            return False, f"{cls.module} is not installed{hint}"
        version = cls.version()
        if version is not None and cls.min_version:
            try:
                release = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
            except ValueError:          # a development build: let it try
                return True, ""
            if release < cls.min_version:
                wanted = ".".join(str(p) for p in cls.min_version)
                return False, (f"{cls.module} {version} is too old; fuse.{cls.name} needs "
                               f"{cls.module} >= {wanted}")
        return True, ""

    @classmethod
    def version(cls) -> str | None:
        """Version of the installed framework, or None when it is not installed."""
        for dist in cls.distributions or ((cls.module,) if cls.module else ()):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None
