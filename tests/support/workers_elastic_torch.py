"""An elastic PyTorch job: TorchState with a model, a DistributedOptimizer (SGD with momentum,
Sum over ranks) and an ElasticSampler, trained on exact arithmetic (elastic_util).

    workers_elastic_torch.py OUT_DIR EPOCHS [FAULT ...]

The loop, the faults and the result are workers_elastic_sampled's.  This worker adds the fault
``raisefirst:generation:rank:step`` (see fail_before_backward).  With SHARDED=1 in the
environment the optimizer is ``DistributedOptimizer(..., sharded=True)`` and the weight is cut
into pieces (Pieces), so that every rank owns a shard of the momentum: the first piece is too
large for one rank's share, so it is split into blocks (a block per rank, re-cut at each
change of size).
"""

import os
import time

import torch

import fuse.torch as hvd
from elastic_util import DIM, SAMPLES, sampled_data
from workers_elastic_sampled import Job

job = Job()
data = torch.from_numpy(sampled_data())

SHARDED = os.environ.get("SHARDED") == "1"


class Pieces(torch.nn.Module):
    """``x @ w`` for a weight of DIM elements held as parameters of ``LENGTHS`` elements: the
    same arithmetic as a Linear without bias, element by element."""

    LENGTHS = (DIM - 2, 2)

    def __init__(self):
        super().__init__()
        self.pieces = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(n, dtype=torch.float64)) for n in self.LENGTHS)

    def forward(self, x):
        starts = [sum(self.LENGTHS[:k]) for k in range(len(self.LENGTHS))]
        return sum(x[:, a:a + p.numel()] @ p for a, p in zip(starts, self.pieces))

    @property
    def weight(self):
        return torch.cat(list(self.pieces))


hvd.init()
if SHARDED:
    model = Pieces()
else:
    model = torch.nn.Linear(DIM, 1, bias=False).double()
    with torch.no_grad():
        model.weight.zero_()
# sharded: buckets of about 16 bytes (a parameter, or a split one's blocks), each its own
# reduce-scatter
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.125, momentum=0.5),
    named_parameters=model.named_parameters(), op=hvd.Sum,
    **({"sharded": True, "bucket_bytes": 16} if SHARDED else {}))
sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=3)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, log=[])


def fail_before_backward(step: int) -> None:
    """``raisefirst``: rank r raises before its backward pass; the others wait before theirs
    until the engine has seen it go, so that the failure reaches them inside backward(), from
    the DistributedOptimizer's gradient hook (the restored loop must start clean)."""
    ranks = job.faults_now("raisefirst", step)
    if hvd.rank() in ranks:
        raise RuntimeError(f"injected failure before backward at step {step}")
    if ranks:
        time.sleep(3.0)


def step(idx: list, committed: int) -> None:
    optimizer.zero_grad()
    fail_before_backward(committed)
    model(data[idx]).sum().backward()
    job.maybe_fail(hvd.rank(), committed)
    optimizer.step()


job.train(hvd, state, step)
job.write_result(hvd, state, model.weight.detach().numpy().ravel().tolist())
