"""The Ray actor each fuse worker runs in (Horovod's ``BaseHorovodWorker``).

Plain Python: :mod:`fuse.ray.runner` turns it into an actor with ``ray.remote``.  The executor
asks each actor where it landed, hands it its job environment (rank, store, secret), and then
runs functions in it; fuse reads that environment when the function calls ``init()``.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any, Callable, Mapping

__all__ = ["BaseHorovodWorker", "FuseWorker"]


class FuseWorker:
    """One worker of a :class:`~fuse.ray.RayExecutor`: an actor holding an optional
    ``executable`` object (``start(executable_cls=...)``) that :meth:`execute` hands to
    functions."""

    def __init__(self, world_rank: int = 0, world_size: int = 1):
        self.world_rank, self.world_size = world_rank, world_size
        self.executable: Any = None

    def placement(self) -> tuple[str, str, str, int]:
        """(Ray node id, node IP, host name, pid) of this actor."""
        import ray
        return (ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(),
                socket.gethostname(), os.getpid())

    def update_env_vars(self, env_vars: Mapping[str, str]) -> None:
        os.environ.update({str(k): str(v) for k, v in env_vars.items()})

    def env_vars(self) -> dict[str, str]:
        return dict(os.environ)

    def set_job_env(self, job_env: Mapping[str, str]) -> dict[str, str]:
        """Take this worker's job environment, plus its host's thread budget; returns what
        was set."""
        from fuse.runner.worker_env import worker_env
        env = worker_env(job_env)
        self.update_env_vars(env)
        self.world_rank = int(env["FUSE_RANK"])
        self.world_size = int(env["FUSE_SIZE"])
        return env

    def start_executable(self, executable_cls: type | None = None, executable_args=None,
                         executable_kwargs=None) -> None:
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or ()),
                                             **(executable_kwargs or {}))

    def execute(self, func: Callable[[Any], Any]) -> Any:
        """``func(executable)`` on this worker."""
        return _reporting(func, self.executable)

    def run(self, func: Callable[..., Any], args=(), kwargs=None) -> Any:
        """``func(*args, **kwargs)`` on this worker."""
        return _reporting(func, *(args or ()), **(kwargs or {}))

    def run_elastic(self, job_env: Mapping[str, str], func: Callable[[], Any]) -> tuple:
        """One worker of an elastic job (:mod:`fuse.ray.elastic`): take ``job_env``, run
        ``func()``; returns ``("ok", rank at the end, result)``, or ``("removed", None, None)``
        when the job went on without this worker (its node left)."""
        from fuse.worker.elastic_rendezvous import WorkerRemoved
        self.set_job_env(job_env)
        try:
            value = _reporting(func)
        except WorkerRemoved:       # a SystemExit: would end the actor, not just this call
            return ("removed", None, None)
        job_state = sys.modules.get("fuse.job.state")   # loaded only if the function used fuse
        config = job_state.last_config() if job_state is not None else None
        return ("ok", config.rank if config is not None else self.world_rank, value)


def _reporting(func: Callable[..., Any], *args, **kwargs) -> Any:
    """Call ``func``; if it raises and started fuse, tell the other ranks (and the driver's
    store) why first, as ``fuse.run``'s workers do, so they fail at once with this message."""
    try:
        return func(*args, **kwargs)
    except Exception as exc:
        basics = sys.modules.get("fuse.worker.lifecycle")
        if basics is not None:
            basics.report_failure(exc)
        raise


# Horovod's name, for scripts that subclass or import it
BaseHorovodWorker = FuseWorker
