"""The elastic driver's pure parts: plans (who runs where in a generation), the blacklist and
its cool-down, discovery output, and the launcher's checks of the elastic flags."""

from __future__ import annotations

import math

import pytest

from fuse.runner.elastic.blacklist import Blacklist
from fuse.runner.elastic.discovery import (DiscoveryError, DiscoveryScript,
                                           parse_discovery_output)
from fuse.runner.elastic.launch import elastic_settings
from fuse.runner.elastic.plan import make_plan
from fuse.cluster.hosts import HostSpec


def _ranks(plan):
    return {wid: (s.rank, s.size, s.local_rank, s.local_size, s.cross_rank, s.cross_size)
            for wid, s in plan.items()}


def test_a_plan_fills_hosts_in_order_up_to_max_np():
    plan = make_plan([HostSpec("a", 2), HostSpec("b", 2), HostSpec("c", 2)], {}, 5)
    # cross ranks as Horovod counts them: among the hosts with a worker of that local rank
    assert _ranks(plan) == {"a:0": (0, 5, 0, 2, 0, 3), "a:1": (1, 5, 1, 2, 0, 2),
                            "b:0": (2, 5, 0, 2, 1, 3), "b:1": (3, 5, 1, 2, 1, 2),
                            "c:0": (4, 5, 0, 1, 2, 3)}


def test_running_workers_keep_the_lowest_ranks():
    first = make_plan([HostSpec("a", 1), HostSpec("b", 1), HostSpec("c", 1)], {}, None)
    # a new host listed first, a removed: the survivors keep their order, b becomes rank 0
    survivors = {wid: s for wid, s in first.items() if wid != "a:0"}
    second = make_plan([HostSpec("new", 1), HostSpec("c", 1), HostSpec("b", 1)], survivors, None)
    assert [wid for wid, s in sorted(second.items(), key=lambda kv: kv[1].rank)] == \
        ["b:0", "c:0", "new:0"]


def test_a_plan_without_slots_is_empty():
    assert make_plan([], {}, None) == {}


def test_blacklisting_is_for_good_without_a_cooldown():
    now = [0.0]
    bl = Blacklist(clock=lambda: now[0])
    assert bl.add("a") == math.inf
    now[0] = 1e9
    assert "a" in bl and bl.hosts() == ["a"] and bl.next_release() is None


def test_the_cooldown_doubles_up_to_its_cap():
    now = [0.0]
    bl = Blacklist((2, 5), clock=lambda: now[0])
    first = bl.add("a")
    assert 2 <= first < 3 and "a" in bl
    now[0] = first
    assert "a" not in bl                        # came back
    second = bl.add("a")
    assert 4 <= second <= 5
    assert bl.add("a") == 5                     # 8 s and more, capped
    assert "b" not in bl


@pytest.mark.parametrize("bad", [(0, 5), (5, 2), (1, 3601)])
def test_the_cooldown_range_is_checked(bad):
    with pytest.raises(ValueError, match="blacklist-cooldown-range"):
        Blacklist(bad)


def test_discovery_output_lines():
    text = "# a comment\nhost1:2\n\nhost2\n  host3:4  # trailing\nhost1:1\n"
    assert parse_discovery_output(text, 3) == [HostSpec("host1", 3), HostSpec("host2", 3),
                                               HostSpec("host3", 4)]
    assert parse_discovery_output("", 1) == []
    with pytest.raises(DiscoveryError, match="slot count"):
        parse_discovery_output("host:x\n", 1)


def test_a_failing_discovery_script_says_why(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 'no cloud today' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(DiscoveryError, match="exited with code 3: no cloud today"):
        DiscoveryScript(str(script)).find()
    with pytest.raises(DiscoveryError, match="cannot run"):
        DiscoveryScript(str(tmp_path / "missing.sh")).find()


def test_elastic_flags_are_checked():
    s = elastic_settings(4, None, None, None, None, 30, False)
    assert (s.min_np, s.start_np, s.max_np, s.elastic_timeout) == (4, 4, None, 30)
    s = elastic_settings(None, 2, 8, 3, [1, 9], None, True)
    assert (s.min_np, s.start_np, s.max_np, s.reset_limit, s.cooldown_range) == \
        (2, 2, 8, 3, (1, 9))
    for args, text in (((None, None, None), "needs -np or --min-np"),
                       ((1, 2, None), "-np 1 is below --min-np 2"),
                       ((4, 2, 3), "--max-np 3 is below -np 4"),
                       ((2, 0, None), "--min-np must be at least 1")):
        with pytest.raises(ValueError, match=text):
            elastic_settings(*args, None, None, None, False)
