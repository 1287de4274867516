"""The image's example: a small elastic PyTorch job (the chart's default command).

    fuserun ... python /opt/fuse/examples/torch_elastic.py

Trains a linear model with a DistributedOptimizer (SGD with momentum, Sum over the ranks) under
``hvd.elastic.run`` for ``STEPS`` steps (default 200), committing after each.  Step ``s``'s batch
is ``ROWS`` rows of small integers drawn from a generator seeded by ``s``; each rank takes every
size-th row, so the summed gradient does not depend on how many workers there are, and the final
weights (exact in float64) are a function of the sequence of committed steps only: a step lost
or applied twice changes them.  Rank 0 prints ``COMMIT <step> <size>`` at each commit and every
rank prints ``RESULT <json>`` at the end; with ``OUT_DIR`` set (a shared volume), rank 0 also
appends ``<time> <step> <size>`` to ``OUT_DIR/commits.txt`` and each rank writes
``OUT_DIR/result.<rank>.json`` (what the container test reads).
"""

import json
import os
import time

import numpy as np
import torch

import fuse.torch as hvd

DIM, ROWS = 8, 12
STEPS = int(os.environ.get("STEPS", "200"))
STEP_SLEEP = float(os.environ.get("STEP_SLEEP", "0.05"))
OUT_DIR = os.environ.get("OUT_DIR", "")


def batch(step: int) -> torch.Tensor:
    rows = np.random.default_rng(1000 + step).integers(-8, 9, size=(ROWS, DIM))
    return torch.from_numpy(rows.astype(np.float64))


def make_model():
    model = torch.nn.Linear(DIM, 1, bias=False).double()
    with torch.no_grad():
        model.weight.zero_()
    return model


def reference(steps: int) -> list:
    """The weights one process gets by applying steps 0..steps-1 once each, in order."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.125, momentum=0.5)
    for s in range(steps):
        opt.zero_grad()
        model(batch(s)).sum().backward()
        opt.step()
    return model.weight.detach().flatten().tolist()


def main() -> None:
    hvd.init()
    model = make_model()
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.125, momentum=0.5),
        named_parameters=model.named_parameters(), op=hvd.Sum)
    state = hvd.elastic.TorchState(model, optimizer, step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            rows = batch(state.step)[hvd.rank()::hvd.size()]
            optimizer.zero_grad()
            model(rows).sum().backward()
            optimizer.step()
            state.step += 1
            state.commit()
            if hvd.rank() == 0:
                print(f"COMMIT {state.step} {hvd.size()}", flush=True)
                if OUT_DIR:
                    with open(os.path.join(OUT_DIR, "commits.txt"), "a") as f:
                        f.write(f"{time.time():.3f} {state.step} {hvd.size()}\n")
            time.sleep(STEP_SLEEP)

    train(state)
    result = json.dumps({"rank": hvd.rank(), "size": hvd.size(), "steps": state.step,
                         "w": model.weight.detach().flatten().tolist()})
    print("RESULT " + result, flush=True)
    if OUT_DIR:
        with open(os.path.join(OUT_DIR, f"result.{hvd.rank()}.json"), "w") as f:
            f.write(result)


if __name__ == "__main__":
    main()
