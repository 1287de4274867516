"""The agent's zygote (fuse.runner.zygote): ranks forked from a warm parent behave as the
processes the agent started before it: their arguments, environment and directory, their output
forwarded with the rank's prefix, their exit code (an exception's 1, a signal's negative
number).  Real processes; the zygote preloads a small module here (the image's preload, torch,
is what the container test runs)."""

from __future__ import annotations

import os
import sys

import pytest

from fuse.runner.rank_process import ForkedRank
from fuse.runner.zygote import Zygote, preload_modules, python_command

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def zygote():
    z = Zygote.start(["json", "decimal"])
    assert z.wait_ready(240), z.why_not
    yield z
    z.close()


def run(zygote, argv, env, cwd=None) -> tuple[int, list[str]]:
    args = python_command(argv, env)
    assert args is not None, argv
    return ForkedRank(*zygote.fork(args, env, cwd), rank=3).finish()


def test_a_forked_rank_gets_its_arguments_environment_and_exit_code(zygote, tmp_path, capfd):
    script = tmp_path / "rank.py"
    script.write_text("import os, sys, decimal\n"
                      "print('ARGS', sys.argv[1:], os.environ['RANK_VAR'], os.getcwd(),\n"
                      "      __name__, 'decimal' in sys.modules)\n"
                      "sys.exit(7)\n")
    env = dict(os.environ, RANK_VAR="seven")
    rc, _tail = run(zygote, [sys.executable, "-u", str(script), "a", "b"], env, str(tmp_path))
    assert rc == 7
    out = capfd.readouterr().out
    assert f"[3]<stdout>:ARGS ['a', 'b'] seven {tmp_path} __main__ True" in out, out


def test_a_failing_rank_reports_its_traceback_and_a_killed_one_its_signal(zygote, capfd):
    env = dict(os.environ)
    rc, tail = run(zygote, [sys.executable, "-c", "raise ValueError('rank broke')"], env)
    assert rc == 1 and tail[-1] == "ValueError: rank broke", tail
    rank = ForkedRank(*zygote.fork(["-c", "import time; time.sleep(60)"], env), rank=4)
    assert rank.poll() is None
    rank.kill()
    assert rank.finish()[0] == -9


def test_only_this_interpreter_running_python_code_is_forked():
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + "/usr/bin")
    assert python_command([sys.executable, "-m", "mod", "x"], env) == ["-m", "mod", "x"]
    assert python_command([sys.executable, "script.py"], env) == ["script.py"]
    assert python_command([sys.executable, "-X", "dev", "script.py"], env) is None
    assert python_command(["/bin/sh", "-c", "true"], env) is None
    assert python_command([sys.executable], env) is None
    assert preload_modules({}) == [] and preload_modules({"FUSE_AGENT_PRELOAD": "none"}) == []
    assert preload_modules({"FUSE_AGENT_PRELOAD": "a, b"}) == ["a", "b"]


def test_a_zygote_that_cannot_import_its_modules_says_why():
    z = Zygote.start(["no_such_module_k8s"])
    try:
        assert not z.wait_ready(240)
        assert "no_such_module_k8s" in z.why_not
    finally:
        z.close()
