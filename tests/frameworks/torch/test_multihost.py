"""Training on two hosts of two ranks each, over ssh (tests/support/cluster_util.py): with the
hierarchical allreduce the model ends where the same job on one host ends, and a host whose
ranks die mid-run ends the job with the failed host and ranks named, without a hang."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import cluster_util
import needs

needs.module("torch")

pytestmark = pytest.mark.timeout(400)

# A small MLP (1.1 MB of gradients per step, so the allreduces are real backend work) trained
# for a few steps on each rank's own data; rank 0 saves the final parameters.  With a third
# argument the ranks of the second host kill themselves at that step.
TRAIN = """
import os, signal, sys
import numpy as np
import torch
import torch.nn.functional as F
import fuse.torch as hvd
from fuse.worker import lifecycle

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
data = torch.Generator().manual_seed(1000 + hvd.rank())
die_at = int(sys.argv[2]) if len(sys.argv) > 2 else -1
for step in range(8):
    if step == die_at and hvd.cross_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    x = torch.randn(64, 32, generator=data)
    y = torch.randint(0, 10, (64,), generator=data)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    print("step", step, flush=True)
print("layout", hvd.local_size(), hvd.cross_size(), "hierarchical",
      lifecycle.engine().stats()["hierarchical"], flush=True)
if hvd.rank() == 0:
    np.save(sys.argv[1], torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy())
"""


def _layout_lines(stdout: bytes) -> list[str]:
    return [line.split(">:", 1)[1] for line in stdout.decode().splitlines()
            if "<stdout>:layout" in line]


def test_two_hosts_of_two_train_like_one_host(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    with cluster_util.cluster(tmp_path, 2) as c:
        a, b = c.addresses
        r = subprocess.run(c.fuserun(1, "-np", "4", "-H", f"{a}:2,{b}:2", "--start-timeout", "60",
                                     "--hierarchical-allreduce", sys.executable, str(script),
                                     str(tmp_path / "two_hosts.npy")),
                           capture_output=True, timeout=300, cwd=tmp_path, env=c.env)
        assert r.returncode == 0, r.stderr.decode()[-4000:]
    layouts = _layout_lines(r.stdout)
    assert len(layouts) == 4 and all(line.startswith("layout 2 2 hierarchical ")
                                     and int(line.split()[-1]) > 0 for line in layouts), layouts
    one = subprocess.run([sys.executable, "-m", "fuse.runner.launch", "-np", "4", sys.executable,
                          str(script), str(tmp_path / "one_host.npy")],
                         capture_output=True, timeout=300, cwd=tmp_path)
    assert one.returncode == 0, one.stderr.decode()[-4000:]
    assert _layout_lines(one.stdout) == ["layout 4 1 hierarchical 0"] * 4
    two, ref = np.load(tmp_path / "two_hosts.npy"), np.load(tmp_path / "one_host.npy")
    assert two.shape == ref.shape == (32 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10,)
    np.testing.assert_allclose(two, ref, rtol=1e-4, atol=1e-6)


def test_a_host_whose_ranks_die_ends_the_job_naming_them(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    with cluster_util.cluster(tmp_path, 2) as c:
        a, b = c.addresses
        r = subprocess.run(c.fuserun(1, "-np", "4", "-H", f"{a}:2,{b}:2", "--start-timeout", "60",
                                     "--hierarchical-allreduce", sys.executable, str(script),
                                     str(tmp_path / "unused.npy"), "3"),
                           capture_output=True, timeout=300, cwd=tmp_path, env=c.env)
    err = r.stderr.decode()
    assert r.returncode != 0, err[-4000:]
    # the launcher blames a rank of the host that died, by rank and host
    assert any(f"rank {k} (host {b}) failed first" in err for k in (2, 3)), err[-4000:]
    assert "step 2" in r.stdout.decode()
