"""Elastic MXNet jobs under ``fuserun``, tested as the PyTorch ones
(tests/runner/elastic/test_elastic_torch.py): MXNetState (a Gluon layer, a DistributedTrainer with
momentum, an ElasticSampler) survives a SIGKILLed worker (rank 0 included) and an exception in
the middle of an epoch, and a discovery script that grows the job from 2 to 4 workers and back.
The weights of every worker of the last generation must be those rebuilt from the log of
committed steps (to rounding: the trainer averages, the worker scales the average back to the
sum, which is exact only for power-of-two sizes), and every epoch must see every sample."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from elastic_util import check_sampled_training, fuserun, grow_and_shrink, job_env
from paths_util import support

pytestmark = pytest.mark.timeout(240)

WORKER = support("workers_mx_elastic.py")
EPOCHS = 2
RTOL = 1e-12


@pytest.mark.parametrize("fault", ["kill:0:1:7", "kill:0:0:7", "raise:0:2:7"])
def test_mxnet_state_survives_a_lost_worker(tmp_path, fault):
    argv = fuserun("-np", "3", "--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                   sys.executable, WORKER, str(tmp_path), str(EPOCHS), fault)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=200, env=job_env(),
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = check_sampled_training(tmp_path, 2, EPOCHS, rtol=RTOL)
    assert {r["generation"] for r in res} == {1}


def test_mxnet_discovery_grows_and_shrinks_the_job(tmp_path):
    grow_and_shrink(tmp_path, [sys.executable, WORKER, str(tmp_path), "8"], steps=3,
                    unit="steps", step_sleep="0.05", final_hosts=["127.0.0.1:1", "127.0.0.3:1"],
                    timeouts=(60, 60, 150))
    check_sampled_training(tmp_path, 2, 8, rtol=RTOL)
