"""Hosts for multi-host tests: network namespaces with their own address and sshd, made by
scripts/cluster.sh.  They share this machine's kernel, files and processes, but not its network
or host name, and fuserun reaches every one but the one it runs on over ssh.

Needs root, iproute2 and openssh-server: where any is missing the test is skipped with the
reason, or fails where FUSE_TEST_REQUIRE names ``ssh`` (CI as root, see scripts/test.sh).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import subprocess
import sys

import needs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER_SH = os.path.join(ROOT, "scripts", "cluster.sh")
_names = itertools.count()


@dataclasses.dataclass
class Cluster:
    addresses: list[str]    # host i + 1 is addresses[i]
    names: list[str]        # and has this host name
    env: dict               # CLUSTER_NAME, CLUSTER_DIR and FUSE_SSH_ARGS for cluster.sh and fuserun
    key: str                # the client key fuserun's -i takes

    def fuserun(self, host: int, *args: str) -> list[str]:
        """argv that runs ``fuserun args...`` on host ``host`` (1-based), over ssh to the others."""
        return ["bash", CLUSTER_SH, "exec", str(host), sys.executable, "-m", "fuse.runner.launch",
                "-i", self.key, *args]


def require() -> None:
    """Skip (or fail, where required) unless namespace hosts with sshd can be made here."""
    if os.geteuid() != 0:
        needs.missing("ssh", "the multi-host tests run as root (they make network namespaces)")
    for tool in ("/usr/sbin/sshd", shutil.which("ssh"), shutil.which("ip"), shutil.which("tc")):
        if not (tool and os.access(tool, os.X_OK)):
            needs.missing("ssh", "sshd, ssh, ip or tc is missing")


@contextlib.contextmanager
def cluster(tmp_path, hosts: int, rate: str | None = None):
    """``hosts`` namespace hosts with sshd (links capped at ``rate``, e.g. "1gbit"), torn down
    afterwards whatever happens."""
    require()
    name = f"fh{os.getpid() % 100000}x{next(_names)}"
    state = tmp_path / f"cluster-{name}"
    env = dict(os.environ, CLUSTER_NAME=name, CLUSTER_DIR=str(state),
               FUSE_SSH_ARGS=f"-F {state}/ssh_config")
    argv = ["bash", CLUSTER_SH, "up", str(hosts), "--sshd"] + (["--rate", rate] if rate else [])
    up = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    try:
        assert up.returncode == 0, "cluster.sh up: " + up.stderr.decode()[-2000:]
        rows = [line.split() for line in up.stdout.decode().splitlines() if line.strip()]
        yield Cluster([r[0] for r in rows], [r[1] for r in rows], env, str(state / "client_key"))
    finally:
        subprocess.run(["bash", CLUSTER_SH, "down"], env=env, capture_output=True, timeout=120)
