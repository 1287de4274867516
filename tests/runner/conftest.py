"""Helpers for the launcher tests: run fuserun as a real process, parse prefixed output."""

from __future__ import annotations

import textwrap

import pytest


@pytest.fixture
def script(tmp_path):
    """Write a worker script and return its path."""
    def make(body: str, name: str = "worker.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return str(path)
    return make
