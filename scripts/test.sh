#!/usr/bin/env bash
# Set everything up and run the whole test suite: the main environment (.venv: NumPy, torch,
# MPI) first, then each framework that cannot share it, and the pygloo plugin (Python 3.10), in
# an environment of its own made by its script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The documentation, warnings as errors (a few seconds; its snippets run in tests/).
bash scripts/docs.sh
# What setup.sh installed, the tests may not skip for lack of (tests/support/needs.py): MPI
# always, torch and the autotuner's optimiser unless FUSE_SKIP_TORCH=1 left them out on purpose,
# Ray and Spark (with Java) unless FUSE_SKIP_INTEGRATIONS=1 did, Lightning unless either did,
# the ssh test's sshd where setup.sh installs it (root, and CI=true or FUSE_INSTALL_SSHD=1).
REQUIRE=mpi
if [ "${FUSE_SKIP_TORCH:-0}" != 1 ]; then REQUIRE=$REQUIRE,torch,autotune; fi
if [ "${FUSE_SKIP_INTEGRATIONS:-0}" != 1 ]; then REQUIRE=$REQUIRE,ray,spark; fi
if [ "${FUSE_SKIP_INTEGRATIONS:-0}" != 1 ] && [ "${FUSE_SKIP_TORCH:-0}" != 1 ]; then
  REQUIRE=$REQUIRE,lightning
fi
if [ "$(id -u)" = 0 ] && { [ "${CI:-}" = true ] || [ "${FUSE_INSTALL_SSHD:-0}" = 1 ]; }; then
  REQUIRE=$REQUIRE,ssh
fi
# The editable install rebuilds compiled code on import and the tests start worker
# processes: both need the virtualenv's tools first on PATH.
# tests/wheels and tests/kubernetes run last, from scripts/test_wheels.sh and
# scripts/test_kubernetes.sh, which make what they need (the wheels and Debian roots; podman,
# Helm's SDK, the image) first.
FUSE_TEST_REQUIRE=$REQUIRE PATH="$(pwd)/.venv/bin:$PATH" \
  python -m pytest --ignore=tests/kubernetes --ignore=tests/wheels "$@"
bash scripts/test_tensorflow.sh "$@"
bash scripts/test_mxnet.sh "$@"
# The fuse-pygloo plugin on Python 3.10 (pygloo has no other wheel): .venv-pygloo.
bash scripts/test_pygloo.sh "$@"
# fuse's binary wheels installed offline into minimal bookworm and trixie roots (root).
bash scripts/test_wheels.sh "$@"
# The image, the Helm chart and its pods as podman containers (root; installs podman itself).
bash scripts/test_kubernetes.sh "$@"
