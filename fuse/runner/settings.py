"""How a job runs, as its launcher chose: timeouts, ssh, where output goes, how it names itself.

Read by the :class:`~fuse.runner.job.Job` and by the starter that starts its workers
(:mod:`fuse.runner.starter`); imports nothing of theirs."""

from __future__ import annotations

import dataclasses
import os
from typing import IO, Sequence


@dataclasses.dataclass
class Settings:
    start_timeout: float = 30.0          # seconds ssh hosts get to start their worker
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    output_filename: str | None = None   # directory: <dir>/rank.<N>/{stdout,stderr}
    prefix_timestamp: bool = False
    verbose: bool = False
    network_interfaces: Sequence[str] | None = None
    grace_seconds: float = 5.0           # SIGTERM -> SIGKILL
    cwd: str | None = None
    name: str = "fuserun"                # how the launcher names itself in messages
    stdout: IO | None = None             # where workers' stdout goes (default sys.stdout)
    stderr: IO | None = None             # where workers' stderr and our messages go


def seconds_setting(value: float | None, env_names: Sequence[str], default: float,
                    environ=os.environ) -> float:
    """A number of seconds: the flag's ``value`` when given, else the first of ``env_names``
    set (fuse's name, then Horovod's), else ``default``; ValueError names the variable."""
    if value is not None:
        return float(value)
    for var in env_names:
        if environ.get(var, "").strip():
            try:
                return float(environ[var])
            except ValueError:
                raise ValueError(f"{var}={environ[var]!r} is not a number of seconds") from None
    return default
