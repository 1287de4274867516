#!/usr/bin/env bash
# Set everything up and train a small model on 2 local workers with the default backend (Gloo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$(pwd)/.venv/bin:$PATH"
exec fuserun -np 2 python examples/train_numpy.py "$@"
