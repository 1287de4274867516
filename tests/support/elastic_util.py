"""Helpers for the elastic tests: run ``fuserun`` in elastic mode on hosts that all resolve to
this machine (``localhost``, ``127.0.0.1``, ``127.0.0.2``, ...: distinct hosts to the driver),
with a discovery script whose answer a test changes while the job runs.

Every worker script in this directory trains on exact arithmetic: batch ``b``'s rows are small
integers from a generator seeded by ``b``, each rank sums its share of the rows and the ranks
allreduce the sums (Sum, exact in float64), so the update of a batch does not depend on how
many workers there are.  The final weights are then a function of the sequence of committed
batches only: a batch lost or applied twice changes them, and the test compares them with a
reference computed here, bit for bit, on every worker.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DIM = 8
ROWS = 12


def batch_rows(b: int) -> np.ndarray:
    return np.random.default_rng(1000 + b).integers(-8, 9, size=(ROWS, DIM)).astype(np.float64)


def apply_batch(w: np.ndarray, b: int, grad: np.ndarray | None = None) -> np.ndarray:
    """The update the workers make (momentum-like, so that the order of batches matters)."""
    g = batch_rows(b).sum(axis=0) if grad is None else grad
    return w * 0.5 + g


def reference_weights(batches: int) -> np.ndarray:
    w = np.zeros(DIM)
    for b in range(batches):
        w = apply_batch(w, b)
    return w


def job_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def fuserun(*args: str) -> list[str]:
    return [sys.executable, "-m", "fuse.runner.launch", *args]


def write_discovery(tmp_path: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A discovery script that prints the lines of ``hosts.txt``; returns (script, hosts file)."""
    hosts_file = tmp_path / "hosts.txt"
    set_hosts(hosts_file, hosts)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    script.chmod(0o755)
    return script, hosts_file


def set_hosts(hosts_file: Path, hosts: list[str]) -> None:
    tmp = hosts_file.with_suffix(".tmp")
    tmp.write_text("".join(h + "\n" for h in hosts))
    os.replace(tmp, hosts_file)


def results(out_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out_dir.glob("result.*.json"))]


def progress(out_dir: Path) -> list[tuple[int, int, int]]:
    """(generation, size, committed batches) lines rank 0 appended at each commit."""
    path = out_dir / "progress.txt"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append(tuple(int(x) for x in parts))
    return out


def wait_for(predicate, timeout: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the job ended before {what}:\n{out[-3000:]}\n{err[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"timed out waiting for {what}:\n{out[-3000:]}\n{err[-3000:]}")
        time.sleep(0.1)


def wait_at_gate(out_dir: str, state, committed: int) -> None:
    """The hold a test puts on the job (grow_and_shrink): with OUT_DIR/gate present, a job
    about to start its step number ``committed`` waits while the file allows fewer steps,
    checking for host updates so that it grows or shrinks as it waits; rank 0 notes
    "generation size committed" in OUT_DIR/waiting.  Collective, as the decision to go on is
    rank 0's reading of the file, broadcast: every rank leaves the gate at the same call.
    No gate file: no wait.  Each rank checks on its own whether the file exists, so it must
    exist for the job's whole life or not at all (Gate writes it before the job starts and
    never removes it)."""
    import fuse
    from fuse.job.state import rendezvous_generation
    gate, waiting = Path(out_dir) / "gate", Path(out_dir) / "waiting"
    if not gate.exists():
        return
    while True:
        hold = False
        if fuse.rank() == 0:
            try:
                hold = committed >= int(gate.read_text())
            except FileNotFoundError:
                hold = False
            if hold:
                note = waiting.with_suffix(".tmp")
                note.write_text(f"{rendezvous_generation()} {fuse.size()} {committed}\n")
                os.replace(note, waiting)
        if not fuse.broadcast_object(hold, root_rank=0, name="test.gate"):
            return
        state.check_host_updates()
        time.sleep(0.05)


class Gate:
    """The test's side of wait_at_gate: ``Gate(out_dir, steps)``, made before the job starts,
    lets it make ``steps`` steps; ``held(...)`` waits until the job waits at the gate in a
    given shape, ``allow(n)`` lets it make n more steps, ``limit(steps)`` sets the bound
    outright, ``open()`` lets it finish."""

    def __init__(self, out_dir: Path, steps: int) -> None:
        self.path = Path(out_dir) / "gate"
        self.note = Path(out_dir) / "waiting"
        self.limit(steps)

    def limit(self, steps: int) -> None:
        """Let the job start steps below ``steps`` only."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(str(steps))
        os.replace(tmp, self.path)

    def waiting(self) -> tuple[int, int, int] | None:
        """(generation, size, committed steps) where the job last waited, or None."""
        try:
            return tuple(int(x) for x in self.note.read_text().split())
        except FileNotFoundError:
            return None

    def held(self, proc: subprocess.Popen, timeout: float, what: str, *, size: int,
             after_generation: int = -1, committed: int = 0) -> tuple[int, int, int]:
        """Wait until the job waits at the gate with ``size`` workers, in a generation after
        ``after_generation``, having committed at least ``committed`` steps."""
        def there():
            w = self.waiting()
            return (w is not None and w[1] == size and w[0] > after_generation
                    and w[2] >= committed)
        wait_for(there, timeout, proc, what)
        return self.waiting()

    def allow(self, more: int) -> int:
        """Let the job, held at the gate, make ``more`` steps; returns the step it will wait
        before next."""
        until = self.waiting()[2] + more
        self.limit(until)
        return until

    def open(self) -> None:
        """Let the job make every step (the file stays: see wait_at_gate)."""
        self.limit(2 ** 62)


def grow_and_shrink(out_dir: Path, worker: list[str], *, steps: int, unit: str,
                    step_sleep: str, final_hosts: list[str],
                    timeouts: tuple[float, float, float], env: dict | None = None) -> None:
    """Run ``worker`` (its argv; it calls wait_at_gate before each step) elastically under a
    discovery script that lists 2 hosts, then 4, then ``final_hosts``: ``steps`` steps on 2
    workers, then ``steps`` steps on 4, then the rest of the job on the final hosts.  The gate
    holds the job at each change until it has re-formed, so that no phase depends on how fast
    workers start; timeouts: (the first wait, each later wait, the job's end).  Asserts the
    job succeeded and its size went 2 -> 4 -> 2.  ``env``: more environment for the workers."""
    script, hosts_file = write_discovery(out_dir, ["localhost:1", "127.0.0.1:1"])
    gate = Gate(out_dir, steps)
    argv = fuserun("-np", "2", "--min-np", "2", "--max-np", "4", "--host-discovery-script",
                   str(script), *worker)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env({"STEP_SLEEP": step_sleep, **(env or {})}),
                            cwd=str(out_dir))
    try:
        gate.held(proc, timeouts[0], f"{steps} {unit} on 2 workers", size=2)
        set_hosts(hosts_file, ["localhost:1", "127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1"])
        grown, _size, _n = gate.held(proc, timeouts[1], "the job to grow to 4 workers", size=4)
        until = gate.allow(steps)
        gate.held(proc, timeouts[1], f"{steps} {unit} on 4 workers", size=4, committed=until)
        set_hosts(hosts_file, final_hosts)
        gate.held(proc, timeouts[1], f"the job to shrink to {len(final_hosts)} workers",
                  size=len(final_hosts), after_generation=grown)
        gate.open()
        out, err = proc.communicate(timeout=timeouts[2])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    sizes = []
    for _g, s, _n in progress(out_dir):
        if not sizes or sizes[-1] != s:
            sizes.append(s)
    assert sizes == [2, 4, 2], sizes


def check_training(out_dir: Path, batches: int, expect_workers: int) -> list[dict]:
    """Every worker of the last generation committed batches 0..batches-1 once each, in order,
    and holds the reference weights bit for bit."""
    res = results(out_dir)
    assert len(res) == expect_workers, f"{len(res)} workers finished, expected " \
                                       f"{expect_workers}: {res}"
    want = reference_weights(batches)
    for r in res:
        assert r["done"] == list(range(batches)), \
            f"rank {r['rank']} committed batches {r['done']}"
        assert np.array_equal(np.array(r["w"]), want), \
            f"rank {r['rank']}: weights {r['w']} differ from the reference {want.tolist()}"
    assert sorted(r["rank"] for r in res) == list(range(expect_workers))
    assert len({r["generation"] for r in res}) == 1
    return res


# The sampled workers (workers_elastic_sampled.py's loop in workers_elastic_torch.py and
# workers_mx_elastic.py): SAMPLES rows, an ElasticSampler over them, SGD with
# momentum 0.5 and learning rate 0.125 on the sum of the rows every committed step processed.
SAMPLES = 60


def sampled_data() -> np.ndarray:
    return np.random.default_rng(7).integers(-8, 9, size=(SAMPLES, DIM)).astype(np.float64)


def _rebuild_sampled(log) -> np.ndarray:
    data = sampled_data()
    w = np.zeros(DIM)
    buf = None
    for _epoch, idx in log:
        g = data[idx].sum(axis=0)
        buf = g.copy() if buf is None else buf * 0.5 + g
        w = w - 0.125 * buf
    return w


def check_sampled_training(out_dir: Path, expect_workers: int, epochs: int,
                           rtol: float = 0.0) -> list[dict]:
    """Every worker of the last generation holds the weights rebuilt from the (shared) log of
    committed steps (bit for bit when ``rtol`` is 0); every epoch saw every sample, repeating
    only the few that pad the last round after a re-partition, never one a committed step had
    processed."""
    res = results(out_dir)
    assert len(res) == expect_workers, res
    logs = {json.dumps(r["log"]) for r in res}
    assert len(logs) == 1, "the workers' logs of committed steps differ"
    log = res[0]["log"]
    want = _rebuild_sampled(log)
    for r in res:
        got = np.array(r["w"])
        same = np.array_equal(got, want) if rtol == 0 else np.allclose(got, want, rtol=rtol,
                                                                         atol=0)
        assert same, (r["rank"], r["w"], want.tolist())
        assert r["epoch"] == epochs
    for epoch in range(epochs):
        counts = collections.Counter(i for e, idx in log if e == epoch for i in idx)
        assert set(counts) == set(range(SAMPLES)), f"epoch {epoch} skipped samples"
        repeats = sum(c - 1 for c in counts.values())
        # the padding of the last round: fewer than one batch per rank per re-partition
        assert repeats <= 8, f"epoch {epoch} repeated {repeats} samples: {counts}"
    return res
