"""Hosts, slots and addresses: parsing ``-H``/``--hostfile``, assigning ranks, telling local
hosts from remote ones and choosing the address workers use to reach the launcher.

Everything here is pure (no processes are started), so it is unit-tested directly.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import socket
import struct
from typing import Sequence

__all__ = [
    "HostSpec", "Slot", "parse_hosts", "parse_hostfile", "assign_slots", "is_local_host",
    "interface_addresses", "first_interface_address", "local_addresses", "store_address",
    "loopback_interface",
]


@dataclasses.dataclass(frozen=True)
class HostSpec:
    """A host and how many processes it may run."""
    hostname: str
    slots: int


@dataclasses.dataclass(frozen=True)
class Slot:
    """One worker: where it runs and its identity in the job."""
    hostname: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int

    def env(self) -> dict[str, str]:
        """The identity variables of this worker (FUSE_* and the HOROVOD_* aliases, so scripts
        that read ``HOROVOD_RANK`` directly keep working)."""
        values = {
            "RANK": self.rank, "SIZE": self.size,
            "LOCAL_RANK": self.local_rank, "LOCAL_SIZE": self.local_size,
            "CROSS_RANK": self.cross_rank, "CROSS_SIZE": self.cross_size,
            "HOSTNAME": self.hostname,
        }
        out = {}
        for name, value in values.items():
            out["FUSE_" + name] = str(value)
            out["HOROVOD_" + name] = str(value)
        return out


def _split_host_slots(item: str, where: str) -> HostSpec:
    item = item.strip()
    host, slots = item, "1"
    if item.startswith("["):  # [v6addr]:slots
        end = item.find("]")
        if end < 0:
            raise ValueError(f"{where}: unbalanced '[' in {item!r}")
        host, rest = item[1:end], item[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{where}: expected ':slots' after ']' in {item!r}")
            slots = rest[1:]
    elif item.count(":") == 1:
        host, slots = item.split(":")
    elif item.count(":") > 1:
        raise ValueError(f"{where}: {item!r}: write IPv6 addresses as [addr]:slots")
    host = host.strip()
    if not host:
        raise ValueError(f"{where}: empty host name in {item!r}")
    try:
        n = int(slots)
    except ValueError:
        raise ValueError(f"{where}: slot count of {host!r} is not an integer: {slots!r}") from None
    if n < 1:
        raise ValueError(f"{where}: host {host!r} needs at least 1 slot, got {n}")
    return HostSpec(host, n)


def parse_hosts(text: str) -> list[HostSpec]:
    """Parse ``-H host1:2,host2:4`` (a host without ``:N`` has one slot)."""
    specs = [_split_host_slots(item, "-H") for item in text.split(",") if item.strip()]
    if not specs:
        raise ValueError("-H: no hosts given")
    return _merge(specs)


def parse_hostfile_text(text: str, name: str = "hostfile") -> list[HostSpec]:
    """Parse hostfile lines: ``host slots=N``, ``host:N`` or ``host``; ``#`` starts a comment."""
    specs = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{name}:{lineno}"
        fields = line.split()
        if len(fields) == 1:
            specs.append(_split_host_slots(fields[0], where))
            continue
        host, slots = fields[0], None
        for field in fields[1:]:
            key, eq, value = field.partition("=")
            if not eq:
                raise ValueError(f"{where}: expected 'host slots=N', got {raw.strip()!r}")
            if key in ("slots", "max_slots", "max-slots"):
                if key == "slots" or slots is None:
                    slots = value
            # other key=value fields (Open MPI hostfiles have a few) are ignored
        specs.append(_split_host_slots(f"{host}:{slots}" if slots is not None else host, where))
    if not specs:
        raise ValueError(f"{name}: no hosts in the file")
    return _merge(specs)


def parse_hostfile(path: str) -> list[HostSpec]:
    with open(path, encoding="utf-8") as f:
        return parse_hostfile_text(f.read(), path)


def _merge(specs: list[HostSpec]) -> list[HostSpec]:
    """A host named twice gets the sum of its slots, at its first position."""
    order: dict[str, int] = {}
    for s in specs:
        order[s.hostname] = order.get(s.hostname, 0) + s.slots
    return [HostSpec(h, n) for h, n in order.items()]


def assign_slots(hosts: list[HostSpec], np: int) -> list[Slot]:
    """Fill hosts in order with ``np`` ranks.

    ``local_rank`` is the index of a rank on its host, ``local_size`` the number of ranks on that
    host; ``cross_rank`` is the index of the host among the hosts that have a process with the
    same local rank, and ``cross_size`` the number of such hosts (as Horovod defines them).
    """
    if np < 1:
        raise ValueError(f"the number of processes must be at least 1, got {np}")
    total = sum(h.slots for h in hosts)
    if np > total:
        listing = ",".join(f"{h.hostname}:{h.slots}" for h in hosts)
        raise ValueError(f"{np} processes requested but the hosts only have {total} slots "
                         f"({listing}); add hosts or slots, or lower -np")
    used: list[tuple[str, int]] = []  # (host, ranks placed there)
    left = np
    for h in hosts:
        if left == 0:
            break
        n = min(h.slots, left)
        used.append((h.hostname, n))
        left -= n
    slots = []
    rank = 0
    for host_index, (host, n) in enumerate(used):
        for local_rank in range(n):
            peers = [i for i, (_, m) in enumerate(used) if m > local_rank]
            slots.append(Slot(hostname=host, rank=rank, size=np, local_rank=local_rank,
                              local_size=n, cross_rank=peers.index(host_index),
                              cross_size=len(peers)))
            rank += 1
    return slots


# ---------------------------------------------------------------------------------------------
# addresses

_SIOCGIFADDR = 0x8915


def interface_addresses() -> dict[str, str]:
    """IPv4 address of every configured network interface of this machine (Linux)."""
    out = {}
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return out
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                req = struct.pack("256s", name.encode()[:15])
                res = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)
            except OSError:
                continue  # no IPv4 address on this interface
            out[name] = socket.inet_ntoa(res[20:24])
    return out


def loopback_interface() -> str:
    for name, addr in interface_addresses().items():
        if addr.startswith("127."):
            return name
    return "lo"


@functools.lru_cache(maxsize=1)
def local_addresses() -> frozenset[str]:
    addrs = {"127.0.0.1", "::1"}
    addrs.update(interface_addresses().values())
    for name in {socket.gethostname(), socket.getfqdn()}:
        try:
            for info in socket.getaddrinfo(name, None):
                addrs.add(info[4][0])
        except OSError:
            pass
    return frozenset(addrs)


@functools.lru_cache(maxsize=256)
def is_local_host(host: str) -> bool:
    """True if ``host`` names this machine (localhost, 127.*, our host name or one of our IPs)."""
    h = host.strip().lower()
    if h in ("localhost", "localhost.localdomain", "ip6-localhost", "::1") or h.startswith("127."):
        return True
    own = {socket.gethostname().lower(), socket.getfqdn().lower()}
    own.add(socket.gethostname().lower().split(".")[0])
    if h in own:
        return True
    local = local_addresses()
    if h in local:
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False  # does not resolve here; ssh will say so if it cannot reach it
    return bool(infos) and all(info[4][0] in local or info[4][0].startswith("127.")
                               for info in infos)


@functools.lru_cache(maxsize=64)
def resolve(host: str, port: int, family: int = socket.AF_UNSPEC,
            kind: int = socket.SOCK_STREAM) -> tuple:
    """``socket.getaddrinfo(host, port, family, kind)``, asked once per process (a failure is
    not kept: the next call asks again).  A worker re-forming an elastic job reaches the same
    launcher as before; asking the name service again on every re-form made it wait for a
    container platform's DNS, which stops answering for seconds while it reconfigures for a
    container that came or went (5 to 25 s seen, glibc's timeouts)."""
    return tuple(socket.getaddrinfo(host, port, family, kind))


def route_source_address(host: str, port: int = 9, family: int = socket.AF_INET) -> str:
    """Our address on the interface that routes to ``host`` (no packet is sent); OSError
    when there is none.  The one probe fuse uses (launcher, control channel, Gloo)."""
    error: OSError = OSError(f"no address for {host}")
    for fam, _, _, _, sockaddr in resolve(host, port or 1, family, socket.SOCK_DGRAM):
        try:
            with socket.socket(fam, socket.SOCK_DGRAM) as s:
                s.connect(sockaddr)
                return s.getsockname()[0]
        except OSError as err:
            error = err
    raise error


def first_interface_address(network_interfaces: Sequence[str], who: str = "") -> str:
    """The IPv4 address of the first of ``network_interfaces`` that has one here; a
    ValueError naming them and this machine's interfaces when none has (``who`` prefixes the
    message: the launcher or integration that was asked)."""
    addrs = interface_addresses()
    for nic in network_interfaces:
        if nic in addrs:
            return addrs[nic]
    raise ValueError(f"{who + ': ' if who else ''}none of the network interfaces "
                     f"{', '.join(network_interfaces)} has an IPv4 address here (this machine "
                     f"has: {', '.join(f'{k}={v}' for k, v in addrs.items()) or 'none'})")


def store_address(remote_hosts: list[str], network_interfaces: list[str] | None = None) -> str:
    """The address workers use to reach the launcher's store.

    127.0.0.1 for a job on this machine only; otherwise the address of the first of
    ``network_interfaces`` that has one, or our address on the route to the first remote host.
    """
    if not remote_hosts:
        return "127.0.0.1"
    if network_interfaces:
        return first_interface_address(network_interfaces)
    errors = []
    for host in remote_hosts:
        try:
            return route_source_address(host)
        except OSError as err:
            errors.append(f"{host}: {err}")
    raise ValueError("cannot find a route to any remote host (" + "; ".join(errors) +
                     "); give --network-interface")
