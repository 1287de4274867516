#!/usr/bin/env bash
# Build Horovod 0.28.1 with MXNet 1.9.1 and Gloo into a virtual environment of its own, so that
# bench/suite/mxnet_step.py can time fuse's MXNet DistributedTrainer against Horovod's.
#
# Horovod is only the baseline of a benchmark: fuse never imports it, and the environment is
# never used by the tests.  It is made the way scripts/test_mxnet.sh makes .venv-mxnet (Python
# 3.11, MXNet 1.9.1, NumPy < 1.24); Horovod is compiled from its PyPI sdist against the headers
# and libmxnet.so that MXNet's wheel carries, with Gloo (its own copy, built by Horovod's CMake)
# and without MPI, TensorFlow or PyTorch.
#
# Usage: scripts/build_horovod_mxnet.sh [VENV]   (default .venv-horovod-mxnet, ignored by git)
# Exits 0 without building (saying why) where no Python 3.11/3.10 or no compiler is found;
# a failed build exits non-zero with pip's log at VENV/build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-horovod-mxnet}
HOROVOD_VERSION=0.28.1

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import horovod.mxnet" 2>/dev/null; then
  echo "build_horovod_mxnet: Horovod $HOROVOD_VERSION with MXNet already in $VENV"
  exit 0
fi
if ! command -v g++ >/dev/null; then
  echo "build_horovod_mxnet: skipped, no C++ compiler (g++) on PATH"
  exit 0
fi
PYTHON=${PYTHON_MXNET:-}
if [ -z "$PYTHON" ]; then
  for candidate in "$HOME"/.pyenv/versions/3.11.*/bin/python /root/.pyenv/versions/3.11.*/bin/python \
                   "$(command -v python3.11 || true)" \
                   "$HOME"/.pyenv/versions/3.10.*/bin/python /root/.pyenv/versions/3.10.*/bin/python \
                   "$(command -v python3.10 || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON=$candidate; break; fi
  done
fi
if [ -z "$PYTHON" ]; then
  echo "build_horovod_mxnet: skipped, no Python 3.11 or 3.10 (MXNet 1.9.1 needs one); set PYTHON_MXNET"
  exit 0
fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# Horovod's setup.py runs CMake and imports MXNet to find its headers and library; it builds
# without isolation so that it sees this MXNet.  cloudpickle/psutil/pyyaml/packaging are its
# runtime requirements (installed here because --no-deps keeps pip from resolving a newer NumPy).
# CMake below 4: Horovod 0.28.1's bundled Gloo asks for cmake_minimum_required(2.8.12), which
# CMake 4 refuses ("Compatibility with CMake < 3.5 has been removed").
"$VENV/bin/python" -m pip install -q "mxnet==1.9.1" "numpy<1.24" "cmake>=3.13,<4" wheel setuptools \
  cloudpickle psutil pyyaml packaging
SDIST_DIR=$(mktemp -d)
trap 'rm -rf "$SDIST_DIR"' EXIT
"$VENV/bin/python" -m pip download -q --no-binary :all: --no-deps "horovod==$HOROVOD_VERSION" -d "$SDIST_DIR"
export PATH="$(pwd)/$VENV/bin:$PATH"
export HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 \
       HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo
export MAKEFLAGS="-j${HOROVOD_BUILD_JOBS:-2}"
if ! "$VENV/bin/python" -m pip install -v --no-build-isolation --no-deps \
      "$SDIST_DIR"/horovod-"$HOROVOD_VERSION".tar.gz > "$VENV/build.log" 2>&1; then
  echo "build_horovod_mxnet: the build failed; the last lines of $VENV/build.log:" >&2
  tail -40 "$VENV/build.log" >&2
  exit 1
fi
"$VENV/bin/python" -c "import horovod.mxnet as hvd; print('build_horovod_mxnet: horovod', __import__('horovod').__version__, 'with MXNet, gloo built:', hvd.gloo_built())"
