#!/usr/bin/env bash
# Set up a development environment on a fresh Debian/Ubuntu machine: the Gloo library from the
# distribution, a virtualenv in .venv, and fuse installed into it in editable mode (compiled
# code rebuilds on import).  Safe to run again.
#
# FUSE_SETUP_MINIMAL=1 stops after fuse itself (NumPy API, Gloo backend): no torch, optuna,
# MPI, Ray, PySpark or Java.  That is what scripts/demo.sh needs; a later full run adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says what it does and, when done, how long setup has taken so far (a fresh
# machine spends minutes in pip and the compiler: the user sees where).
SETUP_START=$SECONDS
say() { echo "setup [$((SECONDS - SETUP_START))s]: $*"; }
MINIMAL=${FUSE_SETUP_MINIMAL:-0}
if [ "$MINIMAL" = 1 ]; then
  say "minimal setup (FUSE_SETUP_MINIMAL=1): Gloo, a virtualenv, fuse; no torch, MPI, Ray, Spark"
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if [ ! -f /usr/share/cmake/Gloo/GlooConfig.cmake ]; then
  say "installing Debian's libgloo-dev, g++, python3-venv, python3-dev (apt-get)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libgloo-dev g++ python3-venv python3-dev >/dev/null
fi

# The ssh launcher test runs its hosts' sshd from openssh-server (scripts/cluster.sh), and the
# partition tests cut a host off with iptables.  Installed
# only in CI (CI=true) or when asked (FUSE_INSTALL_SSHD=1), and as root (the test needs root):
# on a developer's machine the test says it is skipped and why.  The package's own system sshd
# is not started (policy-rc.d forbids it for the length of the install).
if [ "$MINIMAL" != 1 ] && { [ ! -x /usr/sbin/sshd ] || [ ! -x /usr/sbin/iptables ]; } &&
   [ "$(id -u)" = 0 ] &&
   { [ "${CI:-}" = true ] || [ "${FUSE_INSTALL_SSHD:-0}" = 1 ]; }; then
  POLICY=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    POLICY=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$POLICY"
    chmod 755 "$POLICY"
  fi
  say "installing openssh-server, iproute2 and iptables for the ssh and partition tests"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server iproute2 iptables >/dev/null
  if [ -n "$POLICY" ]; then rm -f "$POLICY"; fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating the virtualenv .venv"
  "$PYTHON" -m venv .venv
fi
# meson-python finds meson, ninja and cython on PATH, at install time and at every rebuild.
export PATH="$(pwd)/.venv/bin:$PATH"
# The minimal setup installs fuse's binary wheel when scripts/build_wheels.sh has one of these very
# sources for this Python in its cache: a few seconds instead of compiling the engine.
if [ "$MINIMAL" = 1 ] &&
   wheel=$(bash scripts/build_wheels.sh --cached "$(.venv/bin/python -c \
             'import sys; print("%d.%d" % sys.version_info[:2])')"); then
  say "installing fuse's wheel of these sources ($wheel), built by scripts/build_wheels.sh"
  .venv/bin/python -m pip install -q "$wheel"
  # -I: the installed fuse, not this checkout's sources (the current folder is not on the path)
  .venv/bin/python -I -c "import fuse" ||
    { echo "setup: FAILED: fuse does not import" >&2; exit 1; }
  say "fuse installed in $(pwd)/.venv (minimal, from the wheel: run scripts/setup.sh without" \
      "FUSE_SETUP_MINIMAL for torch, MPI, Ray, Spark and an editable install)"
  exit 0
fi
say "installing the build tools (meson-python, meson, ninja, Cython, NumPy) with pip"
# (the venv's own pip is new enough for what the minimal setup installs: it skips the upgrade)
if [ "$MINIMAL" != 1 ]; then .venv/bin/python -m pip install -q --upgrade pip; fi
# Build requirements first: the editable install builds without isolation so that later
# rebuilds (on import) find the same meson, ninja and Cython.
.venv/bin/python -m pip install -q "meson-python>=0.16" "meson>=1.3" ninja "Cython>=3.0.10" "numpy>=1.24"
# PyTorch for the fuse.torch adapter and its tests, pinned.  Which build pip gets depends on the
# package index: PyPI's torch wheel for Linux x86_64 is the CUDA build (it also pulls the
# nvidia-* runtime packages, several GB; it runs on a CPU-only machine all the same), while
# PyTorch's own CPU index serves the small CPU build.  FUSE_TORCH_INDEX_URL picks the index,
# e.g. FUSE_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for the CPU build; unset, pip
# uses its configured index (a local one here, which has the CPU build).  FUSE_SKIP_TORCH=1
# leaves torch out: tests/frameworks/torch and the autotune tests then report themselves as skipped.
# A torch that cannot be installed stops the setup: the suite needs it.
TORCH_VERSION=${FUSE_TORCH_VERSION:-2.13.0}
if [ "$MINIMAL" = 1 ]; then
  :
elif [ "${FUSE_SKIP_TORCH:-0}" = 1 ]; then
  echo "setup: FUSE_SKIP_TORCH=1: no torch; tests/frameworks/torch and the autotune tests will be skipped" >&2
elif ! .venv/bin/python -c "import torch" 2>/dev/null; then
  say "installing torch==$TORCH_VERSION with pip (the CUDA build from PyPI is several GB)"
  if ! .venv/bin/python -m pip install -q "torch==$TORCH_VERSION" \
      ${FUSE_TORCH_INDEX_URL:+--index-url "$FUSE_TORCH_INDEX_URL"}; then
    echo "setup: FAILED to install torch==$TORCH_VERSION" \
         "${FUSE_TORCH_INDEX_URL:+from $FUSE_TORCH_INDEX_URL}" >&2
    echo "setup: the test suite needs it; set FUSE_TORCH_INDEX_URL or FUSE_TORCH_VERSION, or" >&2
    echo "setup: FUSE_SKIP_TORCH=1 to go on without torch (its tests are then skipped)" >&2
    exit 1
  fi
fi
if [ "$MINIMAL" = 1 ]; then
  # Compiled with -O1 in a build directory of its own: the engine's dozen Cython units take most
  # of a fresh setup, and -O1 compiles them about 2.6x faster than the release build's -O3
  # (one unit: 14.5 s against 37.5 s on a busy 2-core machine).  A later full setup
  # builds the release engine in build/dev and the virtualenv then uses that one.
  say "building and installing fuse (editable, -O1; compiling the engine takes about a minute)"
  .venv/bin/python -m pip install -q --no-build-isolation -Cbuild-dir=build/minimal \
    -Csetup-args=-Doptimization=1 -e .
  .venv/bin/python -c "import fuse" ||
    { echo "setup: FAILED: fuse does not import" >&2; exit 1; }
  say "fuse installed in $(pwd)/.venv (minimal: run scripts/setup.sh without" \
      "FUSE_SETUP_MINIMAL for torch, MPI, Ray and Spark)"
  exit 0
fi
say "building and installing fuse (editable) with its test and MPI extras (mpi4py, mpich)"
# fuse-dl was distributed as "fuse" before 0.2.0: an old install of it would stand beside
# the new one with the same package and entry points
.venv/bin/python -m pip uninstall -y -q fuse 2>/dev/null || true
.venv/bin/python -m pip install -q --no-build-isolation -Cbuild-dir=build/dev -e ".[test,mpi]"
if [ "${FUSE_SKIP_TORCH:-0}" != 1 ]; then
  # Say which build is there, and check that it imports (a wheel can install and not import).
  .venv/bin/python - <<'PY'
import torch
if torch.version.cuda is None:
    print(f"setup: torch {torch.__version__}, the CPU build")
else:
    print(f"setup: torch {torch.__version__}, a CUDA {torch.version.cuda} build (it runs on a CPU "
          "too); for the small CPU build: rm -rf .venv; "
          "FUSE_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh")
PY
  # The autotuner's optimiser (optuna's GP sampler runs on torch): only next to the pinned
  # torch, since the `autotune` extra would otherwise pull an unpinned one.
  say "installing optuna and scipy (the autotuner's optimiser)"
  .venv/bin/python -m pip install -q "optuna>=3.6" scipy
fi
# The Ray and Spark integrations (fuse.ray, fuse.spark) and their tests: Ray and PySpark share
# .venv (neither pins NumPy or torch); Spark runs on a Java runtime, which Debian's
# default-jre-headless gives where there is none (Spark 4 needs Java 17 or later).
# FUSE_SKIP_INTEGRATIONS=1 leaves all three out: tests/integrations then reports itself skipped.
if [ "${FUSE_SKIP_INTEGRATIONS:-0}" != 1 ]; then
  if ! command -v java >/dev/null 2>&1; then
    say "installing Debian's default-jre-headless (Java for Spark)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq default-jre-headless >/dev/null
  fi
  # pyarrow: the Spark estimators' stores and readers (pyarrow.fs, pyarrow.dataset).
  if ! .venv/bin/python -c "import ray.train, ray.tune, pyspark, pyarrow" 2>/dev/null; then
    say "installing Ray (Train, Tune), PySpark and pyarrow with pip (FUSE_SKIP_INTEGRATIONS=1 leaves them out)"
    .venv/bin/python -m pip install -q "ray[train,tune]==${FUSE_RAY_VERSION:-2.60.0}" \
      "pyspark==${FUSE_PYSPARK_VERSION:-4.3.0}" "pyarrow==${FUSE_PYARROW_VERSION:-26.0.1}" ||
      { echo "setup: FAILED to install ray and pyspark (FUSE_SKIP_INTEGRATIONS=1 skips them)" >&2
        exit 1; }
  fi
  .venv/bin/python -c "import ray, pyspark, pyarrow" && java -version >/dev/null 2>&1 ||
    { echo "setup: FAILED: ray, pyspark or java does not work" >&2; exit 1; }
  # Lightning for fuse.lightning (FuseStrategy) and its tests, pinned; it runs on the torch above
  # (Lightning 2.6 takes torch >= 2.1), so only where torch is installed.
  if [ "${FUSE_SKIP_TORCH:-0}" != 1 ] && ! .venv/bin/python -c "import lightning" 2>/dev/null; then
    .venv/bin/python -m pip install -q "lightning==${FUSE_LIGHTNING_VERSION:-2.6.6}" ||
      { echo "setup: FAILED to install lightning (FUSE_SKIP_INTEGRATIONS=1 skips it)" >&2
        exit 1; }
  fi
fi
# What the main suite needs from .venv must be there now, or setup fails here rather than the
# tests skipping later: MPI (mpi4py, and mpiexec from the mpich wheel), the autotuner's optimiser.
.venv/bin/python -c "import fuse, mpi4py, ml_dtypes, pytest" ||
  { echo "setup: FAILED: the installed environment does not import" >&2; exit 1; }
[ -x .venv/bin/mpiexec ] ||
  { echo "setup: FAILED: the mpich wheel installed no .venv/bin/mpiexec" >&2; exit 1; }
if [ "${FUSE_SKIP_TORCH:-0}" != 1 ]; then
  .venv/bin/python -c "import optuna, scipy" ||
    { echo "setup: FAILED: optuna/scipy do not import" >&2; exit 1; }
fi
say "fuse installed in $(pwd)/.venv"
