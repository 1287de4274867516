"""Which hosts an elastic job keeps when some cannot reach others (fuse.runner.elastic.partition):
the largest set without a cut inside, ties going to hosts that reported, then to low ranks."""

from fuse.runner.elastic.partition import hosts_to_keep

HOSTS = ["a", "b", "c", "d"]
ONE = {h: 1 for h in HOSTS}


def cut(x, y):
    return frozenset((x, y))


def test_no_cut_keeps_every_host():
    assert hosts_to_keep(HOSTS, ONE, set(), set(HOSTS)) == HOSTS


def test_two_workers_that_lost_each_other_keep_the_one_with_the_lower_rank():
    assert hosts_to_keep(HOSTS[:3], ONE, {cut("b", "c")}, {"a", "b", "c"}) == ["a", "b"]


def test_a_host_cut_off_from_everyone_is_left_out_even_when_one_report_names_it():
    # rank 0 alone noticed; the silent host ties with the reporter on size but not on reports
    assert hosts_to_keep(HOSTS[:3], ONE, {cut("a", "c")}, {"a", "b"}) == ["a", "b"]


def test_the_side_with_more_slots_wins():
    slots = {"a": 1, "b": 1, "c": 4}
    assert hosts_to_keep(["a", "b", "c"], slots, {cut("a", "c"), cut("b", "c")},
                         {"a", "b", "c"}) == ["c"]


def test_a_cut_between_two_halves_keeps_the_half_with_rank_0():
    cuts = {cut(x, y) for x in "ab" for y in "cd"}
    assert hosts_to_keep(HOSTS, ONE, cuts, set(HOSTS)) == ["a", "b"]


def test_many_hosts_in_cuts_are_resolved_greedily():
    hosts = [f"h{i}" for i in range(20)]
    # every host cannot reach h19
    cuts = {cut(h, "h19") for h in hosts[:-1]}
    kept = hosts_to_keep(hosts, {h: 1 for h in hosts}, cuts, set(hosts[:-1]))
    assert kept == hosts[:-1]
