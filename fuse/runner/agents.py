"""``fuserun --agents``: a job whose workers are started by agents that join the driver.

The driver is fuse's elastic driver (:class:`fuse.runner.elastic.driver.ElasticJob`); its hosts
are the agents (:mod:`fuse.runner.agent`) whose heartbeat moves in its store, each with the slots
it offered, and its starter asks an agent to run the job's command.  So on Kubernetes the worker
pods need no ssh and the driver no API rights: a pod that dies stops beating and is a lost host
(the job re-forms without it), a pod that starts joins as a new host (the job grows, up to
``--max-np``).  With ``-np N`` alone the job is static: N workers, and the first failure ends it.

The store listens on every address (``--store-bind``, default 0.0.0.0) on ``--store-port``
(default ``FUSE_STORE_PORT``, else the system's choice), and the agents and workers reach it at
``--store-addr`` (default ``FUSE_STORE_ADDR``, else this host's name): a Service's name on
Kubernetes.  Only requests with the job's secret (``FUSE_SECRET_KEY``) are served.
"""

from __future__ import annotations

import os
import socket
import sys

from fuse.cluster.store import secret_from_env

from .elastic.driver import ElasticJob, ElasticJobError
from .elastic.launch import elastic_settings
from .store_hosts import StoreHostDiscovery, StoreHostStarter

__all__ = ["AgentDiscovery", "agent_job", "run_agents", "STALE_SECONDS"]

# An agent whose heartbeat (every 0.5 s) has not moved this long is gone: short, because a
# killed pod says nothing, and the survivors wait for the driver to drop it.
STALE_SECONDS = 2.0


class AgentDiscovery(StoreHostDiscovery):
    """The agents that joined and answer, in the order they joined."""

    def __init__(self, stale_after: float | None = None):
        from .agent import KEYS
        if stale_after is None:
            stale_after = float(os.environ.get("FUSE_AGENT_STALE_SECONDS", STALE_SECONDS))
        super().__init__(KEYS, stale_after, "the agents that joined")


def agent_job(command, elastic, env, settings, store_addr: str, store_port: int = 0,
              store_bind: str = "0.0.0.0", secret: bytes | None = None) -> ElasticJob:
    """The driver of an agent job (its store running; call ``wait_for_hosts``, then ``run``)."""
    discovery = AgentDiscovery()
    return ElasticJob(command, discovery, elastic, env, settings, secret=secret,
                      store_addr=store_addr, starter=StoreHostStarter(discovery, command),
                      hosts_join_later=True, store_bind=store_bind, store_port=store_port)


def run_agents(args, env: dict, settings) -> int:
    """fuserun's agent mode, from its flags."""
    from .usage import UsageError
    if args.hosts or args.hostfile or args.elastic_host_discovery_script:
        raise UsageError("--agents finds its hosts itself (the agents that join): give no "
                         "-H, --hostfile or --host-discovery-script")
    static = args.elastic_min_np is None and args.elastic_max_np is None
    try:
        elastic = elastic_settings(args.num_proc, args.elastic_min_np,
                                   args.num_proc if static else args.elastic_max_np,
                                   0 if static else args.elastic_reset_limit,
                                   args.elastic_blacklist_cooldown_range,
                                   args.elastic_elastic_timeout, False)
    except ValueError as err:
        raise UsageError(str(err)) from None
    addr = args.store_addr or os.environ.get("FUSE_STORE_ADDR") or socket.gethostname()
    port = args.store_port if args.store_port is not None else \
        int(os.environ.get("FUSE_STORE_PORT", "0") or 0)
    try:
        secret = secret_from_env(env)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if secret is None:
        raise UsageError("--agents needs the job's secret in FUSE_SECRET_KEY (the agents "
                         "prove it with every request)")
    job = agent_job(args.command, elastic, env, settings, addr, port, args.store_bind, secret)
    with job:
        need = elastic.start_np or elastic.min_np
        print(f"{settings.name}: waiting up to {elastic.elastic_timeout:g} s for agents with "
              f"{need} slot(s) to join at {addr}:{job.port}", file=sys.stderr, flush=True)
        try:
            job.wait_for_hosts(elastic.elastic_timeout, "(--elastic-timeout); are the worker "
                               "pods running `fuserun --agent` with this FUSE_DRIVER and secret?")
        except ElasticJobError as err:
            job.starter.finish()
            print(f"{settings.name}: error: {err}", file=sys.stderr, flush=True)
            return 1
        try:
            result = job.run()
        finally:
            job.starter.finish()
    if result.elastic_error is not None:
        print(job.describe_failure(result), file=sys.stderr, flush=True)
    return result.returncode
