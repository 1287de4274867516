"""Which hosts an elastic job keeps when its workers cannot all reach each other.

After a failed collective every worker reports the ranks it found unanswering (its control
connection's keep-alive gave up) and the ranks whose hosts it cannot reach
(fuse.worker.peer_probe).  Each report is a *cut*: a pair of hosts that cannot talk.  The job
goes on with the largest set of hosts (by slots) that has no cut inside it; the rest are left
out (blacklisted, with the usual cool-down).  Among sets of equal size the one with more hosts
that reported wins (a host that reported reaches the launcher's store; one that did not may be
cut off from everyone or down), then the one holding the lowest ranks.

Hosts in no cut are in every best set; only the hosts in cuts are searched, exhaustively up to
``EXACT_LIMIT`` of them (a partition involves a few hosts), greedily beyond.
"""

from __future__ import annotations

import itertools

EXACT_LIMIT = 12


def hosts_to_keep(hosts: list[str], slots: dict[str, int], cuts: set[frozenset],
                  reporters: set[str]) -> list[str]:
    """The hosts to go on with.  ``hosts`` in rank order (the first holds rank 0), ``slots``
    each host's workers, ``cuts`` pairs of hosts that cannot reach each other, ``reporters``
    the hosts whose workers reported."""
    cuts = {c for c in cuts if len(c) == 2 and c <= set(hosts)}
    involved = [h for h in hosts if any(h in c for c in cuts)]
    free = [h for h in hosts if h not in involved]
    if len(involved) <= EXACT_LIMIT:
        best = _best_exact(involved, slots, cuts, reporters, hosts)
    else:
        best = _best_greedy(involved, cuts, reporters, hosts)
    keep = set(free) | set(best)
    return [h for h in hosts if h in keep]


def _score(chosen: tuple, slots, reporters, order) -> tuple:
    position = {h: i for i, h in enumerate(order)}
    return (sum(slots.get(h, 1) for h in chosen), sum(h in reporters for h in chosen),
            [-position[h] for h in sorted(chosen, key=position.get)])


def _compatible(chosen: tuple, cuts: set[frozenset]) -> bool:
    return not any(frozenset(pair) in cuts for pair in itertools.combinations(chosen, 2))


def _best_exact(involved, slots, cuts, reporters, order) -> tuple:
    best, best_score = (), None
    for n in range(len(involved), 0, -1):
        for chosen in itertools.combinations(involved, n):
            if not _compatible(chosen, cuts):
                continue
            score = _score(chosen, slots, reporters, order)
            if best_score is None or score > best_score:
                best, best_score = chosen, score
    return best


def _best_greedy(involved, cuts, reporters, order) -> tuple:
    """Leave out, one at a time, the host in the most cuts (a silent one before one that
    reported, then the one with the highest ranks) until no cut is left."""
    position = {h: i for i, h in enumerate(order)}
    left = set(involved)
    while True:
        live = [c for c in cuts if c <= left]
        if not live:
            return tuple(left)
        count = {h: sum(h in c for c in live) for h in left}
        worst = max(left, key=lambda h: (count[h], h not in reporters, position[h]))
        left.discard(worst)
