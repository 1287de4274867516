"""fuse's binary wheels installed as a user without a compiler or Gloo would install them.

Each root (scripts/test_wheels.sh makes them) is a minimal Debian, bookworm (Python 3.11) or
trixie (3.13), with its own Python and, where the package index has torch's CPU build for that
Python, torch in its site-packages; and nothing else: no compiler, no libgloo.  The test installs
``fuse-dl[torch]`` (or plain ``fuse-dl`` in a root without torch) from the wheelhouse offline
(``--no-index``) into a fresh virtual environment there, then trains on 2 workers with
``fuserun``: the NumPy example (examples/train_numpy.py) and the PyTorch one
(examples/pytorch_mnist_style.py).  Every command runs chrooted into the root inside a network
namespace of its own, where only loopback exists.

Needs root and the environment scripts/test_wheels.sh sets; skipped, saying so, without them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = os.environ.get("FUSE_WHEEL_TEST_ROOTS", "")
WHEELHOUSE = os.environ.get("FUSE_WHEEL_TEST_WHEELHOUSE", "")
DEPS = os.environ.get("FUSE_WHEEL_TEST_DEPS", "")

pytestmark = pytest.mark.skipif(
    not (ROOTS and WHEELHOUSE and DEPS) or os.geteuid() != 0,
    reason="the wheel tests run from scripts/test_wheels.sh (root: it builds the wheels and the "
           "Debian roots they install into)")


def targets() -> list[tuple[str, str, str, str]]:
    """(suite, Python version, root, "torch" or "numpy") for each root scripts/test_wheels.sh
    made: "numpy" where it found no CPU build of torch for that Python."""
    return [tuple(item.split(":", 3)) for item in ROOTS.split()]


def in_root(root: str, version: str, job: Path, script: str, timeout: float = 240) -> str:
    """Run ``script`` (sh) chrooted into ``root``, with no network but loopback, the wheelhouse
    at /wheels, the dependencies' wheels at /deps, the examples at /examples and ``job`` (this
    test's scratch folder) at /job.  Returns its output; fails the test, with that output, if
    it exits non-zero."""
    tag = "cp" + version.replace(".", "")
    mounts = {"/wheels": WHEELHOUSE, "/deps": f"{DEPS}-{tag}", "/examples": str(REPO / "examples"),
              "/job": str(job)}
    setup = ["set -eu", "ip link set lo up", f"mount -t proc proc {root}/proc",
             f"mount --rbind /dev {root}/dev"]
    for target, source in mounts.items():
        os.makedirs(root + target, exist_ok=True)
        setup.append(f"mount --bind {source} {root}{target}")
    setup.append(f"exec chroot {root} /usr/bin/env -i PATH=/job/venv/bin:/usr/bin:/bin "
                 f"HOME=/root LANG=C.UTF-8 /bin/sh -euc \"$0\"")
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--net", "--",
                           "sh", "-c", "\n".join(setup), script],
                          capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"in {root}:\n$ {script}\n{output}"
    return output


@pytest.fixture(scope="module", params=targets() or [("none", "", "", "")],
                ids=lambda t: f"{t[0]}-py{t[1]}")
def installed(request, tmp_path_factory):
    """A root with fuse-dl[torch] (fuse-dl without torch) freshly installed from the wheelhouse,
    offline: (root, Python version, scratch folder, what the install printed, whether it has
    torch)."""
    suite, version, root, frameworks = request.param
    has_torch = frameworks == "torch"
    requirement = "fuse-dl[torch]" if has_torch else "fuse-dl"
    job = tmp_path_factory.mktemp(f"wheel-{suite}")
    # what a user without build tools has: no compiler, no Gloo, no network
    bare = in_root(root, version, job, """
        for tool in cc gcc g++ c++ cmake meson; do
          if command -v $tool; then echo "unexpected: $tool"; exit 1; fi
        done
        if ls /usr/lib/libgloo* /usr/lib/*/libgloo* 2>/dev/null; then
          echo "unexpected: libgloo"; exit 1
        fi
        python3 -c 'import urllib.request as u; u.urlopen("http://deb.debian.org", timeout=5)' \
          2>/dev/null && { echo "unexpected: network"; exit 1; }
        python3 --version""")
    assert f"Python {version}." in bare
    out = in_root(root, version, job, """
        # pip runs from its wheel (in /deps): a venv without ensurepip's copy of pip is made
        # in a second instead of a minute on a loaded machine
        python3 -m venv --without-pip --system-site-packages /job/venv
        python "$(ls /deps/pip-*.whl | head -1)/pip" install -q --no-index --no-compile \
          --find-links /wheels --find-links /deps '%s'
        python "$(ls /deps/pip-*.whl | head -1)/pip" list 2>/dev/null |
          grep -i -E '^(fuse-dl|torch) ' || true
        python -m fuse.info""" % requirement)
    yield root, version, job, out, has_torch
    shutil.rmtree(job, ignore_errors=True)


def test_installed_wheel_carries_gloo(installed):
    out, has_torch = installed[-2:]
    assert re.search(r"^fuse-dl\s+\d", out, re.M), out
    assert re.search(r"^\s+gloo\s+available", out, re.M), out
    assert re.search(r"^\s+Gloo\s+[\d.]+ from Debian bullseye libgloo-dev", out, re.M), out
    assert "libgloo-" in out.split("bundled", 1)[1].splitlines()[0], out
    if has_torch:
        assert re.search(r"^\s+torch\s+available", out, re.M), out


def test_numpy_job_on_two_workers(installed):
    root, version, job, _, _ = installed
    out = in_root(root, version, job, "fuserun -np 2 python /examples/train_numpy.py --epochs 3")
    losses = [float(x) for x in re.findall(r"epoch \d+: loss ([\d.]+)", out)]
    assert len(losses) == 3 and losses[-1] < losses[0], out
    assert "on 2 workers" in out and "all workers hold identical weights" in out, out


def test_torch_job_on_two_workers(installed):
    root, version, job, _, has_torch = installed
    if not has_torch:
        pytest.skip(f"no CPU build of torch for Python {version} on this package index "
                    "(scripts/test_wheels.sh): this root trains with NumPy only")
    out = in_root(root, version, job,
                  "fuserun -np 2 python /examples/pytorch_mnist_style.py --epochs 1")
    checksums = re.findall(r"rank (\d) final accuracy [\d.]+ checksum (\S+)", out)
    assert sorted(rank for rank, _ in checksums) == ["0", "1"], out
    assert checksums[0][1] == checksums[1][1], f"the workers' models differ:\n{out}"


def test_wheel_tags_are_manylinux_2_31_or_older():
    wheels = sorted(Path(WHEELHOUSE).glob("fuse_dl-*.whl"))
    assert wheels, f"no fuse_dl wheel in {WHEELHOUSE}"
    for wheel in wheels:
        match = re.search(r"-manylinux_(\d+)_(\d+)_x86_64\.whl$", wheel.name)
        assert match, f"{wheel.name}: not a manylinux wheel"
        assert (int(match[1]), int(match[2])) <= (2, 31), wheel.name
        size = wheel.stat().st_size
        assert size < 8e6, f"{wheel.name} is {size / 1e6:.1f} MB"
