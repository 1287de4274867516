#!/usr/bin/env bash
# Build the documentation (docs/, Sphinx with MyST and furo) into docs/_build/html, warnings as
# errors.  Uses .venv (scripts/test.sh has made it by then); on a fresh clone it makes the
# minimal one first (fuse alone: the API reference then imports fuse.torch, fuse.ray, ... with
# their frameworks mocked, as it does TensorFlow and MXNet everywhere).  The `docs` extra's
# packages are read from pyproject.toml, so the two cannot differ.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
# The venv first on PATH before fuse is imported: the editable install rebuilds changed compiled
# code on import with the venv's meson, ninja and cython.
export PATH="$(pwd)/.venv/bin:$PATH"
if ! { [ -x .venv/bin/python ] && .venv/bin/python -c "import fuse" 2>/dev/null; }; then
  FUSE_SETUP_MINIMAL=1 bash scripts/setup.sh
fi
mapfile -t DOCS_EXTRA < <(python - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["docs"]))
PY
)
if ! python - "${DOCS_EXTRA[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
sys.exit(any(version(r.name) not in r.specifier for r in map(Requirement, sys.argv[1:])))
PY
then
  echo "docs: installing the docs extra: ${DOCS_EXTRA[*]}"
  python -m pip install -q "${DOCS_EXTRA[@]}"
fi
# -W: a warning fails the build; --keep-going: report every warning, not just the first;
# -j 2: the build machine's cores; -E: read every page again (generated tables included).
python -m sphinx -W --keep-going -E -q -j 2 -b html docs docs/_build/html
echo "docs: built docs/_build/html/index.html in $((SECONDS - START)) s"
