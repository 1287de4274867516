"""An elastic PyTorch job: TorchState with a model, a DistributedOptimizer (SGD with momentum,
Sum over ranks) and an ElasticSampler, trained on exact arithmetic (elastic_util).

    worker_torch.py OUT_DIR EPOCHS [FAULT ...]

A FAULT is ``kind:generation:rank:step`` (``kill`` or ``raise``, see worker_numpy.py, or
``raisefirst``, see fail_before_backward), where
step counts the job's committed steps.  Every committed step logs the sample indices the whole
job processed in it (allgathered), so the test can rebuild the weights from the log.
"""

import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch

import fuse.torch as hvd
from fuse.worker.state import rendezvous_generation
from elastic_util import DIM

SAMPLES = 60
BATCH = 2          # per rank

out_dir, epochs = sys.argv[1], int(sys.argv[2])
faults = [f.split(":") for f in sys.argv[3:]]
step_sleep = float(os.environ.get("STEP_SLEEP", "0.02"))
data = torch.from_numpy(np.random.default_rng(7).integers(-8, 9, size=(SAMPLES, DIM))
                        .astype(np.float64))

hvd.init()
model = torch.nn.Linear(DIM, 1, bias=False).double()
with torch.no_grad():
    model.weight.zero_()
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.125, momentum=0.5),
    named_parameters=model.named_parameters(), op=hvd.Sum)
sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=3)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, log=[])


def fail_before_backward(step: int) -> None:
    """``raisefirst``: rank r raises before its backward pass; the others wait before theirs
    until the engine has seen it go, so that the failure reaches them inside backward(), from
    the DistributedOptimizer's gradient hook (the restored loop must start clean)."""
    for kind, g, r, at in faults:
        if kind == "raisefirst" and int(g) == rendezvous_generation() and int(at) == step:
            if int(r) == hvd.rank():
                raise RuntimeError(f"injected failure before backward at step {step}")
            time.sleep(3.0)


def maybe_fail(step: int) -> None:
    for kind, g, r, at in faults:
        if kind == "raisefirst":
            continue
        if int(g) == rendezvous_generation() and int(at) == step and int(r) == hvd.rank():
            if kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure at step {step}")


@hvd.elastic.run
def train(state):
    while state.epoch < epochs:
        mine = list(iter(state.sampler))
        for b in range(math.ceil(len(mine) / BATCH)):
            idx = state.sampler.get_indices(b, BATCH)
            optimizer.zero_grad()
            fail_before_backward(len(state.log))
            model(data[idx]).sum().backward()
            maybe_fail(len(state.log))
            optimizer.step()
            everyone = hvd.allgather_object(list(idx), name="indices")
            state.sampler.record_batch(b, BATCH)
            state.log = state.log + [(state.epoch, sorted(i for part in everyone for i in part))]
            time.sleep(step_sleep)
            state.commit()
            if hvd.rank() == 0:
                with open(os.path.join(out_dir, "progress.txt"), "a") as f:
                    f.write(f"{rendezvous_generation()} {hvd.size()} {len(state.log)}\n")
        state.sampler.set_epoch(state.epoch + 1)
        state.epoch += 1
        state.commit()


train(state)
with open(os.path.join(out_dir, f"result.{hvd.rank()}.json"), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "generation": rendezvous_generation(),
               "w": model.weight.detach().numpy().ravel().tolist(), "log": state.log,
               "epoch": state.epoch}, f)
