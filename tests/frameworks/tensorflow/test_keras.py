"""fuse.keras / fuse.tensorflow.keras on 2 real workers: model.fit matches one process with the
whole batch, the callbacks, load_model, SyncBatchNormalization, the tape's options, and a
Horovod-style Keras script under fuserun with only the import changed."""

import os
import re
import subprocess

import needs
import pytest

needs.module("tensorflow")

from tf_util import PYTHON, ROOT, assert_clean, job_env, run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("module", ["fuse.tensorflow.keras", "fuse.keras"])
def test_two_workers_match_one_process_with_the_whole_batch(module):
    import workers_tf_keras as w
    assert_clean(run_job(w.equivalence, args=(module,)), 20)


def test_callbacks_load_model_sync_batch_norm_tape_options():
    import workers_tf_keras as w
    assert_clean(run_job(w.keras_features), 70)


def test_horovod_style_keras_script_under_fuserun():
    script = os.path.join(ROOT, "examples", "keras_mnist_style.py")
    with open(script) as f:
        assert "import fuse.tensorflow.keras as hvd" in f.read()
    proc = subprocess.run([PYTHON, "-m", "fuse.runner.launch", "-np", "2", PYTHON, script,
                           "--epochs", "3"], capture_output=True, text=True, timeout=250,
                          env=job_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finals = re.findall(r"\[(\d)\]<stdout>:rank (\d) final loss ([\d.]+) first loss ([\d.]+) "
                        r"checksum (\S+)", proc.stdout)
    assert sorted(f[0] for f in finals) == ["0", "1"], proc.stdout[-2000:]
    assert len({f[4] for f in finals}) == 1, f"replicas diverged: {finals}"
    for f in finals:
        assert float(f[2]) < 0.8 * float(f[3]), f"did not learn: {finals}"
