"""tests/frameworks/mxnet runs in its own environment (.venv-mxnet, made by scripts/test_mxnet.sh): MXNet
1.9.1 needs NumPy < 1.24.  Anywhere else (the main .venv) every test here is skipped, with the
reason, instead of failing; in .venv-mxnet the script sets FUSE_TEST_REQUIRE=mxnet, so an MXNet
that does not import there fails them.  The test modules themselves never import mxnet (their
workers do), so they always collect."""

import needs
import pytest


@pytest.fixture(autouse=True)
def _needs_mxnet():
    needs.module("mxnet")
