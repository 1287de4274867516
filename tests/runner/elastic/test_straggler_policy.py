"""The elastic driver's straggler policy (fuse/runner/elastic/stragglers.py) on its own: what
it removes for a report, and what it refuses (below --min-np, twice in one window), against
the plan the driver would make; and the straggler settings' checks.  The end-to-end
behaviour, with real workers, is in tests/runner/elastic/test_stragglers.py."""

from __future__ import annotations

from fuse.cluster.hosts import HostSpec, assign_slots
from fuse.runner.elastic.blacklist import Blacklist
from fuse.runner.elastic.plan import make_plan
from fuse.runner.elastic.stragglers import StragglerPolicy


class Driver:
    """The driver's side of a decision: its hosts, plan and blacklist."""

    def __init__(self, hosts, min_np, window=10.0, cooldown=None):
        self.hosts = [HostSpec(h, n) for h, n in hosts]
        self.policy = StragglerPolicy(window)
        self.blacklist = Blacklist(cooldown)
        self.min_np = min_np
        self.plan = make_plan(self.hosts, {}, None)

    def usable(self):
        return [HostSpec(h.hostname, self.policy.cap(h.hostname, h.slots)) for h in self.hosts
                if h.hostname not in self.blacklist and self.policy.cap(h.hostname, h.slots)]

    def report(self, now, **evidence):
        d = self.policy.decide(evidence, self.plan, self.plan, now, self.min_np,
                               lambda: len(make_plan(self.usable(), self.plan, None)),
                               self.blacklist)
        if d.remove:
            self.plan = make_plan(self.usable(), self.plan, None)
        return d


def test_a_rank_loses_its_slot_and_the_plan_keeps_the_others():
    d = Driver([("a", 1), ("b", 1), ("c", 1), ("d", 1)], min_np=2)
    got = d.report(0.0, what="rank", rank=2, host="c", text="rank 2 is slow")
    assert got.remove and "worker c:0 (rank 2, host c)" in got.text
    assert "evidence: rank 2 is slow" in got.text
    assert sorted(d.plan) == ["a:0", "b:0", "d:0"]


def test_the_slots_above_a_removed_one_go_with_it():
    d = Driver([("a", 3), ("b", 1)], min_np=1)
    got = d.report(0.0, what="rank", rank=1, host="a")
    assert got.remove and "a:2 on the same host leave with it" in got.text
    assert sorted(d.plan) == ["a:0", "b:0"]


def test_never_below_min_np():
    d = Driver([("a", 1), ("b", 1), ("c", 1)], min_np=3)
    got = d.report(0.0, what="rank", rank=1, host="b")
    assert not got.remove and "fewer than --min-np 3" in got.text
    assert len(d.plan) == 3
    assert d.policy.cap("b", 1) == 1         # nothing was taken


def test_one_removal_per_window_then_the_host_after_a_second_offence():
    d = Driver([("a", 1), ("b", 2), ("c", 1)], min_np=1, window=10.0, cooldown=(5, 20))
    assert d.report(0.0, what="rank", rank=2, host="b").remove       # b:1
    again = d.report(4.0, what="rank", rank=1, host="b")
    assert not again.remove and "at most one is per 10 s" in again.text
    got = d.report(11.0, what="rank", rank=1, host="b")               # b:0: b's second offence
    assert got.remove and "host b is blacklisted for" in got.text
    assert "b" in d.blacklist and sorted(d.plan) == ["a:0", "c:0"]


def test_a_host_report_blacklists_the_host():
    d = Driver([("a", 2), ("b", 2)], min_np=2)
    got = d.report(0.0, what="host", rank=-1, host="b")
    assert got.remove and "host b is blacklisted" in got.text
    assert sorted(d.plan) == ["a:0", "a:1"]


def test_the_settings_are_checked_by_name():
    import pytest

    from fuse.config import Config
    with pytest.raises(ValueError, match="FUSE_STRAGGLER_POLICY='sometimes'"):
        Config.from_env({"FUSE_STRAGGLER_POLICY": "sometimes"})
    with pytest.raises(ValueError, match="FUSE_STRAGGLER_FACTOR=1.0 is out of range"):
        Config.from_env({"FUSE_STRAGGLER_FACTOR": "1"})
    cfg = Config.from_env({"FUSE_STRAGGLER_POLICY": "Remove", "FUSE_STRAGGLER_WINDOW": "3"})
    assert (cfg.straggler_policy, cfg.straggler_window) == ("remove", 3.0)


def test_init_refuses_remove_outside_an_elastic_job():
    import pytest

    import fuse
    with pytest.raises(ValueError, match="FUSE_STRAGGLER_POLICY=remove needs an elastic job"):
        fuse.init(straggler_policy="remove")
    assert not fuse.is_initialized()
