"""An elastic PyTorch job whose DistributedOptimizer compresses with PowerSGD: one worker fails
after compressed steps, the others re-form and go on.

    workers_elastic_powersgd.py OUT_DIR FAIL_RANK FAIL_STEP

Each worker logs, after every step and every commit (every 3 steps), a digest of its PowerSGD
state (the iteration, each Q, each of its errors) and, first thing in every generation, the
digest it starts from, so the test can check that the survivors restart from what they
committed, not from where they were.
"""

import json
import os
import sys

import numpy as np
import torch

import fuse.torch as hvd
from fuse.worker.state import rendezvous_generation

STEPS = 16
COMMIT_EVERY = 3
out_dir, fail_rank, fail_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
psgd = hvd.Compression.powersgd(rank=2, start_iter=2)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(),
                                     compression=psgd)
state = hvd.elastic.TorchState(model, optimizer, step=0)
records = []


def digest() -> dict:
    return {"iteration": psgd.iteration,
            "q": {k: float(np.abs(v).sum()) for k, v in sorted(psgd.qs.items())},
            "error": {k: float(np.abs(v).sum()) for k, v in sorted(psgd.errors.items())}}


@hvd.elastic.run
def train(state):
    records.append({"event": "start", "generation": rendezvous_generation(),
                    "size": hvd.size(), "step": state.step, "digest": digest()})
    while state.step < STEPS:
        g = torch.Generator().manual_seed(100 * state.step + hvd.rank())
        x = torch.randn(8, 24, generator=g)
        optimizer.zero_grad()
        model(x).pow(2).sum().backward()
        optimizer.step()
        if (rendezvous_generation() == 0 and hvd.rank() == fail_rank
                and state.step == fail_step):
            raise RuntimeError(f"injected failure after step {state.step}")
        state.step += 1
        records.append({"event": "step", "generation": rendezvous_generation(),
                        "step": state.step, "digest": digest()})
        if state.step % COMMIT_EVERY == 0:     # steps past a commit are lost in a failure
            state.commit()
            records.append({"event": "commit", "generation": rendezvous_generation(),
                            "step": state.step, "digest": digest()})


train(state)
qs = hvd.allgather_object({k: v.tolist() for k, v in psgd.qs.items()}, name="final_qs")
with open(os.path.join(out_dir, f"result.{os.getpid()}.json"), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "records": records,
               "qs_equal": all(q == qs[0] for q in qs), "iteration": psgd.iteration}, f)
