"""``fuserun``'s elastic mode: from the flags to an :class:`~.driver.ElasticJob`."""

from __future__ import annotations

import os
import sys

from fuse.cluster import hosts as _hosts
from ..settings import seconds_setting
from .driver import ElasticJob, ElasticJobError, ElasticSettings, discovery_from


def elastic_timeout(value: float | None, environ=os.environ) -> float:
    return seconds_setting(value, ("FUSE_ELASTIC_TIMEOUT", "HOROVOD_ELASTIC_TIMEOUT"), 600.0,
                           environ)


def elastic_settings(np: int | None, min_np: int | None, max_np: int | None,
                     reset_limit: int | None, cooldown_range, timeout: float | None,
                     discovery: bool) -> ElasticSettings:
    """Check the numbers as horovodrun does; ValueError says what is wrong."""
    if min_np is None and np is None:
        raise ValueError("elastic mode needs -np or --min-np")
    min_np = min_np if min_np is not None else np
    np = np if np is not None else min_np
    if min_np < 1:
        raise ValueError(f"--min-np must be at least 1, got {min_np}")
    if np < min_np:
        raise ValueError(f"-np {np} is below --min-np {min_np}")
    if max_np is not None and max_np < np:
        raise ValueError(f"--max-np {max_np} is below -np {np}")
    if reset_limit is not None and reset_limit < 0:
        raise ValueError(f"--reset-limit must be at least 0, got {reset_limit}")
    return ElasticSettings(min_np=min_np, max_np=max_np, start_np=np, reset_limit=reset_limit,
                           cooldown_range=tuple(cooldown_range) if cooldown_range else None,
                           elastic_timeout=elastic_timeout(timeout))


def fixed_hosts(hosts: str | None, hostfile: str | None, np: int | None,
                max_np: int | None) -> list[_hosts.HostSpec]:
    if hosts:
        return _hosts.parse_hosts(hosts)
    if hostfile:
        return _hosts.parse_hostfile(hostfile)
    return [_hosts.HostSpec("localhost", max_np or np or 1)]


def run_elastic(args, env: dict, settings) -> int:
    from ..usage import UsageError
    script = args.elastic_host_discovery_script
    if script and (args.hosts or args.hostfile):
        raise UsageError("give --host-discovery-script or -H/--hostfile, not both")
    try:
        elastic = elastic_settings(args.num_proc, args.elastic_min_np, args.elastic_max_np,
                                   args.elastic_reset_limit,
                                   args.elastic_blacklist_cooldown_range,
                                   args.elastic_elastic_timeout, bool(script))
        specs = None if script else fixed_hosts(args.hosts, args.hostfile, args.num_proc,
                                                args.elastic_max_np)
    except OSError as err:
        raise UsageError(f"--hostfile {args.hostfile}: {err.strerror or err}") from None
    except ValueError as err:
        raise UsageError(str(err)) from None
    discovery = discovery_from(specs, script, args.elastic_slots_per_host)
    try:
        job = ElasticJob(args.command, discovery, elastic, env, settings)
    except ElasticJobError as err:
        print(f"{settings.name}: error: {err}", file=sys.stderr, flush=True)
        return 1
    except ValueError as err:
        raise UsageError(str(err)) from None
    with job:
        result = job.run()
    if result.elastic_error is not None:
        print(job.describe_failure(result), file=sys.stderr, flush=True)
    return result.returncode
