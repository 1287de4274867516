"""An elastic training job on the NumPy API (see elastic_util for the arithmetic).

    workers_elastic_numpy.py OUT_DIR BATCHES [FAULT ...]

A FAULT is ``kind:generation:rank:batch``: in that generation, from that batch on, the worker
with that rank ``kill``s itself (SIGKILL) or ``raise``s before the batch's allreduce, or
``killin``: dies with its allreduce of the batch in flight; ``killreset`` (batch ignored): dies
as soon as that generation formed, while the others sync; ``stop``: stops itself (SIGSTOP)
before the batch's allreduce, alive but silent (once: woken up, it goes on); ``stopjoin``
(batch ignored): stops itself as it re-forms out of that generation, before it says it is
ready for the next one (silent at the rendezvous); ``killguard``: SIGKILLs its parent, the
guard process the launcher started it under (its pid in OUT_DIR/ghost.pid), and if it is
still alive 0.2 s after the guard is gone, writes OUT_DIR/ghost.survived and trains on.
``all`` as rank: every worker.

``SLOW_HOST=<host>`` (with ``SLOW_SECONDS``, default 0.1) makes the worker on that host a
straggler: it sleeps that much longer than the others before each batch's allreduce.
``PAUSE_AT=<batch>:<seconds>``: every worker pauses that long once, before that batch (a
checkpoint or an evaluation every rank does).  ``GRAD_BYTES=<n>``: the gradient's allreduce
carries n bytes (zeros after the DIM values), so that it goes through the backend's
connections between workers rather than through the coordinator as a small one does.
``HOLD_ADDED=1``: a worker the driver added to the running job (its incarnation, the
generation it was started for, is not 0) writes OUT_DIR/held.<pid> and waits before
``fuse.init()`` until OUT_DIR/release exists: a start-up as slow as the test wants.
"""

import json
import os
import signal
import sys
import time

import numpy as np

import fuse
import fuse.elastic
from fuse.job.state import config, rendezvous_generation
from elastic_util import DIM, apply_batch, batch_rows, wait_at_gate

out_dir, batches = sys.argv[1], int(sys.argv[2])
faults = [f.split(":") for f in sys.argv[3:]]
step_sleep = float(os.environ.get("STEP_SLEEP", "0.03"))
slow_host = os.environ.get("SLOW_HOST")
slow_seconds = float(os.environ.get("SLOW_SECONDS", "0.1"))
pause_at, pause_seconds = (float(x) for x in os.environ.get("PAUSE_AT", "-1:0").split(":"))
grad_len = max(DIM, int(os.environ.get("GRAD_BYTES", "0")) // 8)

if os.environ.get("HOLD_ADDED") == "1" and \
        os.environ.get("FUSE_ELASTIC_INCARNATION", "0") != "0":
    open(os.path.join(out_dir, f"held.{os.getpid()}"), "w").close()
    while not os.path.exists(os.path.join(out_dir, "release")):
        time.sleep(0.05)


stopped_once = []


def stop_here() -> None:
    """SIGSTOP this process, once: woken up (SIGCONT), it goes on as it would have."""
    if stopped_once:
        return
    stopped_once.append(True)
    with open(os.path.join(out_dir, "stopped.pid"), "w") as f:
        f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)


if any(f[0] == "stopjoin" for f in faults):
    from fuse.worker import elastic_rendezvous
    _join = elastic_rendezvous.join

    def _join_or_stop(config, after, *args, **kwargs):
        if any(kind == "stopjoin" and int(g) == after and int(r) == config.rank
               for kind, g, r, _at in faults):
            stop_here()
        return _join(config, after, *args, **kwargs)

    elastic_rendezvous.join = _join_or_stop

fuse.init()
state = fuse.elastic.ObjectState(batch=0, w=np.zeros(DIM), done=[])


def maybe_fail(b: int, partial: np.ndarray) -> None:
    gen = rendezvous_generation()
    for kind, g, r, at in faults:
        if int(g) == gen and b >= int(at) and (r == "all" or int(r) == fuse.rank()):
            if kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "stop":
                stop_here()
            if kind == "killguard" and not os.path.exists(os.path.join(out_dir, "ghost.pid")):
                guard = os.getppid()
                with open(os.path.join(out_dir, "ghost.pid"), "w") as f:
                    f.write(str(os.getpid()))
                os.kill(guard, signal.SIGKILL)
                while os.getppid() == guard:      # until the guard is gone
                    time.sleep(0.01)
                time.sleep(0.2)
                with open(os.path.join(out_dir, "ghost.survived"), "w") as f:
                    f.write(str(os.getpid()))
            if kind == "raise":
                raise RuntimeError(f"injected failure at batch {b}")
            if kind == "killin":
                fuse.allreduce_async(partial, name="grad", op=fuse.Sum)
                os.kill(os.getpid(), signal.SIGKILL)


def on_reset():
    # "killreset:G:R:0": the worker that has rank R in generation G dies as soon as that
    # generation has formed, while the others start syncing the state
    for kind, g, r, _at in faults:
        if kind == "killreset" and int(g) == rendezvous_generation() and int(r) == fuse.rank():
            os.kill(os.getpid(), signal.SIGKILL)


state.register_reset_callbacks([on_reset])


@fuse.elastic.run
def train(state):
    while state.batch < batches:
        b = state.batch
        wait_at_gate(out_dir, state, b)
        rows = batch_rows(b)[fuse.rank()::fuse.size()]
        maybe_fail(b, rows.sum(axis=0))
        if slow_host and config().hostname == slow_host:
            time.sleep(slow_seconds)
        if b == pause_at:
            time.sleep(pause_seconds)
        padded = np.zeros(grad_len)
        padded[:DIM] = rows.sum(axis=0)
        grad = fuse.allreduce(padded, op=fuse.Sum, name="grad")[:DIM]
        state.w = apply_batch(state.w, b, grad)
        state.done = state.done + [b]
        state.batch = b + 1
        time.sleep(step_sleep)
        state.commit()
        if fuse.rank() == 0:
            with open(os.path.join(out_dir, "progress.txt"), "a") as f:
                f.write(f"{rendezvous_generation()} {fuse.size()} {state.batch}\n")


train(state)
with open(os.path.join(out_dir, f"result.{fuse.rank()}.json"), "w") as f:
    json.dump({"rank": fuse.rank(), "size": fuse.size(), "w": state.w.tolist(),
               "done": state.done, "generation": rendezvous_generation(),
               "stragglers": fuse.straggler_report()}, f)
