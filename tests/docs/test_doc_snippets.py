"""Every code snippet in the documentation runs as written.

The documentation is README.md and every page under docs/.  A Python snippet is a fenced
``python`` block; the HTML comment on the line before it says how a reader runs it:
``<!-- run: fuserun -np 2 -->`` (a training script for the launcher) or ``<!-- run: python -->``
(a driver: Ray, Spark).  A block without that comment fails the test, so a new snippet is run
too.  Each snippet runs in a process of its own, from a scratch folder, with this environment's
Python; one whose framework is not installed here is skipped (scripts/test_tensorflow.sh and
scripts/test_mxnet.sh run this module's ``-k tensorflow`` and ``-k mxnet`` snippets in their
environments).  A snippet shown on several pages lives in docs/_snippets/ and is included, so
it runs once.

Shell snippets are commands for a reader's cluster (hosts, Helm, podman) and are not run; every
``fuserun`` command in them is parsed by fuserun's own parser, so a flag the docs use exists.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import needs
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "_build" not in p.parts)
_BLOCK = re.compile(r"(?:<!-- run: (?P<how>[^>]*?) -->\n)?```(?P<lang>[\w-]*)\n(?P<code>.*?)```",
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


def _blocks(lang: str):
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            if m.group("lang") == lang:
                line = text.count("\n", 0, m.start("code"))
                yield page.relative_to(ROOT), line, m.group("how"), m.group("code")


def _snippets():
    out = []
    for page, line, how, code in _blocks("python"):
        # the id names the environment that runs it: `-k tensorflow` in .venv-tf, ...
        env = next((f for f in ("mxnet", "tensorflow", "spark", "ray", "torch")
                    if f in _needed(code)), "numpy")
        out.append(pytest.param(how, code, id=f"{page}:{line}:{env}"))
    return out


SNIPPETS = _snippets()


def test_the_docs_have_snippets():
    assert len(SNIPPETS) >= 15, len(SNIPPETS)          # the pattern still finds them


# a guard against a hang, not a time limit: a Ray Tune search starts a cluster and two jobs
@pytest.mark.timeout(480)
@pytest.mark.parametrize("how,code", SNIPPETS)
def test_snippet_runs_as_written(how, code, tmp_path):
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


def _fuserun_commands():
    """(where, argv after 'fuserun') for every fuserun command in the shell snippets."""
    out = []
    for page, line, _how, code in _blocks("bash"):
        for offset, text in enumerate(code.replace("\\\n", " ").splitlines()):
            words = shlex.split(text, comments=True)
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
                words.pop(0)                          # VAR=value before the command
            if words and words[0] == "fuserun":
                out.append(pytest.param(words[1:], id=f"{page}:{line + offset}"))
    return out


@pytest.mark.parametrize("argv", _fuserun_commands())
def test_fuserun_command_in_the_docs_parses(argv):
    from fuse.runner.agent import make_parser as agent_parser
    from fuse.runner.launch import make_parser
    if "--agent" in argv:
        agent_parser({}).parse_args([a for a in argv if a != "--agent"])
    else:
        args = make_parser().parse_args(argv)
        assert args.command or args.check_build or args.version, f"no command in {argv}"
