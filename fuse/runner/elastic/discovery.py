"""Where an elastic job's hosts come from: a fixed ``-H``/``--hostfile`` list, or a discovery
script run again and again (Horovod's ``--host-discovery-script``).

A discovery script prints one host per line, ``host`` or ``host:slots`` (a line without slots
gets ``--slots-per-host``, default 1); blank lines and ``#`` comments are skipped; an empty
output means no hosts right now.
"""

from __future__ import annotations

import subprocess

from fuse.cluster.hosts import HostSpec, parse_hostfile_text

SCRIPT_TIMEOUT = 30.0       # seconds a discovery script may run


class DiscoveryError(RuntimeError):
    """The discovery script failed or printed something that is not a host list."""


class FixedHosts:
    """The hosts given on the command line: fault tolerance without discovery."""

    def __init__(self, specs: list[HostSpec]):
        self._specs = list(specs)

    def find(self) -> list[HostSpec]:
        return list(self._specs)

    def describe(self) -> str:
        return "-H"


class DiscoveryScript:
    def __init__(self, path: str, default_slots: int | None = None,
                 timeout: float = SCRIPT_TIMEOUT):
        self.path = path
        self.default_slots = default_slots or 1
        self.timeout = timeout

    def describe(self) -> str:
        return f"the host discovery script {self.path}"

    def find(self) -> list[HostSpec]:
        try:
            proc = subprocess.run([self.path], capture_output=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DiscoveryError(f"{self.describe()} did not finish within "
                                 f"{self.timeout:g} s") from None
        except OSError as err:
            raise DiscoveryError(f"cannot run {self.describe()}: {err.strerror or err}") from None
        if proc.returncode != 0:
            tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise DiscoveryError(f"{self.describe()} exited with code {proc.returncode}"
                                 + (": " + " | ".join(tail) if tail else ""))
        return parse_discovery_output(proc.stdout.decode(errors="replace"), self.default_slots,
                                      self.path)


def parse_discovery_output(text: str, default_slots: int,
                           name: str = "discovery") -> list[HostSpec]:
    lines = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if ":" not in line and not line.startswith("["):
            line = f"{line}:{default_slots}"
        lines.append(line)
    if not lines:
        return []
    try:
        return parse_hostfile_text("\n".join(lines), name)
    except ValueError as err:
        raise DiscoveryError(str(err)) from None
