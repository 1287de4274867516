"""The elastic PyTorch job the soak runs under faults (soak_util; bench/studies/soak.py and
tests/runner/elastic/test_elastic_soak.py).

    workers_elastic_soak.py OUT_DIR

A Linear(DIM, 1) without bias trained on exact arithmetic (elastic_util.batch_rows: each rank
takes its share of batch b's rows, the DistributedOptimizer sums the gradients over the ranks;
SGD with momentum 0.5, learning rate 0.125), so the weights after the job are a function of the
sequence of committed batches alone: soak_util.replay computes them in one process, bit for
bit.  Beside it the model holds ``PAD_ELEMS`` (default 128 Ki float64, 1 MiB) zeros whose
gradient is zero: they make each step's allreduce large enough to travel between the workers
(a small one goes through the coordinator, and a cut between two workers would not touch it).

The job runs until OUT_DIR/stop exists: rank 0 looks for it before each step and the ranks
agree on it through an allreduce, so they all leave the loop after the same committed batch.
Each worker writes OUT_DIR/workers/<pid> once it has joined the job (JSON: its host, when its
process started, when it had joined, the generation it joined), rank 0
appends ``time generation size batches`` to OUT_DIR/commits.txt after each commit, and every
worker of the last generation writes OUT_DIR/result.<rank>.json.
"""

import json
import os
import sys
import time

started = time.time()       # before the imports: a join's time includes them

import torch  # noqa: E402

import fuse.torch as hvd  # noqa: E402
from elastic_util import DIM, batch_rows
from fuse.job.state import config, rendezvous_generation  # noqa: E402

out_dir = sys.argv[1]
step_sleep = float(os.environ.get("STEP_SLEEP", "0.05"))
pad_elems = int(os.environ.get("PAD_ELEMS", str(128 * 1024)))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(DIM, 1, bias=False).double()
        self.pad = torch.nn.Parameter(torch.zeros(pad_elems, dtype=torch.float64))
        with torch.no_grad():
            self.linear.weight.zero_()

    def forward(self, x):
        # the padding takes part with a zero gradient: it is carried, never changed
        return self.linear(x).sum() + (self.pad * 0.0).sum()


hvd.init()
os.makedirs(os.path.join(out_dir, "workers"), exist_ok=True)
with open(os.path.join(out_dir, "workers", str(os.getpid())), "w") as f:
    json.dump({"host": config().hostname, "started": started, "initialized": time.time(),
               "generation": rendezvous_generation()}, f)

model = Model()
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.125, momentum=0.5),
    named_parameters=model.named_parameters(), op=hvd.Sum)
state = hvd.elastic.TorchState(model, optimizer, batch=0, done=[])
stop_file = os.path.join(out_dir, "stop")


def stop_now() -> bool:
    """Whether every rank leaves the loop after this step (rank 0 decides, everyone agrees)."""
    mine = 1.0 if hvd.rank() == 0 and os.path.exists(stop_file) else 0.0
    return bool(hvd.allreduce(torch.tensor([mine]), op=hvd.Sum, name="stop").item())


@hvd.elastic.run
def train(state):
    while True:
        b = state.batch
        stop = stop_now()
        optimizer.zero_grad()
        rows = torch.from_numpy(batch_rows(b)[hvd.rank()::hvd.size()])
        model(rows).backward()
        optimizer.step()
        state.done = state.done + [b]
        state.batch = b + 1
        time.sleep(step_sleep)
        state.commit()
        if hvd.rank() == 0:
            with open(os.path.join(out_dir, "commits.txt"), "a") as f:
                f.write(f"{time.time()!r} {rendezvous_generation()} {hvd.size()} {state.batch}\n")
        if stop:
            return


train(state)
with open(os.path.join(out_dir, f"result.{hvd.rank()}.json"), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "batch": state.batch, "done": state.done,
               "w": model.linear.weight.detach().numpy().ravel().tolist(),
               "generation": rendezvous_generation()}, f)
