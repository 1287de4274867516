#!/usr/bin/env bash
# Set everything up and run the whole test suite: the main environment (.venv: NumPy, torch,
# MPI) first, then each framework that cannot share it, in an environment of its own made by
# its script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The editable install rebuilds compiled code on import and the tests start worker
# processes: both need the virtualenv's tools first on PATH.
PATH="$(pwd)/.venv/bin:$PATH" python -m pytest "$@"
bash scripts/test_tensorflow.sh "$@"
bash scripts/test_mxnet.sh "$@"
