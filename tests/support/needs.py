"""What a test needs from its environment, and what happens when it is missing.

A test that needs something optional (a framework, MPI, the autotuner's optimiser) asks here
instead of calling ``pytest.skip`` itself.  Where the thing is missing the test is skipped with
the reason, so a plain ``pytest`` in an incomplete environment still says what it left out.
``FUSE_TEST_REQUIRE`` (comma-separated feature names) lists what this environment promises to
have: the test scripts set it for the environments they make (``scripts/test.sh``: ``mpi``,
``torch``, ``autotune``, and ``ssh`` in CI as root; ``scripts/test_tensorflow.sh``:
``tensorflow``; ``scripts/test_mxnet.sh``: ``mxnet``; ``scripts/test_pygloo.sh``: ``pygloo``
and ``torch``; ``scripts/test_gpu.sh``: ``gpu``).  A required feature that is missing fails the
test (at collection, for a module-level check) instead of skipping it, so a broken install
cannot turn tests into silence.
"""

from __future__ import annotations

import importlib
import os

import pytest

# what each feature is, and where it comes from
WHY = {
    "torch": "PyTorch is not installed (pip install 'fuse-dl[torch]'; scripts/setup.sh installs it "
             "unless FUSE_SKIP_TORCH=1)",
    "autotune": "the autotuner's optimiser is not installed (pip install 'fuse-dl[autotune]': "
                "optuna and scipy; scripts/setup.sh installs them next to torch)",
    "mpi": "MPI is not usable (pip install 'fuse-dl[mpi]': mpi4py and the mpich wheel, which "
           "brings mpiexec)",
    "tensorflow": "TensorFlow is not installed: tests/frameworks/tensorflow runs in .venv-tf "
                  "(bash scripts/test_tensorflow.sh makes it)",
    "ssh": "the ssh test needs root, iproute2 and openssh-server (scripts/setup.sh installs it "
           "as root with CI=true or FUSE_INSTALL_SSHD=1)",
    "ray": "Ray is not installed (pip install 'fuse-dl[ray]'; scripts/setup.sh installs it)",
    "spark": "PySpark or its Java runtime is missing (pip install 'fuse-dl[spark]' and a Java 17+ "
             "runtime; scripts/setup.sh installs both)",
    "lightning": "Lightning is not installed (pip install 'fuse-dl[lightning]'; scripts/setup.sh "
                 "installs it next to torch unless FUSE_SKIP_INTEGRATIONS=1)",
    "gpu": "no usable CUDA GPU with CuPy and NCCL (pip install 'fuse-dl[nccl]' on a machine "
           "with NVIDIA GPUs; bash scripts/test_gpu.sh runs tests/gpu there)",
    "mxnet": "MXNet 1.9.1 needs NumPy < 1.24: tests/frameworks/mxnet runs in .venv-mxnet "
             "(bash scripts/test_mxnet.sh makes it)",
    "pygloo": "pygloo or the fuse-pygloo plugin is not installed (pygloo has a CPython 3.10 "
              "wheel only): plugins/fuse-pygloo/tests run in .venv-pygloo "
              "(bash scripts/test_pygloo.sh makes it)",
}


def required() -> set[str]:
    """The features FUSE_TEST_REQUIRE says this environment has."""
    names = {n.strip() for n in os.environ.get("FUSE_TEST_REQUIRE", "").split(",") if n.strip()}
    unknown = names - set(WHY)
    if unknown:
        raise pytest.UsageError(f"FUSE_TEST_REQUIRE names unknown features {sorted(unknown)}; "
                                f"known: {', '.join(WHY)}")
    return names


def missing(feature: str, detail: str = "") -> None:
    """Skip because ``feature`` is missing (``detail``: what exactly); fail instead when this
    environment is required to have it."""
    __tracebackhide__ = True  # reports point at the test that needed it, not at this line
    reason = WHY[feature] + (f": {detail}" if detail else "")
    if feature in required():
        pytest.fail(f"{reason} -- but FUSE_TEST_REQUIRE={os.environ['FUSE_TEST_REQUIRE']} says "
                    f"this environment has {feature}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def module(name: str, feature: str | None = None):
    """Import and return module ``name``, which ``feature`` (default: the same name) provides;
    when it cannot be imported, :func:`missing`."""
    __tracebackhide__ = True
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(feature or name, f"import {name}: {e}")
