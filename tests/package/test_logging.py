"""FUSE_LOG_LEVEL / FUSE_LOG_HIDE_TIME: level filtering, the rank tag, timestamps; and the
launcher flags that set them (and the timeline's)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest

from fuse import _log
from fuse.config import Config
from fuse.runner.launch import env_from_args, parse_args

LEVELS = ["trace", "debug", "info", "warning", "error", "fatal"]
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


@pytest.fixture(autouse=True)
def _restore_logger():
    yield
    for h in list(_log.logger.handlers):
        if getattr(h, "_fuse", False):
            _log.logger.removeHandler(h)
    _log.logger.setLevel(logging.NOTSET)


def _emit_all(log):
    log.log(_log.TRACE, "m-trace")
    log.debug("m-debug")
    log.info("m-info")
    log.warning("m-warning")
    log.error("m-error")
    log.critical("m-fatal")


@pytest.mark.parametrize("level", LEVELS)
def test_level_filters(capsys, level):
    log = _log.configure(Config.from_env({"FUSE_LOG_LEVEL": level.upper()}).log_level, 3, False)
    _emit_all(log)
    err = capsys.readouterr().err
    shown = [lv for lv in LEVELS if f"m-{lv}\n" in err]
    assert shown == LEVELS[LEVELS.index(level):], err


def test_rank_tag_and_timestamp(capsys):
    log = _log.configure("info", 5, False)
    log.info("hello %d", 1)
    line = capsys.readouterr().err.strip()
    assert TIMESTAMP.match(line), line
    assert line.endswith("[fuse INFO rank 5] hello 1"), line


def test_hide_time(capsys):
    hide = Config.from_env({"FUSE_LOG_HIDE_TIME": "1"}).log_hide_time
    assert hide is True
    log = _log.configure("warning", 0, hide)
    log.warning("w")
    assert capsys.readouterr().err == "[fuse WARNING rank 0] w\n"


def test_reconfigure_keeps_one_handler(capsys):
    _log.configure("info", 0, True)
    log = _log.configure("info", 1, True)
    log.info("once")
    assert capsys.readouterr().err == "[fuse INFO rank 1] once\n"


def test_bad_level_and_warn_alias():
    assert Config.from_env({"FUSE_LOG_LEVEL": "warn"}).log_level == "warning"
    assert Config.from_env({"HOROVOD_LOG_LEVEL": "DEBUG"}).log_level == "debug"
    with pytest.raises(ValueError, match="trace"):
        Config.from_env({"FUSE_LOG_LEVEL": "loud"})


def test_launcher_flags_set_env():
    env = env_from_args(parse_args(["--log-level", "debug", "--log-without-timestamp",
                                    "--timeline-filename", "/tmp/t.json",
                                    "--timeline-mark-cycles", "python", "x.py"]))
    assert env["FUSE_LOG_LEVEL"] == "DEBUG"
    assert env["FUSE_LOG_HIDE_TIME"] == "1"
    assert env["FUSE_TIMELINE"] == "/tmp/t.json"
    assert env["FUSE_TIMELINE_MARK_CYCLES"] == "1"


@pytest.mark.parametrize("level,debug_shown", [("debug", True), ("error", False)])
def test_init_logs_at_env_level(level, debug_shown):
    """A real (1-rank) init: its debug line appears only at FUSE_LOG_LEVEL=debug."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    env.update(FUSE_LOG_LEVEL=level, FUSE_LOG_HIDE_TIME="1", FUSE_BACKEND="gloo")
    proc = subprocess.run([sys.executable, "-c", "import fuse; fuse.init(); fuse.shutdown()"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = "[fuse DEBUG rank 0] initialized: rank 0 of 1, backend gloo ("
    assert any(s.startswith(line) for s in proc.stderr.splitlines()) == debug_shown, \
        proc.stderr
