#!/usr/bin/env bash
# Set everything up and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The editable install rebuilds compiled code on import and the tests start worker
# processes: both need the virtualenv's tools first on PATH.
export PATH="$(pwd)/.venv/bin:$PATH"
exec python -m pytest "$@"
