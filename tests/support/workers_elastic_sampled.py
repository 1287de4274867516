"""The loop the sampled elastic workers share (workers_elastic_torch.py, workers_mx_elastic.py):
the command line, the injected faults, the epochs over an ElasticSampler, the log of committed
steps and the result file.  Each worker brings only its framework's model, state and step.

    WORKER OUT_DIR EPOCHS [FAULT ...]

A FAULT is ``kind:generation:rank:step``, where step counts the job's committed steps:
``kill`` SIGKILLs that rank, ``raise`` raises out of the training function after its backward
pass, and a worker may handle other kinds itself before (see workers_elastic_torch.py's ``raisefirst``).
Every committed step logs the sample indices the whole job processed in it (allgathered), so
elastic_util.check_sampled_training can rebuild the weights from the log.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from typing import Callable

from fuse.job.state import rendezvous_generation
from elastic_util import wait_at_gate

BATCH = 2          # per rank


class Job:
    """What the command line asked for: where to write, how many epochs, which faults."""

    def __init__(self, argv: list[str] | None = None) -> None:
        argv = sys.argv[1:] if argv is None else argv
        self.out_dir, self.epochs = argv[0], int(argv[1])
        self.faults = [f.split(":") for f in argv[2:]]
        self.step_sleep = float(os.environ.get("STEP_SLEEP", "0.02"))

    def faults_now(self, kind: str, step: int) -> list[int]:
        """The ranks a fault of ``kind`` names at this committed step of this generation."""
        return [int(r) for k, g, r, at in self.faults
                if k == kind and int(g) == rendezvous_generation() and int(at) == step]

    def maybe_fail(self, rank: int, step: int) -> None:
        """A ``kill`` or ``raise`` fault of this rank at this step."""
        if rank in self.faults_now("kill", step):
            os.kill(os.getpid(), signal.SIGKILL)
        if rank in self.faults_now("raise", step):
            raise RuntimeError(f"injected failure at step {step}")

    def train(self, hvd, state, step: Callable[[list, int], None]) -> None:
        """Run the elastic loop: ``step(indices, committed_steps)`` trains one batch of this
        rank's samples (and calls maybe_fail where its framework's backward pass ends)."""

        @hvd.elastic.run
        def loop(state):
            while state.epoch < self.epochs:
                mine = list(iter(state.sampler))
                for b in range(math.ceil(len(mine) / BATCH)):
                    wait_at_gate(self.out_dir, state, len(state.log))
                    idx = state.sampler.get_indices(b, BATCH)
                    step(idx, len(state.log))
                    everyone = hvd.allgather_object(list(idx), name="indices")
                    state.sampler.record_batch(b, BATCH)
                    state.log = state.log + [
                        (state.epoch, sorted(i for part in everyone for i in part))]
                    time.sleep(self.step_sleep)
                    state.commit()
                    if hvd.rank() == 0:
                        with open(os.path.join(self.out_dir, "progress.txt"), "a") as f:
                            f.write(f"{rendezvous_generation()} {hvd.size()} {len(state.log)}\n")
                state.sampler.set_epoch(state.epoch + 1)
                state.epoch += 1
                state.commit()

        loop(state)

    def write_result(self, hvd, state, weights: list[float]) -> None:
        with open(os.path.join(self.out_dir, f"result.{hvd.rank()}.json"), "w") as f:
            json.dump({"rank": hvd.rank(), "size": hvd.size(),
                       "generation": rendezvous_generation(), "w": weights, "log": state.log,
                       "epoch": state.epoch}, f)
