"""Which layouts the hierarchical allreduce takes (fuse.engine.hierarchy.plan_layout), from the
identities every rank reports at start-up."""

from __future__ import annotations

import pytest

from fuse.engine.hierarchy import plan_layout


def _peers(hosts: list[tuple[str, int]], mode: str = "auto", kernel=lambda host: "k") -> list[dict]:
    """Ranks filled host by host, as fuserun assigns them."""
    peers = []
    for host, n in hosts:
        for local in range(n):
            peers.append({"host": host, "kernel": kernel(host), "local_rank": local,
                          "local_size": n, "mode": mode})
    return peers


def test_two_by_two():
    peers = _peers([("a", 2), ("b", 2)])
    layouts = [plan_layout(peers, r)[0] for r in range(4)]
    assert layouts[0].hosts == ((0, 1), (2, 3))
    assert [(x.local_ranks, x.cross_ranks) for x in layouts] == [
        ([0, 1], [0, 2]), ([0, 1], [1, 3]), ([2, 3], [0, 2]), ([2, 3], [1, 3])]


def test_same_host_name_on_two_machines_is_two_hosts():
    # mpirun without fuserun leaves every host name at its default: the kernel tells them apart
    peers = _peers([("localhost", 2), ("localhost", 2)])
    for i, p in enumerate(peers):
        p["kernel"] = "k0" if i < 2 else "k1"
    layout, why = plan_layout(peers, 3)
    assert why == "" and layout.cross_ranks == [1, 3]


@pytest.mark.parametrize("hosts, reason", [
    ([("a", 4)], "one host"),
    ([("a", 1), ("b", 1), ("c", 1)], "every host runs one rank"),
    ([("a", 2), ("b", 1)], "different numbers of ranks (a: 2, b: 1)"),
])
def test_layouts_that_stay_flat_say_why(hosts, reason):
    layout, why = plan_layout(_peers(hosts), 0)
    assert layout is None and reason in why


def test_local_ranks_that_do_not_count_from_zero_stay_flat():
    peers = _peers([("a", 2), ("b", 2)])
    peers[3]["local_rank"] = 0
    layout, why = plan_layout(peers, 0)
    assert layout is None and "local ranks on b are not 0..1 (ranks [2, 3])" in why


def test_ranks_asking_for_different_modes_are_refused_by_name():
    peers = _peers([("a", 2), ("b", 2)], mode="allreduce on, allgather auto")
    peers[2]["mode"] = "allreduce auto, allgather auto"
    with pytest.raises(ValueError, match=r"_ALLGATHER differ between ranks: allreduce auto, "
                                         r"allgather auto on ranks \[2\]; allreduce on, "
                                         r"allgather auto on ranks \[0, 1, 3\]"):
        plan_layout(peers, 0)
