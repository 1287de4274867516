#!/usr/bin/env bash
# The TensorFlow/Keras adapter's tests, in an environment of their own: TensorFlow 2.21 needs
# NumPy >= 1.26 and brings ~600 MB, so it does not share the main .venv.  Makes .venv-tf
# (Python 3.11) on the first run, installs fuse into it in editable mode (build dir build/tf),
# then runs tests/frameworks/tensorflow (and the Keras Spark estimator test, and the adapters'
# contract) with any arguments given.  Safe to run again: what is installed
# already is not installed twice.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-tf
TF_VERSION=${FUSE_TF_VERSION:-2.21.0}
PYTHON=${PYTHON_TF:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# meson-python finds meson, ninja and cython on PATH, at install time and at every rebuild.
export PATH="$(pwd)/$VENV/bin:$PATH"
# PySpark and pyarrow: the Keras Spark estimator's tests (tests/integrations/spark/test_spark_keras.py),
# on the Java runtime that scripts/setup.sh installs.
if ! "$VENV/bin/python" -c "import tensorflow, mesonpy, pytest, ml_dtypes, pyspark, pyarrow" \
    2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "tensorflow==$TF_VERSION" "meson-python>=0.16" \
    "meson>=1.3" ninja "Cython>=3.0.10" "numpy>=1.26" pytest pytest-timeout ml_dtypes \
    setuptools pyyaml "pyspark==${FUSE_PYSPARK_VERSION:-4.3.0}" \
    "pyarrow==${FUSE_PYARROW_VERSION:-26.0.1}"
fi
if ! "$VENV/bin/python" -c "import fuse.tensorflow" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --no-build-isolation -Cbuild-dir=build/tf -e .
fi
# In this environment TensorFlow must import: a broken install fails the tests, never skips them.
REQUIRE=tensorflow
if command -v java >/dev/null 2>&1; then REQUIRE=$REQUIRE,spark; fi
# tests/frameworks/contract: the adapters' shared contract, TensorFlow's checked here.
# tests/bench/test_tf_step.py: the benchmark suite's TensorFlow workload at tiny size.
FUSE_TEST_REQUIRE=$REQUIRE python -m pytest tests/frameworks/tensorflow \
  tests/integrations/spark/test_spark_keras.py tests/frameworks/contract \
  tests/bench/test_tf_step.py "$@"
# The documentation's TensorFlow/Keras snippets, as a reader runs them (tests/docs/test_doc_snippets.py)
FUSE_TEST_REQUIRE=tensorflow python -m pytest tests/docs/test_doc_snippets.py -k tensorflow "$@"
