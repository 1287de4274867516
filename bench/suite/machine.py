"""A description of the machine and software a benchmark ran on, for every result file.

Nothing here initialises MPI or a framework: versions come from package metadata, so the suite
can describe the machine before (and after) its jobs without side effects.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib import metadata


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def debian_gloo_version() -> str | None:
    """The version of Debian's libgloo-dev, which fuse's Gloo backend is built against."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libgloo-dev"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def describe() -> dict:
    """Cores, CPU, kernel, memory and the versions that matter to the figures."""
    try:
        with open("/proc/meminfo") as f:
            mem_kib = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kib = 0
    return {
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "torch_gloo": "bundled with torch" if _version("torch") else None,
        "tensorflow": _version("tensorflow"),
        "keras": _version("keras"),
        "mxnet": _version("mxnet"),
        "fuse": _version("fuse-dl"),       # the distribution; the import name is fuse
        "fuse_gloo": debian_gloo_version(),
        "mpi4py": _version("mpi4py"),
        "mpich": _version("mpich"),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": load_average(),
    }


def summary_line(m: dict) -> str:
    """One line for a report header."""
    # the framework the figures are about: TensorFlow's and MXNet's environments have no torch
    # (and no MPI)
    if m.get("tensorflow") and not m.get("torch"):
        framework = f"TensorFlow {m['tensorflow']}, Keras {m.get('keras')}"
    elif m.get("mxnet") and not m.get("torch"):
        framework = f"MXNet {m['mxnet']}"
    else:
        framework = f"torch {m['torch']} (its bundled Gloo)"
    line = (f"{m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}, "
            f"Python {m['python']}, numpy {m['numpy']}, {framework}, fuse {m['fuse']} on "
            f"Debian Gloo {m['fuse_gloo']}")
    return line + (f", mpi4py {m['mpi4py']} with MPICH {m['mpich']}" if m.get("mpi4py") else "")
