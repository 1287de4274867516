"""The fuse agent: a host that joins a driver's store and runs the workers the driver gives it.

``python -m fuse.runner.agent`` (or ``fuserun --agent``) is what a worker pod runs on Kubernetes
instead of sshd: it needs no ssh, no keys and no Kubernetes API rights.  It reaches the driver
(``fuserun --agents ...``) at ``--driver HOST:PORT`` (default ``FUSE_DRIVER``), proves the job's
secret (``FUSE_SECRET_KEY``, from the chart's Secret) with every request, announces itself with
its slots (``--slots``, default ``FUSE_AGENT_SLOTS`` or 1), and then serves the driver
(:class:`fuse.runner.store_hosts.HostLoop`): each worker it is given runs the driver's command
with the driver's variables, its output goes to the agent's own (the pod's log) with the
``[rank]<stream>:`` prefix.  With ``FUSE_AGENT_PRELOAD`` set (fuse's image sets it), a zygote
(:mod:`fuse.runner.zygote`) imports those modules first, the agent announces itself only once
they are imported, and ranks whose command is this Python fork from the zygote.

Every way it ends is bounded and said in one line:

* the driver cannot be reached for ``--connect-timeout`` seconds (default
  ``FUSE_AGENT_CONNECT_TIMEOUT`` or 300): exit 1;
* the driver refuses it (its secret is not the job's): exit 2 at once;
* the driver goes away while it serves (its requests fail for the store client's retries,
  about 10 s): its workers are killed, exit 1;
* the driver says the job is over: exit 0; SIGTERM (the pod is deleted): its workers are
  killed, exit 143.

Each start of an agent is a new host to the driver (``<hostname>-<6 hex digits>``): a pod that
comes back under its old name is not taken for the one that failed.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import sys
import time
from typing import Mapping, Sequence

from fuse.cluster.store import HTTPStore, secret_from_env

from .rank_process import ForkedRank, RankProcess
from .store_hosts import HostKeys, HostLoop, RunningWorker
from .worker_env import worker_env
from .zygote import Zygote, preload_modules, python_command

__all__ = ["KEYS", "main", "parse_driver"]

KEYS = HostKeys("agents/")
PROG = "fuse agent"
# How long the agent waits for its zygote's imports before it joins without one.
_ZYGOTE_READY_SECONDS = 120.0


class AgentError(Exception):
    """Why the agent stops (its message is the one line it prints); ``code`` its exit code."""

    def __init__(self, text: str, code: int = 1):
        super().__init__(text)
        self.code = code


def parse_driver(text: str) -> tuple[str, int]:
    host, sep, port = (text or "").strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise AgentError(f"--driver / FUSE_DRIVER must be HOST:PORT (the driver's store), "
                         f"got {text!r}", 2)
    return host.strip("[]"), int(port)


def _positive(name: str, text: str, kind=int):
    try:
        value = kind(text)
    except ValueError:
        raise AgentError(f"{name} must be a number, got {text!r}", 2) from None
    if value <= 0:
        raise AgentError(f"{name} must be positive, got {text!r}", 2)
    return value


ADDR_ENV, PORT_ENV = "FUSE_GLOO_RENDEZVOUS_ADDR", "FUSE_GLOO_RENDEZVOUS_PORT"


def _resolve_store_address(env: dict) -> None:
    """Give the rank the driver's address as this agent reached it (an IP): a rank started
    while pods come and go would otherwise ask the cluster's DNS, which answers slowly just
    then (see fuse.cluster.hosts.resolve)."""
    from fuse.cluster.hosts import resolve
    addr, port = env.get(ADDR_ENV, ""), env.get(PORT_ENV, "")
    if not addr or not port.isdigit():
        return
    try:
        found = [info[4][0] for info in resolve(addr, int(port))]   # (the agent's own lookup)
    except OSError:
        return      # the rank resolves the name itself
    ipv4 = [a for a in found if ":" not in a]
    if found:
        env[ADDR_ENV] = (ipv4 or found)[0]


def _launcher(environ: Mapping[str, str], zygote: Zygote | None = None):
    def launch(request: dict, n: int) -> RunningWorker:
        given = request["env"]
        argv = request.get("argv")
        if not argv:
            raise AgentError("the driver asked for a worker without a command", 1)
        env = dict(environ)
        env.update(worker_env(given, env))
        _resolve_store_address(env)
        rank = int(given.get("FUSE_RANK", "-1"))
        args = python_command(argv, env) if zygote is not None and zygote.ready else None
        how = "forked from the zygote" if args else "a new process"
        print(f"{PROG}: starting rank {rank} (worker {n}, {how}): {' '.join(argv)}",
              file=sys.stderr, flush=True)
        if args:
            try:
                return ForkedRank(*zygote.fork(args, env, os.getcwd()), rank)
            except OSError as err:
                print(f"{PROG}: {err}; starting rank {rank} as a new process", file=sys.stderr,
                      flush=True)
                zygote.close()
        try:
            return RankProcess(argv, env, rank)
        except OSError as err:
            return _Failed(f"could not start {argv[0]}: {err.strerror or err}")
    return launch


class _Failed(RunningWorker):
    """A worker that could not be started: it ended at once, as a shell says (127)."""

    def __init__(self, why: str):
        self.why = why

    def poll(self):
        return 127

    def kill(self) -> None:
        pass

    def finish(self):
        return 127, [self.why]


def connect(store: HTTPStore, loop: HostLoop, timeout: float, before_announce=None) -> None:
    """Announce ``loop``'s host to the driver, retrying until ``timeout`` seconds passed.
    ``before_announce()`` runs once the driver answered (and accepted the secret), just before
    the announcement."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            store.try_get(KEYS.done)     # reachable, and the secret accepted
            if before_announce is not None:
                before_announce()
                before_announce = None
            loop.announce()
            return
        except PermissionError as err:
            raise AgentError(f"the driver at {store.addr}:{store.port} refused this agent: "
                             f"{err}", 2) from None
        except (ConnectionError, OSError) as err:
            last = err
        if time.monotonic() >= deadline:
            raise AgentError(f"could not reach the driver at {store.addr}:{store.port} within "
                             f"{timeout:g} s (--connect-timeout / FUSE_AGENT_CONNECT_TIMEOUT): "
                             f"{last}")
        time.sleep(1.0)


def run(driver: str, slots: int, connect_timeout: float, name: str | None = None,
        environ: Mapping[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    host, port = parse_driver(driver)
    secret = secret_from_env(environ)
    if secret is None:
        raise AgentError("no job secret: set FUSE_SECRET_KEY (the chart takes it from the "
                         "job's Secret)", 2)
    store = HTTPStore(host, port, secret=secret, timeout=10.0)
    me = f"{name or socket.gethostname()}-{secrets.token_hex(3)}"
    modules = preload_modules(environ)
    zygote = Zygote.start(modules) if modules else None     # imports while we connect
    loop = HostLoop(store, KEYS, me, {"hostname": socket.gethostname(), "slots": slots},
                    _launcher(environ, zygote))

    def warm() -> None:
        """Join only once the zygote imported its modules: the job then takes this host in
        when its ranks can start at once, not while they would still be importing."""
        if zygote is None:
            return
        began = time.monotonic()
        if zygote.wait_ready(_ZYGOTE_READY_SECONDS):
            print(f"{PROG}: imported {', '.join(modules)} in "
                  f"{time.monotonic() - began:.1f} s more (ranks fork from it)",
                  file=sys.stderr, flush=True)
        else:
            print(f"{PROG}: no zygote ({zygote.why_not}); ranks start as new processes",
                  file=sys.stderr, flush=True)

    try:
        connect(store, loop, connect_timeout, warm)
        print(f"{PROG}: {me} joined the driver at {host}:{port} with {slots} slot(s)",
              file=sys.stderr, flush=True)
        loop.run()
    except PermissionError as err:
        raise AgentError(f"the driver at {host}:{port} refused this agent: {err}", 2) from None
    except (ConnectionError, OSError) as err:
        raise AgentError(f"lost the driver at {host}:{port} ({err}); stopped its workers") \
            from None
    finally:
        if zygote is not None:
            zygote.close()
    print(f"{PROG}: the job is over", file=sys.stderr, flush=True)
    return 0


def make_parser(env: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    """The agent's parser, its defaults taken from ``env`` (the docs pass an empty one)."""
    p = argparse.ArgumentParser(prog="fuserun --agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--driver", default=env.get("FUSE_DRIVER", ""),
                   help="HOST:PORT of the driver's store (default FUSE_DRIVER)")
    p.add_argument("--slots", default=env.get("FUSE_AGENT_SLOTS", "1"),
                   help="workers this agent runs (default FUSE_AGENT_SLOTS or 1)")
    p.add_argument("--connect-timeout", default=env.get("FUSE_AGENT_CONNECT_TIMEOUT", "300"),
                   help="seconds to keep trying to reach the driver (default "
                        "FUSE_AGENT_CONNECT_TIMEOUT or 300)")
    p.add_argument("--name", default=env.get("FUSE_AGENT_NAME") or None,
                   help="how the agent names itself to the driver (default: the host name)")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    return make_parser().parse_args(list(argv))


def _on_term(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_term)     # the loop's finally stops the workers
    try:
        rc = run(args.driver, _positive("--slots", args.slots),
                 _positive("--connect-timeout", args.connect_timeout, float), args.name)
    except AgentError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        rc = err.code
    except KeyboardInterrupt:
        rc = 130
    sys.exit(rc)


if __name__ == "__main__":
    main()
