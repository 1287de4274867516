"""The fuse-pygloo plugin's tests: real worker processes on FUSE_BACKEND=pygloo.

They reuse fuse's own test helpers (tests/support, engine_util among them) and engine tests from the
repository this plugin lives in, and run in .venv-pygloo (CPython 3.10, the only Python pygloo
has a wheel for), made by ``bash scripts/test_pygloo.sh``.  Where pygloo or the plugin is
missing they are skipped with the reason, or failed where FUSE_TEST_REQUIRE names ``pygloo``.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
for sub in ("tests/support", "tests/collectives", "tests/engine", "tests/worker"):
    path = os.path.join(ROOT, sub)
    if path not in sys.path:  # the helpers and the imported engine test modules import by name
        sys.path.insert(0, path)

import needs  # noqa: E402


def pygloo_missing() -> str:
    """Why the plugin cannot run here ("" when it can)."""
    try:
        importlib.import_module("pygloo")
    except ImportError as err:
        return f"import pygloo: {err}"
    from fuse.backends import describe_backends

    rows = [row for row in describe_backends() if row.name == "pygloo"]
    if not rows:
        return "no backend named pygloo is registered (pip install plugins/fuse-pygloo)"
    if not rows[0].loads:
        return f"the pygloo backend does not load: {rows[0].reason}"
    return ""


@pytest.fixture(autouse=True)
def _needs_pygloo():
    reason = pygloo_missing()
    if reason:
        needs.missing("pygloo", reason)
