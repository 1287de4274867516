"""What this build of fuse says about itself (fuse/_build_info.py, written by meson): one
version, from meson.build, that the distribution's metadata, ``fuse.__version__``, ``fuserun
--version``, ``python -m fuse.info`` and CHANGELOG.md all agree on; and a build without Gloo
that says what is missing."""

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


def test_a_build_without_gloo_says_what_is_missing(monkeypatch):
    """A source build that found no Gloo has no gloo backend, and says so and what to do."""
    from fuse.backends.gloo import GlooBackend

    monkeypatch.setattr(_build_info, "GLOO_VERSION", "")
    ok, why = GlooBackend.is_available()
    assert not ok
    assert "no gloo backend" in why and "libgloo-dev" in why and "fuse-dl wheel" in why
