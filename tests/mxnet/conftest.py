"""tests/mxnet runs in its own environment (.venv-mxnet, made by scripts/test_mxnet.sh): MXNet
1.9.1 needs NumPy < 1.24.  Anywhere else (the main .venv) every test here is skipped once,
with the reason, instead of failing to import."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("mxnet", reason="tests/mxnet needs MXNet 1.9.1 and NumPy < 1.24: run "
                                    "bash scripts/test_mxnet.sh (it makes .venv-mxnet)")
