"""Where things are, for tests that start scripts or read files by path: the repository's root,
this folder of helpers (worker scripts run from here, and workers import helpers from here), the
examples and the scripts."""

from __future__ import annotations

import os

SUPPORT = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(SUPPORT)
ROOT = os.path.dirname(TESTS)
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPTS = os.path.join(ROOT, "scripts")


def support(name: str) -> str:
    """The path of the helper ``name`` in tests/support (a worker script, a plugin's source)."""
    return os.path.join(SUPPORT, name)
