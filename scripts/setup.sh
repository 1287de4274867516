#!/usr/bin/env bash
# Set up a development environment on a fresh Debian/Ubuntu machine: the Gloo library from the
# distribution, a virtualenv in .venv, and fuse installed into it in editable mode (compiled
# code rebuilds on import).  Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if [ ! -f /usr/share/cmake/Gloo/GlooConfig.cmake ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libgloo-dev g++ python3-venv python3-dev >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# meson-python finds meson, ninja and cython on PATH, at install time and at every rebuild.
export PATH="$(pwd)/.venv/bin:$PATH"
.venv/bin/python -m pip install -q --upgrade pip
# Build requirements first: the editable install builds without isolation so that later
# rebuilds (on import) find the same meson, ninja and Cython.
.venv/bin/python -m pip install -q "meson-python>=0.16" "meson>=1.3" ninja "Cython>=3.0.10" "numpy>=1.24"
# PyTorch for the fuse.torch adapter and its tests: the CPU build, pinned, because an unpinned
# "torch" pulls a multi-GB CUDA build.  FUSE_SKIP_TORCH=1 leaves it out.
if [ "${FUSE_SKIP_TORCH:-0}" != 1 ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "torch==${FUSE_TORCH_VERSION:-2.13.0}" ||
    echo "setup: torch could not be installed; the torch tests will be skipped" >&2
fi
.venv/bin/python -m pip install -q --no-build-isolation -Cbuild-dir=build/dev -e ".[test,mpi]"
# The autotuner's optimiser (optuna's GP sampler runs on torch): only next to the pinned torch,
# since the `autotune` extra would otherwise pull an unpinned one.
if .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "optuna>=3.6" scipy
fi
echo "setup: fuse installed in $(pwd)/.venv"
