"""Every Python snippet in README.md runs as written.

A snippet is a fenced ``python`` block.  The HTML comment on the line before it says how a
reader runs it: ``<!-- run: fuserun -np 2 -->`` (a training script for the launcher) or
``<!-- run: python -->`` (a driver: Ray, Spark).  A block without that comment fails the
test, so a new snippet is run too.  Each snippet runs in a process of its own, from a scratch
folder, with this environment's Python; one whose framework is not installed here is skipped
(scripts/test_tensorflow.sh and scripts/test_mxnet.sh run this module's ``-k tensorflow`` and
``-k mxnet`` snippets in their environments).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import needs
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BLOCK = re.compile(r"(?:<!-- run: (?P<how>[^>]*?) -->\n)?```python\n(?P<code>.*?)```",
                    re.S)
# what a snippet imports -> the feature tests/support/needs.py knows it by
_FEATURES = {"torch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet", "ray": "ray",
             "pyspark": "spark", "lightning": "lightning"}
_RUNNERS = {"fuserun -np 2": ["-m", "fuse.runner.launch", "-np", "2", sys.executable],
            "python": []}


def _needed(code: str) -> list[str]:
    """The features a snippet's imports need, in _FEATURES' order."""
    return [feature for module, feature in _FEATURES.items()
            if re.search(rf"^\s*(?:import|from) {module}\b", code, re.M)]


def _snippets():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code"))
        # the id names the environment that runs it: `-k tensorflow` in .venv-tf, ...
        env = next((f for f in ("mxnet", "tensorflow", "spark", "ray", "torch")
                    if f in _needed(m.group("code"))), "numpy")
        out.append(pytest.param(m.group("how"), m.group("code"), id=f"README.md:{line}:{env}"))
    return out


SNIPPETS = _snippets()


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 8, len(SNIPPETS)          # the pattern still finds them


# a guard against a hang, not a time limit: a Ray Tune search starts a cluster and two jobs
@pytest.mark.timeout(480)
@pytest.mark.parametrize("how,code", SNIPPETS)
def test_readme_snippet_runs_as_written(how, code, tmp_path):
    assert how in _RUNNERS, (f"the snippet has no '<!-- run: ... -->' line before it (one of "
                             f"{sorted(_RUNNERS)}); got {how!r}")
    for feature in _needed(code):
        needs.module(next(m for m, f in _FEATURES.items() if f == feature), feature)
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    # as in an activated virtualenv: its python3 first on PATH (Spark's workers run that one)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([sys.executable, *_RUNNERS[how], str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=450)
    assert proc.returncode == 0, (f"exit code {proc.returncode}\n--- stdout\n"
                                  f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-4000:]}")
