"""A host cut off by the network (every packet to and from it dropped with iptables, its
processes alive) must not hang the job: with the default settings the ranks notice the peer
that stopped answering through the control connection's keep-alive (FUSE_PEER_TIMEOUT_SECONDS)
and the job ends naming the rank and its host; the cut-off rank, which can reach neither its
peers nor the launcher's store, reports best-effort with a short bound and exits by itself.
Before: the job hung until ssh's own keep-alive gave up (~58 s), and the cut-off rank lingered
~10 minutes retrying the store.  Real workers on network-namespace hosts over ssh."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time

import cluster_util
import needs
import pytest

from runner_util import wait_dead

pytestmark = pytest.mark.timeout(240)

TRAIN = r"""
import os, sys, time
import numpy as np
import fuse

fuse.init()
r = fuse.rank()
print(f"pid {os.getpid()}", flush=True)
x = np.ones(1000)
i = 0
while True:
    y = fuse.allreduce(x, name=f"step.{i % 4}", op=fuse.Sum)
    assert (y == fuse.size()).all()
    i += 1
    if i == 50:
        print("steady", flush=True)
    time.sleep(0.01)
"""


def _cut_off(c: cluster_util.Cluster, host: int) -> None:
    """Drop every packet to and from namespace host ``host`` (1-based)."""
    ns = f"{c.env['CLUSTER_NAME']}{host}"
    for chain in ("INPUT", "OUTPUT"):
        subprocess.run(["ip", "netns", "exec", ns, "iptables", "-I", chain, "-j", "DROP"],
                       check=True, capture_output=True, timeout=30)


def test_a_static_job_ends_naming_the_cut_off_rank_and_its_host(tmp_path):
    if not shutil.which("iptables"):
        needs.missing("ssh", "iptables is missing (scripts/setup.sh installs it with sshd)")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    with cluster_util.cluster(tmp_path, 2) as c:
        a, b = c.addresses
        proc = subprocess.Popen(c.fuserun(1, "-np", "2", "-H", f"{a}:1,{b}:1",
                                          "--start-timeout", "60", sys.executable, str(script)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                                env=c.env)
        pids, steady = {}, set()
        err: list[bytes] = []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
        reader.start()
        try:
            while len(steady) < 2:
                line = proc.stdout.readline().decode()
                assert line, "the job ended before it trained: " + b"".join(err).decode()[-3000:]
                rank, _, text = line.partition("<stdout>:")
                rank = int(rank.strip("[]"))
                if text.startswith("pid "):
                    pids[rank] = int(text.split()[1])
                elif text.strip() == "steady":
                    steady.add(rank)
            _cut_off(c, 2)
            cut_at = time.monotonic()
            proc.stdout.read()
            rc = proc.wait(timeout=150)
            ended_after = time.monotonic() - cut_at
            reader.join(10)
            text = b"".join(err).decode(errors="replace")
            assert rc != 0, text[-3000:]
            # the job ended on its own (not through ssh's keep-alive), naming the rank and host
            assert f"rank 1 (host {b}) stopped answering" in text, text[-3000:]
            # the cut-off rank exited by itself: the launcher cannot reach it to stop it
            left = wait_dead([pids[1]], 60)
            gone_after = time.monotonic() - cut_at
            print(f"job ended {ended_after:.1f} s after the cut; the cut-off rank "
                  + (f"was gone {gone_after:.1f} s after it" if not left else "still runs"))
            print("\n".join(line for line in text.splitlines() if "stopped answering" in line))
            assert left == [], "the cut-off rank is still running"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
