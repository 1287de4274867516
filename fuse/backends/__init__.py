"""Communication backend plugins.

A backend is a subclass of :class:`fuse.backends.base.Backend` registered in the entry-point group
``fuse.backends``.  fuse's own backends register exactly as a third party does, in
``pyproject.toml``::

    [project.entry-points."fuse.backends"]
    gloo = "fuse.backends.gloo:GlooBackend"

To ship your own backend, put the class in a package of yours, declare the entry point in that
package's ``pyproject.toml``::

    [project.entry-points."fuse.backends"]
    ucc = "fuse_ucc:UCCBackend"

``pip install`` it, and select it with ``FUSE_BACKEND=ucc``.  A GPU backend (a subclass of
:class:`fuse.backends.base.DeviceBackend`) registers in a group of its own,
``fuse.device_backends``, and is selected with ``FUSE_GPU_BACKEND``.  That is all; fuse needs no change.
The class must keep ``api_version`` equal to ``Backend.api_version`` and answer
``is_available()`` cheaply, with ``(False, "why")`` when it cannot run here (library or device
missing).  ``python -m fuse.info`` lists every registered backend and whether it loads.
``tests/support/fuse_kvbackend`` is a complete example.

Nothing is loaded at ``import fuse``: :func:`load_backend` runs once per process, in ``fuse.init``.
stevedore caches the entry-point scan in ``~/.cache/python-entrypoints`` (keyed by the interpreter
and the modification times of ``sys.path``); on a shared ``$HOME`` with very many workers, create
an empty file ``~/.cache/python-entrypoints/.disable`` to turn the cache off.  A process that
installs a plugin after it first looked one up must be restarted to see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuse.backends._registry import PluginStatus

if TYPE_CHECKING:
    from fuse.backends.base import Backend

NAMESPACE = "fuse.backends"
DEVICE_NAMESPACE = "fuse.device_backends"

__all__ = ["DEVICE_NAMESPACE", "NAMESPACE", "PluginStatus", "backend_names",
           "describe_backends", "describe_device_backends", "device_backend_names", "load_backend", "load_device_backend"]


def _unavailable(message: str):
    from fuse.exceptions import BackendUnavailable

    return BackendUnavailable(message)


def load_backend(name: str) -> "type[Backend]":
    """The backend class registered as ``name``, checked and available here.

    Raises :class:`fuse.exceptions.BackendUnavailable` naming the plugin, its entry point target
    and the reason: not installed (the message lists the installed names, and says so when the
    name is a GPU backend's), import failed (chained to the import error), not a ``Backend``
    subclass, another plugin API version, or its ``is_available()`` said no."""
    from fuse.backends._registry import entry_point_names, load_plugin
    from fuse.backends.base import Backend

    if name not in entry_point_names(NAMESPACE) and name in entry_point_names(DEVICE_NAMESPACE):
        raise _unavailable(f"{name!r} is a GPU backend, for CUDA tensors (entry point group "
                           f"{DEVICE_NAMESPACE!r}); select it with FUSE_GPU_BACKEND (FUSE_BACKEND "
                           f"picks the CPU backend: {', '.join(backend_names()) or 'none'})")
    return load_plugin(NAMESPACE, "backend", name, Backend, _unavailable)


def load_device_backend(name: str):
    """The device (GPU) backend class registered as ``name`` (``FUSE_GPU_BACKEND``) in
    ``fuse.device_backends``, checked against :class:`fuse.backends.base.DeviceBackend` and
    available here; raises :class:`fuse.exceptions.BackendUnavailable` saying why not (no CuPy,
    no CUDA device...)."""
    from fuse.backends._registry import load_plugin
    from fuse.backends.base import DeviceBackend

    return load_plugin(DEVICE_NAMESPACE, "GPU backend", name, DeviceBackend, _unavailable)


def backend_names() -> list[str]:
    """Names of the installed CPU backends, sorted; imports none of them."""
    from fuse.backends._registry import entry_point_names

    return entry_point_names(NAMESPACE)


def device_backend_names() -> list[str]:
    """Names of the installed GPU backends, sorted; imports none of them."""
    from fuse.backends._registry import entry_point_names

    return entry_point_names(DEVICE_NAMESPACE)


def describe_backends() -> list[PluginStatus]:
    """Every installed CPU backend, whether it loads here, and why not."""
    from fuse.backends._registry import describe_plugins
    from fuse.backends.base import Backend

    return describe_plugins(NAMESPACE, Backend)


def describe_device_backends() -> list[PluginStatus]:
    """Every installed GPU backend, whether it loads here, and why not."""
    from fuse.backends._registry import describe_plugins
    from fuse.backends.base import DeviceBackend

    return describe_plugins(DEVICE_NAMESPACE, DeviceBackend)
