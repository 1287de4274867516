"""How many compute threads each worker on a host should run.

Every framework sizes its intra-op pool to the host's cores by default (OpenMP, MKL, OpenBLAS,
TensorFlow's Eigen pool).  N workers on one host then run N pools of that size, and as soon as
anything else wants a core, every parallel region waits for a thread that is not scheduled:
measured on 2 cores, one unrelated busy process made a fuse training step 5-7x slower.  So the
launchers give each worker its share of the cores that this process may really use (CPU
affinity and cgroup quota, not the machine's core count), and ``init()`` warns when a script
started another way oversubscribes its host.

The launcher computes the budget here for workers on its own machine; for workers on other
machines it sends :func:`shell_budget`, which computes the same number there, in ``sh``.
"""

from __future__ import annotations

import math
import os
import shlex
from typing import Callable, Mapping

__all__ = ["BUDGET_VARIABLES", "usable_cores", "cgroup_cpu_limit", "threads_per_worker",
           "budget_env", "shell_budget", "launcher_notice", "register_thread_probe",
           "intra_op_threads", "oversubscription_warning"]

# What the launchers set, in this order of precedence: a value the user gave OMP_NUM_THREADS
# is the budget for the others too; a variable the user set is never changed.
#   OMP_NUM_THREADS         OpenMP: torch's and MXNet's intra-op pools, OpenBLAS falls back to it
#   MKL_NUM_THREADS         MKL, which otherwise may pick its own count
#   TF_NUM_INTRAOP_THREADS  TensorFlow's intra-op pool, which ignores OMP_NUM_THREADS
BUDGET_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
                     ) -> float | None:
    """The CPU quota of this process's cgroup and its ancestors, in cores (None: no quota).

    cgroup v2 keeps ``cpu.max`` ("max 100000" or "<quota> <period>") in every level of the
    unified hierarchy; v1 keeps ``cpu.cfs_quota_us`` (-1 for none) and ``cpu.cfs_period_us``
    under the ``cpu`` controller's mount.  The tightest level wins.  ``root`` and
    ``proc_cgroup`` are parameters so that tests can point them at a tree of their own.
    """
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":            # v2 unified hierarchy
            for base in (root, os.path.join(root, "unified")):
                limits += _levels(base, path, _v2_limit)
        elif "cpu" in controllers.split(","):                 # v1 cpu controller
            for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                base = os.path.join(root, name)
                if os.path.isdir(base):
                    limits += _levels(base, path, _v1_limit)
                    break
    return min(limits) if limits else None


def _levels(base: str, path: str, read: Callable[[str], float | None]) -> list[float]:
    """The limits ``read`` finds in ``base/path`` and each of its parents up to ``base``."""
    found = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        limit = read(os.path.join(base, *parts[:depth]))
        if limit is not None:
            found.append(limit)
    return found


def _read_words(path: str) -> list[str] | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().split()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_limit(directory: str) -> float | None:
    words = _read_words(os.path.join(directory, "cpu.max"))
    if not words or words[0] == "max":
        return None
    try:
        quota, period = int(words[0]), int(words[1]) if len(words) > 1 else 100000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_limit(directory: str) -> float | None:
    quota = _read_words(os.path.join(directory, "cpu.cfs_quota_us"))
    period = _read_words(os.path.join(directory, "cpu.cfs_period_us"))
    try:
        q, p = int(quota[0]), int(period[0])
    except (TypeError, IndexError, ValueError):
        return None
    return q / p if q > 0 and p > 0 else None


def usable_cores(limit: float | None = None) -> int:
    """Cores this process may run on: its affinity mask, capped by the cgroup quota (rounded
    up: a quota of 1.5 cores keeps two threads busy part of the time)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if limit is None:
        limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def threads_per_worker(workers_on_host: int, cores: int | None = None) -> int:
    """Each worker's share of the host's usable cores, at least one."""
    if cores is None:
        cores = usable_cores()
    return max(1, cores // max(1, workers_on_host))


def budget_env(environ: Mapping[str, str], workers_on_host: int,
               cores: int | None = None) -> dict[str, str]:
    """The thread variables to add to a worker's environment ``environ``: the ones it does not
    set yet, each with the budget (the user's OMP_NUM_THREADS when set, else the share)."""
    missing = [name for name in BUDGET_VARIABLES if not environ.get(name)]
    if not missing:
        return {}
    threads = _users_budget(environ) or str(threads_per_worker(workers_on_host, cores))
    return {name: threads for name in missing}


def _users_budget(environ: Mapping[str, str]) -> str:
    """The thread count the user gave OMP_NUM_THREADS ("" if none); of a nested OpenMP list
    ("4,2") the outer level, the only one the other libraries understand."""
    return environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()


def shell_budget(environ: Mapping[str, str], workers_on_host: str,
                 cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
                 ) -> str:
    """``sh`` lines that export the budget :func:`budget_env` would give, computed on the host
    that runs them (for workers the launcher starts over ssh or through mpirun).

    ``workers_on_host`` is a number or a shell expression for it (``$MPI_LOCALNRANKS``).  The
    cores are ``nproc`` (the affinity mask) capped by the cgroup quotas along this shell's
    cgroup path, as :func:`usable_cores` does (``cgroup_root`` and ``proc_cgroup`` as in
    :func:`cgroup_cpu_limit`)."""
    missing = [name for name in BUDGET_VARIABLES if not environ.get(name)]
    if not missing:
        return ""
    exports = " ".join(f"{name}=$_fuse_threads" for name in missing)
    if _users_budget(environ):
        # the user's value is the budget for the others: no need to count cores there
        return f"_fuse_threads={shlex.quote(_users_budget(environ))}; export {exports}\n"
    return (_SHELL_BUDGET.replace("@ROOT@", shlex.quote(cgroup_root))
            .replace("@PROC@", shlex.quote(proc_cgroup))
            .replace("@WORKERS@", workers_on_host).replace("@EXPORTS@", exports))


# The sh twin of usable_cores() and threads_per_worker(); tests run both over the same files.
_SHELL_BUDGET = r"""_fuse_cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null)
[ "${_fuse_cores:-0}" -ge 1 ] 2>/dev/null || _fuse_cores=1
_fuse_cap() {  # $1 us of CPU per $2 us: lower _fuse_cores to the quota, rounded up
  case $1 in ''|max|-*) return ;; esac
  _fuse_q=$(( ($1 + $2 - 1) / $2 )); [ "$_fuse_q" -ge 1 ] || _fuse_q=1
  [ "$_fuse_q" -lt "$_fuse_cores" ] && _fuse_cores=$_fuse_q
}
_fuse_walk() {  # $1 a hierarchy's mount, $2 our path in it, $3 v1 or v2: every level up to $1
  _fuse_p=$2
  while :; do
    _fuse_d=$1$_fuse_p
    if [ "$3" = v2 ] && [ -r "$_fuse_d/cpu.max" ]; then
      read -r _fuse_a _fuse_b < "$_fuse_d/cpu.max"; _fuse_cap "$_fuse_a" "${_fuse_b:-100000}"
    elif [ "$3" = v1 ] && [ -r "$_fuse_d/cpu.cfs_quota_us" ]; then
      _fuse_cap "$(cat "$_fuse_d/cpu.cfs_quota_us")" "$(cat "$_fuse_d/cpu.cfs_period_us")"
    fi
    [ -n "$_fuse_p" ] && [ "$_fuse_p" != / ] || break
    _fuse_p=${_fuse_p%/*}
  done
}
while IFS=: read -r _fuse_h _fuse_c _fuse_path; do
  if [ "$_fuse_h" = 0 ] && [ -z "$_fuse_c" ]; then
    _fuse_walk @ROOT@ "$_fuse_path" v2; _fuse_walk @ROOT@/unified "$_fuse_path" v2
  else
    case ",$_fuse_c," in *,cpu,*)
      for _fuse_m in cpu cpu,cpuacct cpuacct,cpu; do
        if [ -d @ROOT@/"$_fuse_m" ]; then _fuse_walk @ROOT@/"$_fuse_m" "$_fuse_path" v1; break; fi
      done ;;
    esac
  fi
done 2>/dev/null < @PROC@
_fuse_threads=$(( _fuse_cores / (@WORKERS@) ))
[ "$_fuse_threads" -ge 1 ] || _fuse_threads=1
export @EXPORTS@
"""


# -- the warning for scripts no fuse launcher started --------------------------------------

# Framework adapters register how to ask their framework for its intra-op thread count (the
# core never imports a framework); each returns None when it cannot tell.
_probes: dict[str, Callable[[], int | None]] = {}


def register_thread_probe(framework: str, probe: Callable[[], int | None]) -> None:
    """Let ``init()`` ask ``framework`` how many intra-op threads it runs."""
    _probes[framework] = probe


def intra_op_threads(environ: Mapping[str, str] = os.environ,
                     cores: int | None = None) -> tuple[int, str]:
    """(threads, who says so): the largest intra-op pool of the frameworks in use, else what
    OpenMP will start (OMP_NUM_THREADS, or one thread per usable core)."""
    best: tuple[int, str] | None = None
    for name, probe in _probes.items():
        try:
            n = probe()
        except Exception:       # a probe must never break init()
            n = None
        if n and (best is None or n > best[0]):
            best = (int(n), name)
    if best is not None:
        return best
    value = _users_budget(environ)
    if value.isdigit() and int(value) > 0:
        return int(value), "OMP_NUM_THREADS"
    return (usable_cores() if cores is None else cores), "OpenMP's default of one per core"


def oversubscription_warning(local_size: int, environ: Mapping[str, str] = os.environ,
                             cores: int | None = None) -> str | None:
    """The warning ``init()`` logs when ``local_size`` workers, each with its intra-op pool,
    need more threads than the host's usable cores; None when they fit."""
    if local_size <= 1:
        return None
    if cores is None:
        cores = usable_cores()
    threads, source = intra_op_threads(environ, cores)
    if threads * local_size <= cores:
        return None
    share = threads_per_worker(local_size, cores)
    return (f"{local_size} workers on this host each run {threads} compute threads "
            f"({source}): {threads * local_size} threads on {cores} usable cores, so any other "
            f"busy process stalls every parallel region (several times slower). Start the "
            f"workers with OMP_NUM_THREADS={share} (and MKL_NUM_THREADS, "
            f"TF_NUM_INTRAOP_THREADS), as fuserun does by itself.")


def launcher_notice(environ: Mapping[str, str], local_workers: int, cores: int,
                    remote: bool = False) -> str | None:
    """The line a launcher prints once: what the workers get and how to choose otherwise
    (None when the user set every variable, so nothing was chosen for them)."""
    missing = [name for name in BUDGET_VARIABLES if not environ.get(name)]
    if not missing:
        return None
    if _users_budget(environ):
        chosen = f"{_users_budget(environ)}, from your OMP_NUM_THREADS"
    else:
        where = []
        if local_workers:
            where.append(f"{threads_per_worker(local_workers, cores)} on this host "
                         f"({cores} usable cores / {local_workers} "
                         f"worker{'s' if local_workers != 1 else ''})")
        if remote:
            where.append("on other hosts, each host's usable cores / its workers"
                         if local_workers else "on each host, its usable cores / its workers")
        chosen = "; ".join(where)
    return (f"thread budget: workers get {', '.join(missing)} = {chosen}. Set OMP_NUM_THREADS "
            "(or the others) yourself to choose another value.")
