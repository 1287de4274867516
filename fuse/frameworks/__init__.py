"""Framework adapter plugins.

An adapter is a subclass of :class:`fuse.frameworks.base.FrameworkAdapter` registered in the
entry-point group ``fuse.frameworks``, the built-ins included (see ``pyproject.toml``)::

    [project.entry-points."fuse.frameworks"]
    numpy = "fuse.frameworks.numpy:NumpyAdapter"

A third party registers an adapter the same way from its own package.  Nothing is loaded at
``import fuse``; ``python -m fuse.info`` lists every adapter and whether it loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuse.backends._registry import PluginStatus

if TYPE_CHECKING:
    from fuse.frameworks.base import FrameworkAdapter

NAMESPACE = "fuse.frameworks"

__all__ = ["NAMESPACE", "PluginStatus", "describe_frameworks", "export_api",
           "framework_names", "load_framework"]


def _unavailable(message: str):
    from fuse.exceptions import FrameworkUnavailable

    return FrameworkUnavailable(message)


def load_framework(name: str) -> "type[FrameworkAdapter]":
    """The adapter class registered as ``name``, checked and available here.

    Raises :class:`fuse.exceptions.FrameworkUnavailable` naming the adapter, its entry point
    target and the reason (not installed, import failed, wrong class or API version, or the
    framework itself is missing)."""
    from fuse.backends._registry import load_plugin
    from fuse.frameworks.base import FrameworkAdapter

    return load_plugin(NAMESPACE, "framework adapter", name, FrameworkAdapter, _unavailable)


def export_api(name: str, namespace: dict, keras: bool = False) -> list[str]:
    """Fill a thin public module (``fuse.torch``, ``fuse.keras``, ...) with the API of adapter
    ``name`` (its Keras API with ``keras``); returns the names, for ``__all__``."""
    adapter = load_framework(name)
    api = adapter.keras_api() if keras else adapter.api()
    namespace.update({n: getattr(api, n) for n in api.__all__})
    return list(api.__all__)


def framework_names() -> list[str]:
    """Names of the registered adapters, sorted; imports none of them."""
    from fuse.backends._registry import entry_point_names

    return entry_point_names(NAMESPACE)


def describe_frameworks() -> list[PluginStatus]:
    """Every registered adapter, whether it loads here, why not, and its framework's version."""
    from fuse.backends._registry import describe_plugins
    from fuse.frameworks.base import FrameworkAdapter

    return describe_plugins(NAMESPACE, FrameworkAdapter)
