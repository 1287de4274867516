"""Helpers for the launcher and store tests (a module of its own: every test directory has a
conftest.py, so ``from conftest import ...`` would pick whichever was imported first), and their
``script`` fixture, which tests/runner and tests/cluster import into their conftest.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

LINE = re.compile(r"^\[(\d+)\]<(stdout|stderr)>:(.*)$")


def fuserun_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "fuse.runner.launch", *args]


def run_fuserun(*args: str, env: dict | None = None, timeout: float = 30,
                cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(fuserun_argv(*args), capture_output=True, timeout=timeout,
                          env=env, cwd=cwd)


def lines_of(text: bytes | str, stream: str = "stdout") -> dict[int, list[str]]:
    """rank -> forwarded lines of one stream."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(2) == stream:
            out.setdefault(int(m.group(1)), []).append(m.group(3))
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pids, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if alive(p)]
        if left:
            time.sleep(0.05)
    return left


@pytest.fixture
def script(tmp_path):
    """Write a worker script and return its path."""
    def make(body: str, name: str = "worker.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return str(path)
    return make
