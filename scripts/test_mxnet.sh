#!/usr/bin/env bash
# Make the MXNet environment and run tests/frameworks/mxnet (and the adapters' contract) in it.
#
# MXNet 1.9.1 (the last release) needs NumPy < 1.24, which the main .venv cannot have, so it
# gets an environment of its own: .venv-mxnet, on Python 3.11 (MXNet 1.9.1's py3-none wheel
# imports and runs there), with fuse installed in editable mode against NumPy 1.23 (the engine
# does not use NumPy's C API, so it builds and runs against any NumPy).
#
# Safe to run again: once the environment is complete for the current pyproject.toml, a second
# run installs nothing.  PYTHON_MXNET picks another interpreter (3.10 works too).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if [ ! -f /usr/share/cmake/Gloo/GlooConfig.cmake ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libgloo-dev g++ python3-venv python3-dev >/dev/null
fi

VENV=.venv-mxnet
if [ ! -x "$VENV/bin/python" ]; then
  PYTHON=${PYTHON_MXNET:-}
  if [ -z "$PYTHON" ]; then
    for candidate in "$HOME"/.pyenv/versions/3.11.*/bin/python \
                     /root/.pyenv/versions/3.11.*/bin/python \
                     "$(command -v python3.11 || true)" \
                     "$HOME"/.pyenv/versions/3.10.*/bin/python \
                     /root/.pyenv/versions/3.10.*/bin/python \
                     "$(command -v python3.10 || true)"; do
      if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON=$candidate; break; fi
    done
  fi
  if [ -z "$PYTHON" ]; then
    echo "test_mxnet: no Python 3.11 or 3.10 found (MXNet 1.9.1 needs one); set PYTHON_MXNET" >&2
    exit 1
  fi
  "$PYTHON" -m venv "$VENV"
fi
# meson-python finds meson, ninja and cython on PATH, at install time and at every rebuild.
export PATH="$(pwd)/$VENV/bin:$PATH"

# What the environment was made from; when it changes, install again.
STAMP="$VENV/.fuse-mxnet-stamp"
WANT=$(cat pyproject.toml scripts/test_mxnet.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Build requirements first (the editable install builds without isolation, so rebuilds on
  # import find the same tools); NumPy pinned below 1.24 for MXNet in the same command.
  "$VENV/bin/python" -m pip install -q "meson-python>=0.16" "meson>=1.3" ninja "Cython>=3.0.10" \
    "mxnet==1.9.1" "numpy<1.24"
  # The `mxnet` extra pins numpy<1.24 again, so the test extra cannot pull a newer one.
  # fuse-dl was distributed as "fuse" before 0.2.0: an old install of it would stand beside
  # the new one with the same package and entry points
  "$VENV/bin/python" -m pip uninstall -y -q fuse 2>/dev/null || true
  "$VENV/bin/python" -m pip install -q --no-build-isolation -Cbuild-dir=build/mxnet \
    -e ".[mxnet,test]" "mxnet==1.9.1"
  echo "$WANT" > "$STAMP"
  echo "test_mxnet: fuse installed in $(pwd)/$VENV"
fi

# In this environment MXNet must import: a broken install fails the tests, never skips them.
# tests/frameworks/contract: the adapters' shared contract, MXNet's checked here.
# tests/bench/test_mxnet_step.py: the benchmark suite's MXNet workload at tiny size (against
# Horovod where scripts/build_horovod_mxnet.sh has built it).
FUSE_TEST_REQUIRE=mxnet python -m pytest tests/frameworks/mxnet tests/frameworks/contract \
  tests/bench/test_mxnet_step.py "$@"
# The documentation's MXNet snippets, as a reader runs them (tests/docs/test_doc_snippets.py)
FUSE_TEST_REQUIRE=mxnet python -m pytest tests/docs/test_doc_snippets.py -k mxnet "$@"
