"""Handing a job to ``mpirun`` (``fuserun --mpi``).

For now the launcher only builds the mpirun command line (Open MPI or MPICH/Hydra flavour) and
replaces itself with it; workers then read their ranks from the MPI environment.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from typing import Mapping, Sequence

from .hosts import HostSpec


class MPINotFound(RuntimeError):
    pass


def find_mpirun() -> str:
    for name in ("mpirun", "mpiexec"):
        path = shutil.which(name)
        if path:
            return path
    raise MPINotFound(
        "--mpi: no mpirun or mpiexec on PATH.  Install an MPI (for example "
        "`pip install mpich` or `apt-get install openmpi-bin`), start the script with your MPI's "
        "own launcher, or drop --mpi to use fuserun's built-in launcher.")


def mpi_flavour(mpirun: str) -> str:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if "Open MPI" in out or "OpenRTE" in out:
        return "openmpi"
    if "Intel" in out:
        return "intel"
    if "HYDRA" in out or "MPICH" in out:
        return "mpich"
    return "unknown"


def mpirun_argv(mpirun: str, flavour: str, np: int, hosts: Sequence[HostSpec] | None,
                env: Mapping[str, str], command: Sequence[str], *, mpi_args: str | None = None,
                ssh_port: int | None = None, ssh_identity_file: str | None = None,
                network_interfaces: Sequence[str] | None = None,
                output_filename: str | None = None, prefix_timestamp: bool = False,
                binding_args: str | None = None) -> list[str]:
    argv = [mpirun]
    host_list = ",".join(f"{h.hostname}:{h.slots}" for h in hosts) if hosts else None
    if flavour == "openmpi":
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        argv += ["--tag-output", "-np", str(np)]
        if host_list:
            argv += ["-H", host_list]
        argv += shlex.split(binding_args) if binding_args else ["-bind-to", "none",
                                                                "-map-by", "slot"]
        rsh = []
        if ssh_port:
            rsh += ["-p", str(ssh_port)]
        if ssh_identity_file:
            rsh += ["-i", ssh_identity_file]
        if rsh:
            argv += ["-mca", "plm_rsh_args", " ".join(rsh)]
        if network_interfaces:
            argv += ["-mca", "btl_tcp_if_include", ",".join(network_interfaces)]
        if output_filename:
            argv += ["--output-filename", output_filename]
        if prefix_timestamp:
            argv.append("--timestamp-output")
        for name in env:
            argv += ["-x", name]
    else:  # MPICH / Hydra / Intel MPI: the whole environment is propagated by default
        argv += ["-l", "-np", str(np)]
        if host_list:
            argv += ["-hosts", host_list]
        if binding_args:
            argv += shlex.split(binding_args)
        if network_interfaces:
            argv += ["-iface", network_interfaces[0]]
        if output_filename:
            argv += ["-outfile-pattern", os.path.join(output_filename, "rank.%r", "stdout"),
                     "-errfile-pattern", os.path.join(output_filename, "rank.%r", "stderr")]
    if mpi_args:
        argv += shlex.split(mpi_args)
    argv += list(command)
    return argv


def exec_mpirun(argv: Sequence[str], env: Mapping[str, str], verbose: bool = False) -> None:
    """Replace this process with mpirun (does not return)."""
    env = dict(env)
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if verbose:
        print("fuserun: " + shlex.join(argv), flush=True)
    os.execve(argv[0], list(argv), env)
