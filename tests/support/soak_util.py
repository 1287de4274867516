"""An elastic fuse.torch job on network-namespace hosts (cluster_util) under injected faults,
and the checks that nothing it committed was lost: the machinery of the soak
(bench/studies/soak.py, random faults for minutes) and of its short CI version
(tests/runner/elastic/test_elastic_soak.py, faults at fixed steps).

The job (workers_elastic_soak.py) runs ``fuserun`` on host 1 with a discovery script that
lists every host, one slot each; host 1 is the launcher's, so only the other hosts are cut off,
cut from each other, made lossy or taken out of discovery.  A fault is injected, held (the
caller says how: for seconds, or until the job has made more commits), and lifted; its record
keeps the wall-clock times, so that its recovery can be read off the commit log afterwards.

Faults (``KINDS``):

* ``kill_worker``: SIGKILL of the worker on a host;
* ``kill_guard``: SIGKILL of that worker's parent (the launcher's orphan guard on host 1, the
  ssh session's shell elsewhere); the worker must die with it, not train on as a ghost;
* ``stop_worker``: SIGSTOP of the worker, SIGCONT when the hold ends;
* ``cut_host``: every packet to and from a host dropped (iptables) for the hold;
* ``cut_pair``: two worker hosts cannot reach each other (both still reach host 1);
* ``packet_loss``: 5 % of the packets a host sends and of those it receives dropped for the
  hold;
* ``discovery``: a host taken out of the discovery script's answer, and put back when the hold
  ends.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from elastic_util import DIM, HERE, batch_rows, job_env

KINDS = ("kill_worker", "kill_guard", "stop_worker", "cut_host", "cut_pair", "packet_loss",
         "discovery")
WORKER = str(HERE / "workers_elastic_soak.py")


@dataclasses.dataclass
class Commit:
    time: float          # wall clock (time.time) when rank 0 had committed
    generation: int
    size: int
    batches: int         # committed batches after it


@dataclasses.dataclass
class Fault:
    kind: str
    hosts: list[int]             # 1-based host numbers it hit
    started: float               # wall clock when injected
    lifted: float | None = None  # ... when lifted (None: nothing to lift)
    generation: int = -1         # generation of the last commit before it
    size: int = 0                # ... and that commit's job size
    recovery_s: float | None = None   # from injection to the first commit after it (below)
    reformed: bool = False       # whether that commit is of a generation formed after it
    rejoin_s: float | None = None     # discovery: from putting the host back to a bigger job
    longest_gap_s: float | None = None  # the longest time without a commit while it lasted

    def describe(self) -> str:
        where = " and ".join(f"host {h}" for h in self.hosts)
        return f"{self.kind} on {where}"


class SoakJob:
    """The job on ``cluster`` (a cluster_util.Cluster of 4 or more hosts) writing to
    ``out_dir``; ``cooldown``: the blacklist cool-down range a host that failed sits out.
    The launcher's stderr goes to ``out_dir``/launcher.err, each line after the wall-clock
    time it came (``verbose``: with fuserun's --verbose lines)."""

    def __init__(self, cluster, out_dir: Path, cooldown: tuple[int, int],
                 env: dict | None = None, verbose: bool = False):
        self.c = cluster
        self.verbose = verbose
        self.out = Path(out_dir)
        self.cooldown = cooldown
        self.env = env or {}
        self.hosts_file = self.out / "hosts.txt"
        self.listed = list(range(1, len(cluster.addresses) + 1))
        self.proc: subprocess.Popen | None = None
        self.faults: list[Fault] = []

    # -- the job ---------------------------------------------------------------------------
    def start(self, np: int | None = None) -> None:
        """Start the job on ``np`` workers (default: as many as there are hosts)."""
        self.out.mkdir(parents=True, exist_ok=True)
        self._write_hosts()
        script = self.out / "discover.sh"
        script.write_text(f"#!/bin/sh\ncat {self.hosts_file}\n")
        script.chmod(0o755)
        n = len(self.c.addresses)
        argv = self.c.fuserun(
            1, "-np", str(np or n), "--min-np", "2", "--max-np", str(n),
            "--host-discovery-script", str(script), "--start-timeout", "30",
            "--blacklist-cooldown-range", str(self.cooldown[0]), str(self.cooldown[1]),
            sys.executable, WORKER, str(self.out))
        env = dict(job_env(self.env), **self.c.env)
        if self.verbose:
            argv.insert(argv.index("-np"), "--verbose")
        self._stdout = open(self.out / "launcher.out", "w")
        self.proc = subprocess.Popen(argv, stdout=self._stdout, stderr=subprocess.PIPE,
                                     env=env, cwd=str(self.out))
        self._stamper = threading.Thread(target=_stamp_lines,
                                         args=(self.proc.stderr, self.out / "launcher.err"),
                                         daemon=True)
        self._stamper.start()

    def stop(self, timeout: float) -> int:
        """Ask the workers to finish after their next step; returns the launcher's exit code."""
        (self.out / "stop").write_text("")
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._stdout.close()
            self._stamper.join(timeout=30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def launcher_err(self) -> str:
        path = self.out / "launcher.err"
        return path.read_text(errors="replace") if path.exists() else ""

    def commits(self) -> list[Commit]:
        path = self.out / "commits.txt"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                out.append(Commit(float(parts[0]), int(parts[1]), int(parts[2]),
                                  int(parts[3])))
        return out

    def wait_until(self, predicate, timeout: float, what: str) -> None:
        """Poll ``predicate(commits)`` until true; fails naming ``what`` on timeout or when the
        launcher has ended."""
        deadline = time.monotonic() + timeout
        while not predicate(self.commits()):
            if self.proc.poll() is not None:
                raise AssertionError(f"the job ended (code {self.proc.returncode}) before "
                                     f"{what}:\n{self.launcher_err()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out ({timeout:g} s) waiting for {what}:\n"
                                     f"{self.launcher_err()[-3000:]}")
            time.sleep(0.1)

    def wait_commits(self, more: int, timeout: float, size: int | None = None) -> None:
        """Wait for ``more`` commits after now (of a job of ``size`` workers, if given)."""
        base = len(self.commits())
        self.wait_until(lambda cs: sum(size is None or c.size == size
                                       for c in cs[base:]) >= more,
                        timeout, f"{more} more commits" + (f" at size {size}" if size else ""))

    # -- processes -------------------------------------------------------------------------
    def _ns(self, host: int) -> str:
        return f"{self.c.env['CLUSTER_NAME']}{host}"

    def worker_pid(self, host: int) -> int | None:
        """The live worker process on ``host``, if any."""
        out = subprocess.run(["ip", "netns", "pids", self._ns(host)], capture_output=True,
                             text=True, timeout=30).stdout.split()
        registered = {p.name for p in (self.out / "workers").glob("*")} \
            if (self.out / "workers").exists() else set()
        live = [int(p) for p in out if p in registered and _alive(int(p))]
        return max(live) if live else None       # the newest, were a leaving one still there

    def hosts_with_workers(self) -> list[int]:
        return [h for h in range(1, len(self.c.addresses) + 1) if self.worker_pid(h)]

    def leftover_workers(self) -> list[int]:
        """Worker processes still alive (after the job: none may be)."""
        pids = [int(p.name) for p in (self.out / "workers").glob("*")]
        return [p for p in pids if _alive(p)]

    # -- faults ----------------------------------------------------------------------------
    def inject(self, kind: str, hosts: list[int], hold) -> Fault:
        """Inject ``kind`` on ``hosts``, call ``hold()``, lift it; returns its record."""
        last = self.commits()[-1:]
        fault = Fault(kind, list(hosts), time.time(),
                      generation=last[0].generation if last else -1,
                      size=last[0].size if last else 0)
        self.faults.append(fault)
        lift = getattr(self, "_" + kind)(hosts)
        if lift is not None:
            hold()
            lift()
            fault.lifted = time.time()
        return fault

    def _kill_worker(self, hosts):
        self._signal_worker(hosts[0], signal.SIGKILL)

    def _kill_guard(self, hosts):
        pid = self._require_worker(hosts[0])
        os.kill(_parent(pid), signal.SIGKILL)

    def _stop_worker(self, hosts):
        pid = self._signal_worker(hosts[0], signal.SIGSTOP)

        def lift():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass        # the driver stopped it meanwhile
        return lift

    def _cut_host(self, hosts):
        ns = self._ns(hosts[0])
        for chain in ("INPUT", "OUTPUT"):
            _run(["ip", "netns", "exec", ns, "iptables", "-I", chain, "-j", "DROP"])

        def lift():
            for chain in ("INPUT", "OUTPUT"):
                _run(["ip", "netns", "exec", ns, "iptables", "-D", chain, "-j", "DROP"])
        return lift

    def _cut_pair(self, hosts):
        a, b = hosts
        self._drop_between(a, b, "-I")
        return lambda: self._drop_between(a, b, "-D")

    def _drop_between(self, a: int, b: int, op: str) -> None:
        for here, there in ((a, b), (b, a)):
            peer = self.c.addresses[there - 1]
            for chain, flag in (("INPUT", "-s"), ("OUTPUT", "-d")):
                _run(["ip", "netns", "exec", self._ns(here), "iptables", op, chain, flag, peer,
                      "-j", "DROP"])

    def _packet_loss(self, hosts):
        # iptables' statistic match rather than tc netem, which not every kernel has (sch_netem)
        ns = self._ns(hosts[0])
        rule = ["-m", "statistic", "--mode", "random", "--probability", "0.05", "-j", "DROP"]
        for chain in ("INPUT", "OUTPUT"):
            _run(["ip", "netns", "exec", ns, "iptables", "-I", chain, *rule])

        def lift():
            for chain in ("INPUT", "OUTPUT"):
                _run(["ip", "netns", "exec", ns, "iptables", "-D", chain, *rule])
        return lift

    def _discovery(self, hosts):
        self.list_hosts([h for h in self.listed if h not in hosts])
        return lambda: self.list_hosts(sorted(set(self.listed) | set(hosts)))

    def list_hosts(self, hosts: list[int]) -> None:
        """Make the discovery script answer ``hosts`` (1-based numbers)."""
        self.listed = list(hosts)
        self._write_hosts()

    def _write_hosts(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.hosts_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{self.c.addresses[h - 1]}:1\n" for h in self.listed))
        os.replace(tmp, self.hosts_file)

    def _require_worker(self, host: int) -> int:
        pid = self.worker_pid(host)
        if pid is None:
            raise AssertionError(f"no worker runs on host {host} to inject a fault into")
        return pid

    def _signal_worker(self, host: int, sig: int) -> int:
        pid = self._require_worker(host)
        os.kill(pid, sig)
        return pid

    # -- afterwards ------------------------------------------------------------------------
    def measure(self) -> None:
        """Fill in each fault's recovery from the commit log: the time from its injection to
        the first commit of a generation formed after it (``reformed``), or, where none formed
        before the next fault, to the first commit after it was lifted; its longest time
        without a commit until the next fault; for ``discovery``, from putting the host back to
        the first commit of a job bigger than while it was out."""
        commits = self.commits()
        for i, f in enumerate(self.faults):
            end = self.faults[i + 1].started if i + 1 < len(self.faults) else float("inf")
            window = [c for c in commits if f.started < c.time <= end]
            new = [c for c in window if c.generation > f.generation]
            if new:
                f.recovery_s, f.reformed = new[0].time - f.started, True
            else:
                after = [c for c in window if c.time > (f.lifted or f.started)]
                f.recovery_s = after[0].time - f.started if after else None
            stamps = [f.started] + [c.time for c in window]
            if window:
                f.longest_gap_s = max(b - a for a, b in zip(stamps, stamps[1:]))
            if f.kind == "discovery" and f.lifted is not None:
                out = [c.size for c in window if c.time <= f.lifted]
                smaller = min(out) if out else f.size
                back = [c for c in window if c.time > f.lifted and c.size > smaller]
                f.rejoin_s = back[0].time - f.lifted if back else None

    def check(self) -> dict:
        """Every worker of the last generation committed batches 0..N-1 once each, in order,
        and holds the weights a replay of those N batches gives, bit for bit; returns a
        summary."""
        results = [json.loads(p.read_text()) for p in sorted(self.out.glob("result.*.json"))]
        assert results, "no worker wrote a result"
        n = results[0]["batch"]
        want = replay(n)
        gens = {r["generation"] for r in results}
        assert len(gens) == 1, f"results of several generations: {sorted(gens)}"
        assert sorted(r["rank"] for r in results) == list(range(results[0]["size"])), \
            f"results of ranks {sorted(r['rank'] for r in results)}, size {results[0]['size']}"
        for r in results:
            assert r["batch"] == n, f"rank {r['rank']} stopped at batch {r['batch']}, not {n}"
            assert r["done"] == list(range(n)), \
                f"rank {r['rank']} committed batches out of order, twice or not at all: " \
                f"{_first_difference(r['done'], n)}"
            assert np.array_equal(np.array(r["w"]), want), \
                f"rank {r['rank']}: weights {r['w']} differ from the replay {want.tolist()}"
        commits = self.commits()
        return {"batches": n, "final_size": results[0]["size"],
                "generations": max(gens) + 1, "commits": len(commits)}


def replay(batches: int) -> np.ndarray:
    """The weights the soak worker's training gives after ``batches`` batches, in one
    process: the same SGD on each batch's whole gradient."""
    import torch

    linear = torch.nn.Linear(DIM, 1, bias=False).double()
    with torch.no_grad():
        linear.weight.zero_()
    opt = torch.optim.SGD(linear.parameters(), lr=0.125, momentum=0.5)
    for b in range(batches):
        opt.zero_grad()
        linear(torch.from_numpy(batch_rows(b))).sum().backward()
        opt.step()
    return linear.weight.detach().numpy().ravel()


def _first_difference(done: list[int], n: int) -> str:
    for i, (got, want) in enumerate(zip(done, range(n))):
        if got != want:
            return f"entry {i} is batch {got}, expected {want}"
    return f"{len(done)} entries, expected {n}"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _stamp_lines(stream, path: Path) -> None:
    with open(path, "w") as out:
        for line in iter(stream.readline, b""):
            out.write(f"{time.time():.3f} {line.decode(errors='replace')}")
            out.flush()


def worker_records(out_dir: Path) -> dict[int, dict]:
    """What each worker process wrote when it had joined (workers_elastic_soak.py), by pid."""
    out = {}
    for p in (Path(out_dir) / "workers").glob("*"):
        try:
            out[int(p.name)] = json.loads(p.read_text())
        except ValueError:
            pass        # being written
    return out


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)
