#!/usr/bin/env bash
# Make the pygloo environment and run the fuse-pygloo plugin's tests in it
# (plugins/fuse-pygloo/tests: every collective of the backend contract, a part of fuse's
# multi-process engine tests and a torch DistributedOptimizer training, all on FUSE_BACKEND=pygloo with 2 and 3 workers),
# then fuse's unit, backend and plugin tests, which show that fuse builds and passes on 3.10.
#
# pygloo publishes a wheel for CPython 3.10 only, so the plugin gets an environment of its own:
# .venv-pygloo, on Python 3.10, with fuse built for 3.10 (editable, build dir build/py310) and
# the plugin installed as an outside package would be (pip install plugins/fuse-pygloo).
#
# torch: PyPI is the only index here with a torch 2.13.0 for CPython 3.10, and its Linux wheel is
# the CUDA build.  Measured on this machine (November 2026): `pip install torch==2.13.0` into a
# fresh 3.10 virtualenv installs 28 packages from 2.74 GB of wheels (torch 527 MB; the nvidia-*
# libraries, triton and cuda-bindings the rest), growing the virtualenv by 4.5 GB; 96 s with
# torch's wheel in pip's cache, plus about 85 s to download that wheel (6 MB/s) the first time.
# No smaller route works: `--no-deps` installs torch alone (1.1 GB) but it does not import
# (libtorch links libcudnn, libcublas, libnccl... from the nvidia-* wheels), and the CPU build
# for 3.10 is on PyTorch's own index only (FUSE_TORCH_INDEX_URL picks it where reachable, as in
# scripts/setup.sh).  So the CUDA build it is, once: the stamp below keeps a second run from
# installing anything, and the build runs on a CPU-only machine.
# FUSE_SKIP_TORCH=1 leaves torch out (the training test is then skipped, not failed).
#
# Safe to run again: once the environment is complete for the current pyproject.toml files, the
# plugin's sources and this script, a second run installs nothing.  PYTHON_PYGLOO picks another
# Python 3.10.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if [ ! -f /usr/share/cmake/Gloo/GlooConfig.cmake ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libgloo-dev g++ python3-venv \
    python3-dev >/dev/null
fi

VENV=.venv-pygloo
if [ ! -x "$VENV/bin/python" ]; then
  PYTHON=${PYTHON_PYGLOO:-}
  if [ -z "$PYTHON" ]; then
    for candidate in "$HOME"/.pyenv/versions/3.10.*/bin/python \
                     /root/.pyenv/versions/3.10.*/bin/python \
                     "$(command -v python3.10 || true)"; do
      if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON=$candidate; break; fi
    done
  fi
  if [ -z "$PYTHON" ]; then
    echo "test_pygloo: no Python 3.10 found (pygloo has wheels for 3.10 only);" \
         "set PYTHON_PYGLOO" >&2
    exit 1
  fi
  "$PYTHON" -m venv "$VENV"
fi
# meson-python finds meson, ninja and cython on PATH, at install time and at every rebuild.
export PATH="$(pwd)/$VENV/bin:$PATH"

TORCH_VERSION=${FUSE_TORCH_VERSION:-2.13.0}
STAMP="$VENV/.fuse-pygloo-stamp"
# (the plugin is installed as a copy, as a user's would be: its sources count too)
WANT=$(cat pyproject.toml plugins/fuse-pygloo/pyproject.toml plugins/fuse-pygloo/fuse_pygloo/*.py \
       scripts/test_pygloo.sh |
       { cat; echo "skip-torch=${FUSE_SKIP_TORCH:-0} torch=$TORCH_VERSION"; } |
       sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Build requirements first: the editable install builds without isolation, so that rebuilds
  # on import find the same tools.
  "$VENV/bin/python" -m pip install -q "meson-python>=0.16" "meson>=1.3" ninja "Cython>=3.0.10" \
    "numpy>=1.24"
  if [ "${FUSE_SKIP_TORCH:-0}" != 1 ] && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" \
      ${FUSE_TORCH_INDEX_URL:+--index-url "$FUSE_TORCH_INDEX_URL"} ||
      { echo "test_pygloo: FAILED to install torch==$TORCH_VERSION (FUSE_SKIP_TORCH=1 goes on" \
             "without it)" >&2; exit 1; }
  fi
  # fuse-dl was distributed as "fuse" before 0.2.0: an old install of it would stand beside
  # the new one with the same package and entry points
  "$VENV/bin/python" -m pip uninstall -y -q fuse 2>/dev/null || true
  "$VENV/bin/python" -m pip install -q --no-build-isolation -Cbuild-dir=build/py310 -e ".[test]"
  # The plugin as a user installs it: a package of its own, found through its entry point.
  "$VENV/bin/python" -m pip install -q ./plugins/fuse-pygloo
  "$VENV/bin/python" -c "import fuse, pygloo, fuse_pygloo" ||
    { echo "test_pygloo: FAILED: fuse, pygloo or fuse_pygloo does not import" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
  echo "test_pygloo: fuse and fuse-pygloo installed in $(pwd)/$VENV"
fi

# In this environment pygloo (and torch, unless left out on purpose) must work: a broken
# install fails the tests, never skips them.
REQUIRE=pygloo
OWN_REQUIRE=""
if [ "${FUSE_SKIP_TORCH:-0}" != 1 ]; then REQUIRE=$REQUIRE,torch; OWN_REQUIRE=torch; fi
FUSE_TEST_REQUIRE=$REQUIRE python -m pytest --rootdir=. plugins/fuse-pygloo/tests "$@"
# fuse itself on Python 3.10 (the main suite runs on 3.11): the unit, backend and plugin tests,
# about a minute (what needs MPI, Ray or Spark, not installed here, reports itself skipped).
UNIT_TESTS=(tests/package tests/docs tests/bench tests/backends tests/frameworks/contract
            tests/engine/test_autotune_knobs.py tests/engine/test_hierarchy_layout.py
            tests/engine/test_lowrank.py tests/engine/test_shared_memory.py
            tests/engine/test_wire_format.py tests/collectives/test_grad_sync.py
            tests/worker/test_control_handshake.py tests/worker/test_malloc_tuning.py
            tests/cluster/test_thread_budget.py tests/runner/elastic/test_elastic_parts.py
            tests/runner/elastic/test_straggler_policy.py)
FUSE_TEST_REQUIRE=$OWN_REQUIRE python -m pytest --ignore=tests/backends/mpi "${UNIT_TESTS[@]}" "$@"
