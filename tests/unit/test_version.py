"""fuse's version has one source, meson.build: the installed distribution's metadata,
``fuse.__version__``, ``fuserun --version`` and ``python -m fuse.info`` all say the same, and
CHANGELOG.md has an entry for it."""

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import fuse
from fuse import _build_info

REPO = Path(__file__).resolve().parents[2]


def test_one_version_everywhere():
    project = re.search(r"project\('fuse'.*?version: '([^']+)'", (REPO / "meson.build").read_text(),
                        re.S)[1]
    assert fuse.__version__ == project == metadata.version(_build_info.DISTRIBUTION)
    assert _build_info.DISTRIBUTION == "fuse-dl"
    launched = subprocess.run([sys.executable, "-m", "fuse.runner.launch", "--version"],
                              capture_output=True, text=True, timeout=60)
    assert launched.stdout.strip() == f"fuse {project}", launched.stdout + launched.stderr
    info = subprocess.run([sys.executable, "-m", "fuse.info", "--json"], capture_output=True,
                          text=True, timeout=120)
    data = json.loads(info.stdout)
    assert data["fuse"] == data["build"]["version"] == project
    assert data["build"]["distribution"] == "fuse-dl"
    assert f"## {project}\n" in (REPO / "CHANGELOG.md").read_text()
