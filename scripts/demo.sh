#!/usr/bin/env bash
# Set up what the demo needs and train a small NumPy model on 2 local workers with the default
# backend (Gloo).  The demo needs no torch, MPI, Ray or Spark, so on a fresh clone it asks
# setup for fuse alone (FUSE_SETUP_MINIMAL=1: Gloo, a virtualenv, the compiled engine); an
# existing .venv in which fuse imports is used as it is.  bash scripts/setup.sh adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
# The venv first on PATH before fuse is imported: the editable install rebuilds changed compiled
# code on import with the venv's meson, ninja and cython (without them the import fails, and an
# existing full .venv would be taken for a missing one).
export PATH="$(pwd)/.venv/bin:$PATH"
# (-I: the installed fuse, which may be a wheel, not this checkout's uncompiled sources)
if [ -x .venv/bin/python ] && .venv/bin/python -I -c "import fuse" 2>/dev/null; then
  echo "demo: using the existing .venv"
else
  echo "demo: setting up .venv with fuse alone (no torch, MPI, Ray or Spark; scripts/setup.sh" \
       "installs those)"
  FUSE_SETUP_MINIMAL=1 bash scripts/setup.sh
fi
echo "demo [$((SECONDS - START))s]: training a two-layer NumPy network on 2 workers:" \
     "fuserun -np 2 python examples/train_numpy.py $*"
fuserun -np 2 python examples/train_numpy.py "$@"
echo "demo: done in $((SECONDS - START)) s"
