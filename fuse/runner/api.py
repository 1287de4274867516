"""``fuse.run``: run a Python function on every worker of a job and collect the results."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Callable, Mapping, Sequence

from fuse.cluster import hosts as _hosts
from .job import Job, Settings
from ._payload import FUNC_KEY, PATH_KEY, RESULT_KEY, sign, type_name, verify
from fuse.cluster.store import SECRET_ENV, make_secret

__all__ = ["run", "WorkerError"]


class WorkerError(RuntimeError):
    """A worker of :func:`run` failed.

    ``rank`` is the first rank that failed; ``exc_type`` the qualified name of the exception it
    raised (None if it died without raising, see ``exit_code``); ``remote_traceback`` the
    worker's traceback text.  When the worker's exception could be unpickled, :func:`run`
    raises that exception itself, with this error as its ``__cause__``.
    """

    def __init__(self, message: str, rank: int, exc_type: str | None = None,
                 remote_traceback: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.rank, self.exc_type = rank, exc_type
        self.remote_traceback, self.exit_code = remote_traceback, exit_code


def raise_reported_error(load, rank: int, n: int, exit_code, *, prefix: str = "",
                         raised_by: str = "fuse.run worker") -> None:
    """If ``rank`` of ``n`` reported an error (``load(rank)`` gives its payload), raise the
    rank's own exception from a WorkerError holding its traceback (the WorkerError itself when
    the exception did not pickle).  Returns when the rank reported no error."""
    try:
        payload = load(rank)
    except Exception as err:
        payload = ("error", None, type_name(type(err)),
                   f"its result could not be unpickled: {err}", "")
    if payload is None or payload[0] != "error":
        return
    _, exc, tname, message, tb = payload
    err = WorkerError(f"{prefix}rank {rank} raised {tname}: {message}\n\n"
                      f"Traceback on rank {rank}:\n{tb}", rank, tname, tb, exit_code)
    if isinstance(exc, BaseException):
        if hasattr(exc, "add_note"):
            exc.add_note(f"(raised by {raised_by} rank {rank} of {n})")
        raise exc from err
    raise err


def run(func: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
        num_proc: int | None = None, min_num_proc: int | None = None,
        max_num_proc: int | None = None, slots: int | None = None,
        reset_limit: int | None = None, cooldown_range: tuple[int, int] | None = None,
        hosts: str | None = None, hostfile: str | None = None,
        host_discovery_script: str | None = None, start_timeout: float | None = None,
        ssh_port: int | None = None, ssh_identity_file: str | None = None,
        disable_cache: bool | None = None, output_filename: str | None = None,
        verbose: bool | None = None, use_gloo: bool | None = None, use_mpi: bool | None = None,
        mpi_args: str | None = None, network_interface: str | None = None,
        network_interfaces: Sequence[str] | str | None = None, executable: str | None = None,
        np: int | None = None, min_np: int | None = None, max_np: int | None = None,
        env: Mapping[str, str] | None = None) -> list[Any]:
    """Run ``func(*args, **kwargs)`` on ``num_proc`` workers and return their results in rank
    order.  The arguments are ``horovod.run``'s, in its order, and ``env``.

    ``num_proc`` (alias ``np``) defaults to 1, or to all slots of ``hosts``/``hostfile``.
    ``hosts`` is ``"host1:2,host2:2"``; ``hostfile`` has lines ``host slots=N``.
    ``env`` is the workers' whole environment (default: this process's); ``executable`` the
    Python interpreter the workers run (default: this one).  ``func`` travels with cloudpickle.
    ``disable_cache`` is accepted and has no effect (nothing is cached); ``network_interface``
    is the deprecated one-interface spelling of ``network_interfaces``.

    Elastic mode (``min_np``/``min_num_proc``, ``max_np``/``max_num_proc`` or
    ``host_discovery_script``; with ``slots`` per discovered host, ``reset_limit``,
    ``cooldown_range``): ``func`` should train under ``fuse.<framework>.elastic.run``; the
    results of ranks 0 .. min_np-1 of the last generation are returned, as in Horovod.

    If a worker fails, the others are stopped and this raises: the worker's own exception when
    it can be unpickled here (chained from a :class:`WorkerError` carrying the rank and the
    remote traceback), otherwise a :class:`WorkerError`.
    """
    min_np, max_np, elastic = _elastic_range(min_np, min_num_proc, max_np, max_num_proc,
                                             host_discovery_script, slots, reset_limit,
                                             cooldown_range, use_mpi)
    network_interfaces = _interfaces(network_interface, network_interfaces)
    if np is not None and num_proc is not None and np != num_proc:
        raise ValueError(f"np={np} and num_proc={num_proc} disagree; give one of them")
    n = np if np is not None else num_proc
    if hosts and hostfile:
        raise ValueError("give hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("give use_gloo or use_mpi, not both")
    settings = Settings(start_timeout=_start_timeout(start_timeout), ssh_port=ssh_port,
                        ssh_identity_file=ssh_identity_file, output_filename=output_filename,
                        verbose=bool(verbose), network_interfaces=network_interfaces,
                        name="fuse.run")
    key = make_secret()     # the job's secret: the store's and the payloads' HMAC key
    worker_env = dict(os.environ if env is None else env)
    if use_gloo:
        worker_env.setdefault("FUSE_BACKEND", "gloo")
    command = [executable or sys.executable, "-m", "fuse.runner.run_task"]
    setup = _publisher(key, func, args, kwargs)
    if elastic:
        return _run_elastic(command, setup, key, n, min_np, max_np, slots, reset_limit,
                            cooldown_range, hosts, hostfile, host_discovery_script,
                            worker_env, settings)
    specs = _static_hosts(hosts, hostfile, n)
    n = sum(s.slots for s in specs) if n is None else n
    slot_list = _hosts.assign_slots(specs, n)
    if use_mpi:  # mpirun starts and supervises the workers; we keep the store
        from . import mpi
        raw, failure, interrupted = mpi.run_function(
            n, specs if (hosts or hostfile) else None, {**worker_env, SECRET_ENV: key.hex()},
            setup,
            executable or sys.executable, mpi_args=mpi_args, ssh_port=ssh_port,
            ssh_identity_file=ssh_identity_file, network_interfaces=network_interfaces,
            output_filename=output_filename, verbose=bool(verbose))
    else:
        with Job(command, slot_list, worker_env, settings, secret=key) as job:
            setup(job.server)
            result = job.run()
            raw = {r: job.server.get(RESULT_KEY.format(rank=r)) for r in range(n)}
        failure, interrupted = result.failure, result.interrupted
    return _results(raw, failure, interrupted, key, n)


def _publisher(key: bytes, func, args, kwargs) -> Callable:
    """What puts the call into a job's store for its workers (``fuse.runner.run_task``): this
    process's ``sys.path`` and the signed, pickled function with its arguments."""
    import cloudpickle
    payload = cloudpickle.dumps((func, tuple(args), dict(kwargs or {})))

    def setup(server) -> None:
        server.put(PATH_KEY, json.dumps([p for p in sys.path if p]).encode())
        server.put(FUNC_KEY, sign(key, payload))
    return setup


def _elastic_range(min_np, min_num_proc, max_np, max_num_proc, host_discovery_script, slots,
                   reset_limit, cooldown_range, use_mpi) -> tuple[int | None, int | None, bool]:
    """``min_np``, ``max_np`` (each given under either of its names) and whether the job is
    elastic; ValueError for arguments that disagree or that only elastic mode takes."""
    for alias, name, a, b in (("min_np", "min_num_proc", min_np, min_num_proc),
                              ("max_np", "max_num_proc", max_np, max_num_proc)):
        if a is not None and b is not None and a != b:
            raise ValueError(f"{alias}={a} and {name}={b} disagree; give one of them")
    min_np = min_np if min_np is not None else min_num_proc
    max_np = max_np if max_np is not None else max_num_proc
    elastic = min_np is not None or max_np is not None or host_discovery_script is not None
    extra = [name for name, value in (("slots", slots), ("reset_limit", reset_limit),
                                      ("cooldown_range", cooldown_range)) if value is not None]
    if extra and not elastic:
        raise ValueError(f"fuse.run: {', '.join(extra)} only apply in elastic mode (give "
                         "min_np, max_np or host_discovery_script)")
    if elastic and use_mpi:
        raise ValueError("fuse.run: elastic mode needs the Gloo launcher, not use_mpi")
    return min_np, max_np, elastic


def _static_hosts(hosts: str | None, hostfile: str | None,
                  n: int | None) -> list[_hosts.HostSpec]:
    if hosts:
        return _hosts.parse_hosts(hosts)
    if hostfile:
        return _hosts.parse_hostfile(hostfile)
    return [_hosts.HostSpec("localhost", 1 if n is None else n)]


def _interfaces(one: str | None, many: Sequence[str] | str | None) -> list[str] | None:
    """``network_interfaces`` as a list (a string is comma-separated), with the deprecated
    ``network_interface`` first."""
    if isinstance(many, str):
        many = [x.strip() for x in many.split(",") if x.strip()]
    if one:
        return [one, *(many or [])]
    return list(many) if many is not None else None


def _start_timeout(value: float | None) -> float:
    from .launch import start_timeout
    from .usage import UsageError
    try:
        return start_timeout(value)
    except UsageError as err:
        raise ValueError(str(err)) from None


def _results(raw: Mapping[int, bytes | None], failure, interrupted, key: bytes,
             n: int) -> list[Any]:
    """The workers' results in rank order, from what they stored (``raw``, by rank); raises
    what the first failing worker raised, or a WorkerError."""
    import cloudpickle

    if interrupted is not None:
        if interrupted == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), interrupted)  # the default action, now that workers are gone
        raise WorkerError(f"fuse.run: interrupted by signal {interrupted}", -1)

    def load(rank: int):
        blob = raw.get(rank)
        if blob is None:
            return None
        return cloudpickle.loads(verify(key, blob, f"the result of rank {rank}"))

    if failure is not None:
        raise_reported_error(load, failure.rank, n, failure.exit_code)
        raise WorkerError(failure.describe("fuse.run"), failure.rank,
                          exit_code=failure.exit_code)
    results = []
    for rank in range(n):
        payload = load(rank)
        if payload is None:
            raise WorkerError(f"fuse.run: rank {rank} exited with code 0 without returning a "
                              "result (did the function call os._exit?)", rank, exit_code=0)
        results.append(payload[1])
    return results


def _run_elastic(command, setup, key, n, min_np, max_np, slots, reset_limit, cooldown_range,
                 hosts, hostfile, host_discovery_script, worker_env, settings) -> list[Any]:
    import cloudpickle

    from .elastic.driver import ElasticJob, ElasticJobError, discovery_from
    from .elastic.launch import elastic_settings, fixed_hosts

    if host_discovery_script and (hosts or hostfile):
        raise ValueError("give host_discovery_script or hosts/hostfile, not both")
    elastic = elastic_settings(n, min_np, max_np, reset_limit, cooldown_range, None,
                               bool(host_discovery_script))
    specs = None if host_discovery_script else fixed_hosts(hosts, hostfile, n, max_np)
    discovery = discovery_from(specs, host_discovery_script, slots)
    try:
        job = ElasticJob(command, discovery, elastic, worker_env, settings, secret=key)
    except ElasticJobError as err:
        raise WorkerError(f"fuse.run: {err}", -1) from None
    with job:
        setup(job.server)
        result = job.run()
        if result.interrupted == signal.SIGINT:
            raise KeyboardInterrupt
        if result.elastic_error is not None or result.interrupted is not None:
            raise WorkerError(job.describe_failure(result) if result.elastic_error
                              else f"fuse.run: interrupted by signal {result.interrupted}", -1)
        results = []
        for rank in range(elastic.min_np):
            blob = job.server.get(RESULT_KEY.format(rank=rank))
            if blob is None:
                raise WorkerError(f"fuse.run: rank {rank} of the last generation returned no "
                                  "result", rank)
            payload = cloudpickle.loads(verify(key, blob, f"the result of rank {rank}"))
            if payload[0] == "error":
                raise WorkerError(f"rank {rank} raised {payload[2]}: {payload[3]}", rank,
                                  payload[2], payload[4])
            results.append(payload[1])
    return results
