"""An elastic PyTorch training function for the Ray and Spark integrations (the function form
of tests/support/workers_elastic_torch.py): TorchState with a model, a DistributedOptimizer (SGD with
momentum, Sum over ranks) and an ElasticSampler, on small integers so that every sum is exact.

Every committed step logs the sample indices the whole job processed in it (allgathered), so
:func:`check` can rebuild the weights from the log and compare them, bit for bit, with every
worker's.  A fault ``("kill", generation, rank, step)`` SIGKILLs that rank's process at that
committed step (``"killparent"``: the process that started it); rank 0 appends
``generation size steps time`` to ``progress.txt`` at each commit.
"""

from __future__ import annotations

import collections
import json
import math
import os
import signal
import time

import numpy as np

SAMPLES = 60
BATCH = 2          # per rank
DIM = 8


def _data() -> np.ndarray:
    return np.random.default_rng(7).integers(-8, 9, size=(SAMPLES, DIM)).astype(np.float64)


def train(out_dir: str, epochs: int, faults=(), step_sleep: float = 0.02) -> dict:
    import torch

    import fuse.torch as hvd
    from fuse.worker.state import rendezvous_generation

    hvd.init()
    data = torch.from_numpy(_data())
    model = torch.nn.Linear(DIM, 1, bias=False).double()
    with torch.no_grad():
        model.weight.zero_()
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.125, momentum=0.5),
        named_parameters=model.named_parameters(), op=hvd.Sum)
    sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, log=[])

    def maybe_fail(step: int) -> None:
        for kind, g, r, at in faults:
            if (g, r, at) == (rendezvous_generation(), hvd.rank(), step):
                # "killparent": the process that started this one (a Spark task's worker)
                os.kill(os.getppid() if kind == "killparent" else os.getpid(), signal.SIGKILL)

    @hvd.elastic.run
    def loop(state):
        while state.epoch < epochs:
            mine = list(iter(state.sampler))
            for b in range(math.ceil(len(mine) / BATCH)):
                idx = state.sampler.get_indices(b, BATCH)
                optimizer.zero_grad()
                model(data[idx]).sum().backward()
                maybe_fail(len(state.log))
                optimizer.step()
                everyone = hvd.allgather_object(list(idx), name="indices")
                state.sampler.record_batch(b, BATCH)
                state.log = state.log + [(state.epoch,
                                          sorted(i for part in everyone for i in part))]
                time.sleep(step_sleep)
                state.commit()
                if hvd.rank() == 0:
                    with open(os.path.join(out_dir, "progress.txt"), "a") as f:
                        f.write(f"{rendezvous_generation()} {hvd.size()} {len(state.log)} "
                                f"{time.time()!r}\n")
            state.sampler.set_epoch(state.epoch + 1)
            state.epoch += 1
            state.commit()

    loop(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "generation": rendezvous_generation(),
            "w": model.weight.detach().numpy().ravel().tolist(), "log": state.log,
            "epoch": state.epoch}


def progress(out_dir: str) -> list[tuple[int, int, int, float]]:
    """Rank 0's commits so far: (generation, size, committed steps, time)."""
    try:
        with open(os.path.join(out_dir, "progress.txt")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4:
            out.append((int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])))
    return out


def wait_for(out_dir: str, what, timeout: float, describe: str) -> None:
    """Wait until ``what(progress)`` holds (the job is running in another thread)."""
    deadline = time.monotonic() + timeout
    while not what(progress(out_dir)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{describe} did not happen within {timeout:g} s; progress: "
                                 f"{progress(out_dir)[-5:]}")
        time.sleep(0.1)


def rebuild(log) -> np.ndarray:
    """The weights SGD with momentum makes from the committed steps' samples."""
    data = _data()
    w = np.zeros(DIM)
    buf = None
    for _epoch, idx in log:
        g = data[idx].sum(axis=0)
        buf = g.copy() if buf is None else buf * 0.5 + g
        w = w - 0.125 * buf
    return w


def check(results: list[dict], expect_workers: int, epochs: int) -> None:
    """Every worker of the last generation holds the weights its log of committed steps makes,
    and every epoch saw every sample, repeating only the few that pad a re-partition."""
    assert len(results) == expect_workers, [(r["rank"], r["size"]) for r in results]
    assert [r["rank"] for r in results] == list(range(expect_workers))
    logs = {json.dumps(r["log"]) for r in results}
    assert len(logs) == 1, "the workers' logs of committed steps differ"
    log = results[0]["log"]
    want = rebuild(log)
    for r in results:
        assert np.array_equal(np.array(r["w"]), want), (r["rank"], r["w"], want.tolist())
        assert r["epoch"] == epochs
    for epoch in range(epochs):
        counts = collections.Counter(i for e, idx in log if e == epoch for i in idx)
        assert set(counts) == set(range(SAMPLES)), f"epoch {epoch} skipped samples"
        repeats = sum(c - 1 for c in counts.values())
        assert repeats <= 8, f"epoch {epoch} repeated {repeats} samples: {counts}"
