"""Host parsing, rank assignment and address choice: pure unit tests."""

import socket

import pytest

from fuse.cluster import hosts as H
from fuse.runner.launch import UsageError, host_specs


def test_parse_hosts():
    assert H.parse_hosts("a:2,b:4") == [H.HostSpec("a", 2), H.HostSpec("b", 4)]
    assert H.parse_hosts("a, b:3") == [H.HostSpec("a", 1), H.HostSpec("b", 3)]
    assert H.parse_hosts("a:1,b:1,a:2") == [H.HostSpec("a", 3), H.HostSpec("b", 1)]
    assert H.parse_hosts("[fe80::1]:2") == [H.HostSpec("fe80::1", 2)]
    for bad in ("a:x", "a:0", ":2", "", "fe80::1:2"):
        with pytest.raises(ValueError):
            H.parse_hosts(bad)


def test_parse_hostfile():
    text = """
    # cluster
    node1 slots=4
    node2:2   # trailing comment
    node3
    node4 slots=2 max_slots=8
    """
    assert H.parse_hostfile_text(text) == [
        H.HostSpec("node1", 4), H.HostSpec("node2", 2), H.HostSpec("node3", 1),
        H.HostSpec("node4", 2)]
    with pytest.raises(ValueError, match="hostfile:2"):
        H.parse_hostfile_text("a slots=1\nb slots=zero\n")
    with pytest.raises(ValueError, match="no hosts"):
        H.parse_hostfile_text("# nothing\n")


def test_hostfile_file_and_np_default(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("h1 slots=2\nh2 slots=2\n")
    specs, np = host_specs(None, str(f), None)
    assert np == 4 and [s.hostname for s in specs] == ["h1", "h2"]
    assert host_specs("x:3", None, 2)[1] == 2
    assert host_specs(None, None, 3) == ([H.HostSpec("localhost", 3)], 3)
    with pytest.raises(UsageError, match="-np"):
        host_specs(None, None, None)
    with pytest.raises(UsageError, match="hostfile"):
        host_specs(None, str(tmp_path / "missing"), 2)


def ident(s):
    return (s.hostname, s.rank, s.local_rank, s.local_size, s.cross_rank, s.cross_size)


def test_assign_even():
    slots = H.assign_slots(H.parse_hosts("a:2,b:2"), 4)
    assert [ident(s) for s in slots] == [
        ("a", 0, 0, 2, 0, 2), ("a", 1, 1, 2, 0, 2),
        ("b", 2, 0, 2, 1, 2), ("b", 3, 1, 2, 1, 2)]
    assert all(s.size == 4 for s in slots)


def test_assign_uneven_and_partial():
    slots = H.assign_slots(H.parse_hosts("a:3,b:1,c:2"), 6)
    assert [ident(s) for s in slots] == [
        ("a", 0, 0, 3, 0, 3), ("a", 1, 1, 3, 0, 2), ("a", 2, 2, 3, 0, 1),
        ("b", 3, 0, 1, 1, 3),
        ("c", 4, 0, 2, 2, 3), ("c", 5, 1, 2, 1, 2)]
    # np smaller than the slots: later hosts are left out entirely
    slots = H.assign_slots(H.parse_hosts("a:2,b:2,c:2"), 3)
    assert [ident(s) for s in slots] == [
        ("a", 0, 0, 2, 0, 2), ("a", 1, 1, 2, 0, 1), ("b", 2, 0, 1, 1, 2)]


def test_assign_too_many():
    with pytest.raises(ValueError, match="5 processes requested but the hosts only have 4"):
        H.assign_slots(H.parse_hosts("a:2,b:2"), 5)
    with pytest.raises(ValueError):
        H.assign_slots(H.parse_hosts("a:2"), 0)


def test_slot_env_has_both_spellings():
    env = H.assign_slots([H.HostSpec("n1", 2)], 2)[1].env()
    assert env["FUSE_RANK"] == env["HOROVOD_RANK"] == "1"
    assert env["FUSE_LOCAL_SIZE"] == "2" and env["FUSE_CROSS_SIZE"] == "1"
    assert env["FUSE_HOSTNAME"] == "n1"


def test_is_local_host():
    for h in ("localhost", "127.0.0.1", "127.3.2.1", socket.gethostname()):
        assert H.is_local_host(h), h
    for addr in H.interface_addresses().values():
        assert H.is_local_host(addr)
    assert not H.is_local_host("198.51.100.7")  # TEST-NET-2, never ours


def test_first_interface_address_names_who_asked_and_what_exists():
    lo = H.loopback_interface()
    assert H.first_interface_address(["no-such-nic", lo]) == H.interface_addresses()[lo]
    with pytest.raises(ValueError, match=r"^fuse\.ray: none of the network interfaces "
                                         r"no-such-nic, eth-gone has .*" + lo):
        H.first_interface_address(["no-such-nic", "eth-gone"], "fuse.ray")


def test_store_address():
    assert H.store_address([]) == "127.0.0.1"
    lo = H.loopback_interface()
    assert H.store_address(["remote"], [lo]) == H.interface_addresses()[lo]
    with pytest.raises(ValueError, match="no-such-nic"):
        H.store_address(["remote"], ["no-such-nic"])
    try:
        addr = H.route_source_address("198.51.100.7")
    except OSError:
        pytest.skip("no route to a public address on this machine")
    assert H.store_address(["198.51.100.7"]) == addr
