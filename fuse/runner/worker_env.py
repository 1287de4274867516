"""What a job needs when someone else starts its workers (Ray actors, Spark tasks).

``fuserun`` and :func:`fuse.run` place workers on hosts they were given; Ray and Spark place them
themselves and only then say where each one landed.  This module turns those landing places
into fuse's identities, written once for both integrations:

- :func:`slots_for_hosts`: each worker's host, in worker order -> each worker's :class:`Slot`
  (ranks contiguous per host, hosts in order of first appearance, local and cross ranks as
  ``fuserun`` assigns them);
- :class:`DriverStore`: the rendezvous store in the driver, with the job's secret;
- :func:`job_env`: what the driver tells one worker (identity, store, secret);
- :func:`worker_env`: the environment one worker runs fuse with, computed on the worker itself
  (its host's usable cores decide its thread budget);
- :func:`root_cause`: which failed rank to blame, by the errors the ranks left in the store.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Sequence

from fuse.cluster import thread_budget

from fuse.cluster.hosts import HostSpec, Slot, assign_slots, loopback_interface
from fuse.cluster.store import SECRET_ENV, KVStoreServer, make_secret, rendezvous_env

__all__ = ["slots_for_hosts", "DriverStore", "job_env", "worker_env", "root_cause"]


def slots_for_hosts(hosts: Sequence[str], hostnames: Mapping[str, str] | None = None
                    ) -> list[Slot]:
    """The slot of each worker, given the host each one runs on (``hosts[i]`` for worker i).

    Workers on one host get consecutive ranks, in worker order; hosts are numbered in the order
    their first worker appears.  ``hostnames`` maps a host key (a Ray node id, say) to the name
    the worker sees as ``FUSE_HOSTNAME`` (default: the key itself).
    """
    if not hosts:
        raise ValueError("no workers to assign ranks to")
    counts: dict[str, int] = {}
    for host in hosts:
        counts[host] = counts.get(host, 0) + 1
    by_rank = assign_slots([HostSpec(h, n) for h, n in counts.items()], len(hosts))
    queues: dict[str, list[Slot]] = {h: [] for h in counts}
    for slot in by_rank:
        queues[slot.hostname].append(slot)
    names = hostnames or {}
    return [dataclasses.replace(queues[host].pop(0), hostname=names.get(host, host))
            for host in hosts]


class DriverStore:
    """The job's rendezvous store, run by the driver that placed the workers.

    ``addr`` is where the workers reach it: 127.0.0.1 when they all run on the driver's machine
    (the store then listens on loopback only), else the driver's address on their network.
    """

    def __init__(self, addr: str = "127.0.0.1", secret: bytes | None = None):
        self.addr = addr
        self.secret = secret if secret is not None else make_secret()
        self.server = KVStoreServer(addr, 0, self.secret).start()
        self.port = self.server.port

    def job_env(self, slot: Slot, nics: Sequence[str] | None = None) -> dict[str, str]:
        """What the driver hands worker ``slot``: see :func:`job_env`."""
        return job_env(slot, self.addr, self.port, self.secret, nics)

    def close(self) -> None:
        self.server.stop()


def job_env(slot: Slot, addr: str, port: int, secret: bytes,
            nics: Sequence[str] | None = None) -> dict[str, str]:
    """A worker's identity, the store's address and the job's secret, as its variables (the
    thread budget is added on the worker, by :func:`worker_env`)."""
    env = {"PYTHONUNBUFFERED": "1", SECRET_ENV: secret.hex(), **rendezvous_env(addr, port)}
    if nics:
        env["FUSE_GLOO_IFACE"] = nics[0]
    elif addr.startswith("127."):
        env["FUSE_GLOO_IFACE"] = loopback_interface()   # a one-machine job stays on loopback
    env.update(slot.env())
    return env


def worker_env(given: Mapping[str, str], environ: Mapping[str, str] | None = None
               ) -> dict[str, str]:
    """The variables to set in a worker process: ``given`` (from :func:`job_env`)
    plus this host's thread budget for the job's workers here, as ``fuserun`` gives its
    workers.  A budget variable already set (by the user, or by Ray from ``num_cpus``) stays."""
    base = dict(os.environ if environ is None else environ)
    base.update(given)
    local_size = int(given.get("FUSE_LOCAL_SIZE", "1"))
    out = dict(given)
    out.update(thread_budget.budget_env(base, local_size, thread_budget.usable_cores()))
    return out


def root_cause(failed: Sequence[int], server: KVStoreServer) -> int:
    """Of the ranks that failed, in the order their failures were seen, the one to blame: the
    first that did not fail only because another rank did (its stored error says so, see
    ``fuse.worker.lifecycle.report_failure``), else the first."""
    for rank in failed:
        if server.get(f"errors/{rank}/consequence") is None:
            return rank
    return failed[0]
