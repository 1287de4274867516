"""The Horovod-style Gluon script runs to completion under fuserun with 2 workers."""

import ast
import os
import re
import subprocess

import pytest

from mx_util import PYTHON, ROOT, job_env

pytestmark = pytest.mark.timeout(240)

SCRIPT = os.path.join(ROOT, "examples", "mxnet_gluon_style.py")


def test_only_the_import_names_fuse():
    with open(SCRIPT) as f:
        tree = ast.parse(f.read())
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    fuse_imports = [ast.unparse(n) for n in imports if "fuse" in ast.unparse(n)]
    assert fuse_imports == ["import fuse.mxnet as hvd"]
    code = ast.unparse(ast.Module(body=tree.body[1:], type_ignores=[]))  # without docstring
    assert code.count("fuse") == 1, "the script uses fuse only through `hvd`"


@pytest.mark.parametrize("extra", [[], ["--fp16-allreduce"]], ids=["plain", "fp16"])
def test_horovod_style_script_under_fuserun(extra):
    proc = subprocess.run([PYTHON, "-m", "fuse.runner.launch", "-np", "2", PYTHON, SCRIPT,
                           "--epochs", "2", *extra], capture_output=True, text=True,
                          timeout=200, env=job_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finals = re.findall(r"\[(\d)\]<stdout>:rank (\d) final accuracy ([\d.]+) checksum (\S+)",
                        proc.stdout)
    assert sorted(f[0] for f in finals) == ["0", "1"], proc.stdout[-2000:]
    assert len({f[3] for f in finals}) == 1, f"replicas diverged: {finals}"
    accuracy = {float(f[2]) for f in finals}
    assert len(accuracy) == 1 and accuracy.pop() > 0.5, finals   # it learned something
