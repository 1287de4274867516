"""Every extra of fuse-dl installs everything its modules import.

For each extra in pyproject.toml, a clean virtual environment gets ``fuse-dl[<extra>]`` (fuse's
wheel from the wheelhouse, the rest from the package index) and then imports the modules that
extra is for; a module that fails to import names what is missing.  This is how
``pip install fuse[ray]`` was once found to leave ``fuse.ray.train.FuseTrainer`` without pandas.

Installing every extra downloads and unpacks a few GB (TensorFlow, torch, CuPy and NCCL, Ray,
PySpark), so it runs only when FUSE_WHEEL_TEST_EXTRAS=1 asks for it (scripts/test_wheels.sh
passes the variable on).
"""

from __future__ import annotations

import os
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = os.environ.get("FUSE_WHEEL_TEST_WHEELHOUSE", "")
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]

# What each extra is for: the modules that must import once it is installed.  "test" and "docs"
# are the project's own tools (the test suite, the documentation), not a user's extras.
MODULES = {
    "torch": ["fuse.torch"],
    "tensorflow": ["fuse.tensorflow", "fuse.tensorflow.keras", "fuse.keras"],
    "mxnet": ["fuse.mxnet"],
    "mpi": ["mpi4py.MPI", "fuse.backends.mpi"],
    "nccl": ["cupy", "cupy.cuda.nccl", "fuse.backends.nccl"],
    "nccl-cu12": ["cupy", "cupy.cuda.nccl", "fuse.backends.nccl"],
    "nccl-cu13": ["cupy", "cupy.cuda.nccl", "fuse.backends.nccl"],
    "autotune": ["optuna", "scipy", "torch", "fuse.engine.autotune"],
    "ray": ["fuse.ray", "fuse.ray.train", "fuse.ray.tune"],
    "spark": ["fuse.spark", "fuse.spark.common.store", "fuse.spark.common.reader",
              "pyarrow.dataset", "pandas"],
    "lightning": ["fuse.lightning"],
}

pytestmark = pytest.mark.skipif(
    os.environ.get("FUSE_WHEEL_TEST_EXTRAS") != "1" or not WHEELHOUSE,
    reason="the extras test installs every extra (a few GB): FUSE_WHEEL_TEST_EXTRAS=1 "
           "scripts/test_wheels.sh runs it")


def test_every_extra_is_checked():
    assert set(EXTRAS) - {"test", "docs"} == set(MODULES), "an extra with nothing to check"


# pytest's default 300 s is too short for installing TensorFlow, torch or Ray into a clean
# venv on a loaded machine (7 of 9 extras ran past it there, at load 30)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("extra", sorted(MODULES))
def test_extra_installs_what_its_modules_import(extra, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--find-links", WHEELHOUSE, f"fuse-dl[{extra}]"],
        capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr
    check = subprocess.run(
        [python, "-c", "import importlib, sys\n"
         "for name in sys.argv[1:]:\n"
         "    try:\n"
         "        importlib.import_module(name)\n"
         "    except Exception as err:\n"
         "        sys.exit(f'{name}: {type(err).__name__}: {err}')\n",
         *MODULES[extra]],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert check.returncode == 0, f"pip install fuse-dl[{extra}] then: {check.stderr}"
