#!/usr/bin/env bash
# Run the benchmark suite: set up (or refresh) .venv, add matplotlib for the plots, then
# bench/suite/suite.py with the given arguments (--quick, --only <workloads>, --timeout <s>).
# Results: bench/results/<workload>.json and .md (its page), bench/plots/*.png, and the index in
# bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! .venv/bin/python -c "import matplotlib" 2>/dev/null; then
  .venv/bin/python -m pip install -q matplotlib
fi
# fuserun, mpiexec and the editable install's rebuild-on-import need the venv first on PATH.
PATH="$(pwd)/.venv/bin:$PATH" exec python bench/suite/suite.py "$@"
