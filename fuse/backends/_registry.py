"""Finding, checking and describing plugins registered through entry points.

Shared by :mod:`fuse.backends` and :mod:`fuse.frameworks`.  Nothing here runs at import time;
stevedore itself is imported only when a plugin is looked up, so ``import fuse`` stays cheap.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

@dataclasses.dataclass(frozen=True)
class PluginStatus:
    """What ``python -m fuse.info`` reports for one registered plugin."""

    name: str                      # entry point name, what FUSE_BACKEND selects
    target: str                    # entry point value, "module:attribute"
    loads: bool                    # imports, passes the contract checks, and is available here
    reason: str = ""               # why not, when ``loads`` is false
    distribution: str | None = None   # the installed package that registers it
    dist_version: str | None = None   # that package's version
    version: str | None = None     # what the plugin reports (a framework adapter: its framework)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _ignore_missing(names) -> None:
    """stevedore would log a warning for an unknown name; we raise a better error instead."""


def _reason(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def entry_point_names(namespace: str) -> list[str]:
    """Names registered in ``namespace``, sorted, without importing any plugin."""
    from importlib import metadata

    return sorted({ep.name for ep in metadata.entry_points(group=namespace)})


def _distributions(namespace: str) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """(name, target) -> (distribution, version) of the packages registering ``namespace``."""
    from importlib import metadata

    found: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for ep in metadata.entry_points(group=namespace):
        dist = getattr(ep, "dist", None)
        if dist is not None:
            found[(ep.name, ep.value)] = (dist.metadata["Name"], dist.version)
    return found


def check_plugin(plugin: Any, base: type) -> tuple[str, str | None]:
    """Reason ``plugin`` cannot be used ("" when it can), and the version it reports.

    Checks that it is a subclass of ``base`` (or of one of them, for a tuple) speaking the same
    ``api_version``, and asks its
    ``is_available()`` (which may return ``(ok, reason)`` or a bare bool)."""
    bases = base if isinstance(base, tuple) else (base,)
    match = next((b for b in bases if isinstance(plugin, type) and issubclass(plugin, b)), None)
    if match is None:
        names = " or ".join(f"{b.__module__}.{b.__qualname__}" for b in bases)
        return (f"{plugin!r} is not a subclass of {names}", None)
    base = match    # a backend family may have several contracts (CPU, device)
    want = getattr(base, "api_version", None)
    have = getattr(plugin, "api_version", None)
    if have != want:
        return (f"it implements plugin API version {have}, this fuse speaks version {want}", None)
    version = None
    version_fn = getattr(plugin, "version", None)
    if callable(version_fn):
        try:
            version = version_fn()
        except Exception as err:  # a broken version() must not hide the availability answer
            version = f"<version() raised {_reason(err)}>"
    try:
        answer = plugin.is_available()
    except Exception as err:
        return (f"is_available() raised {_reason(err)}", version)
    if isinstance(answer, tuple):
        ok, why = (answer + ("",))[:2]
    else:
        ok, why = answer, ""
    if not ok:
        return (str(why) or "is_available() returned False", version)
    return ("", version)


def load_plugin(namespace: str, kind: str, name: str, base: type,
                error: Callable[[str], BaseException]) -> type:
    """Import the plugin class registered as ``name`` in ``namespace`` and check it.

    Raises ``error(message)`` (chained to the cause) naming the plugin, its target and why."""
    from stevedore import DriverManager
    from stevedore.exception import MultipleMatches, NoMatches

    def failed(manager, ep, err):
        raise error(f"{kind} {ep.name!r} ({ep.value}) failed to load: {_reason(err)}") from err

    try:
        mgr = DriverManager(namespace=namespace, name=name, invoke_on_load=False,
                            on_load_failure_callback=failed,
                            on_missing_entrypoints_callback=_ignore_missing)
    except NoMatches as err:
        installed = ", ".join(entry_point_names(namespace)) or "none"
        raise error(f"no {kind} named {name!r} is installed (entry point group {namespace!r}); "
                    f"installed: {installed}") from err
    except MultipleMatches as err:
        raise error(f"several installed packages register a {kind} named {name!r} in "
                    f"{namespace!r}; uninstall all but one ({err})") from err
    ext = mgr.extensions[0]
    reason, _ = check_plugin(ext.plugin, base)
    if reason:
        raise error(f"{kind} {name!r} ({ext.entry_point.value}) is unavailable: {reason}")
    return ext.plugin


def describe_plugins(namespace: str, base: type) -> list[PluginStatus]:
    """Every plugin registered in ``namespace``, whether it loads here and why not.

    Imports every plugin module (but constructs nothing); load failures are recorded, not logged."""
    from stevedore import ExtensionManager

    failures: list[tuple[Any, BaseException]] = []
    mgr = ExtensionManager(namespace=namespace, invoke_on_load=False,
                           on_load_failure_callback=lambda m, ep, err: failures.append((ep, err)))
    dists = _distributions(namespace)
    rows = []
    for ext in mgr.extensions:
        ep = ext.entry_point
        reason, version = check_plugin(ext.plugin, base)
        rows.append(PluginStatus(ep.name, ep.value, not reason, reason,
                                 *dists.get((ep.name, ep.value), (None, None)), version=version))
    for ep, err in failures:
        rows.append(PluginStatus(ep.name, ep.value, False, f"import failed: {_reason(err)}",
                                 *dists.get((ep.name, ep.value), (None, None))))
    counts: dict[str, list[str]] = {}
    for row in rows:
        counts.setdefault(row.name, []).append(row.target)
    for i, row in enumerate(rows):
        targets = counts[row.name]
        if len(targets) > 1:  # load_plugin refuses to pick one; say so here too
            why = f"the name is registered {len(targets)} times ({', '.join(targets)})"
            rows[i] = dataclasses.replace(row, loads=False,
                                          reason=f"{why}; {row.reason}" if row.reason else why)
    rows.sort(key=lambda r: (r.name, r.target))
    return rows
