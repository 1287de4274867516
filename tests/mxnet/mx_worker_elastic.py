"""An elastic MXNet job: MXNetState with a Gluon Dense layer, a DistributedTrainer (SGD with
momentum) and an ElasticSampler; the counterpart of tests/elastic/worker_torch.py.

    mx_worker_elastic.py OUT_DIR EPOCHS [FAULT ...]

A FAULT is ``kind:generation:rank:step`` (``kill``: SIGKILL itself, ``raise``: an exception
out of the training function), where step counts the job's committed steps.  Every committed
step logs the sample indices the whole job processed in it (allgathered), so the test can
rebuild the weights from the log.
"""

import json
import math
import os
import signal
import sys
import time

import mxnet as mx
import numpy as np

import fuse.mxnet as hvd
from fuse.worker.state import rendezvous_generation
from elastic_util import DIM

SAMPLES = 60
BATCH = 2          # per rank

out_dir, epochs = sys.argv[1], int(sys.argv[2])
faults = [f.split(":") for f in sys.argv[3:]]
step_sleep = float(os.environ.get("STEP_SLEEP", "0.02"))
data = mx.nd.array(np.random.default_rng(7).integers(-8, 9, size=(SAMPLES, DIM)),
                   dtype="float64")

hvd.init()
model = mx.gluon.nn.Dense(1, use_bias=False, in_units=DIM, dtype="float64")
model.initialize(mx.init.Zero())
trainer = hvd.DistributedTrainer(model.collect_params(),
                                 mx.optimizer.SGD(learning_rate=0.125, momentum=0.5))
sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=3)
state = hvd.elastic.MXNetState(model, trainer, sampler=sampler, epoch=0, log=[])


def maybe_fail(step: int) -> None:
    for kind, g, r, at in faults:
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
            with mx.autograd.record():
                loss = model(data[mx.nd.array(idx)]).sum()
            loss.backward()
            maybe_fail(len(state.log))
            # the trainer averages over the workers; 1/size undoes the average, so a step
            # applies the sum of every worker's rows whatever the number of workers
            trainer.step(1.0 / hvd.size())
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
               "w": model.weight.data().asnumpy().ravel().tolist(), "log": state.log,
               "epoch": state.epoch}, f)
