"""tests/mxnet runs in its own environment (.venv-mxnet, made by scripts/test_mxnet.sh): MXNet
1.9.1 needs NumPy < 1.24.  Anywhere else (the main .venv) every test here is skipped, with the
reason, instead of failing.  The test modules themselves never import mxnet (their workers do),
so they always collect."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REASON = ("tests/mxnet needs MXNet 1.9.1 with NumPy < 1.24: run bash scripts/test_mxnet.sh "
          "(it makes .venv-mxnet)")


@pytest.fixture(autouse=True)
def _needs_mxnet():
    pytest.importorskip("mxnet", reason=REASON)
