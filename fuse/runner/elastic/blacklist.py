"""Hosts whose workers failed, kept out of the job for a while (or for good).

Without a cool-down range a host stays out for the rest of the job, as in Horovod.  With
``--blacklist-cooldown-range LOW HIGH`` its n-th blacklisting keeps it out for
``LOW * 2**(n-1)`` seconds plus up to a second of jitter, capped at ``HIGH``; then it may
come back if discovery still lists it.
"""

from __future__ import annotations

import random
import time


class Blacklist:
    def __init__(self, cooldown_range: tuple[int, int] | None = None, clock=time.monotonic):
        if cooldown_range is not None:
            low, high = cooldown_range
            if not 1 <= low <= high <= 3600:
                raise ValueError(f"--blacklist-cooldown-range {low} {high}: need "
                                 "1 <= MIN <= MAX <= 3600 seconds")
        self._range = cooldown_range
        self._clock = clock
        self._until: dict[str, float] = {}     # host -> when it may come back (inf: never)
        self._count: dict[str, int] = {}

    def add(self, host: str) -> float:
        """Blacklist ``host``; returns how many seconds it stays out (inf: for good)."""
        n = self._count[host] = self._count.get(host, 0) + 1
        if self._range is None:
            seconds = float("inf")
        else:
            low, high = self._range
            seconds = min(low * 2 ** (n - 1) + random.random(), high)
        self._until[host] = self._clock() + seconds
        return seconds

    def __contains__(self, host: str) -> bool:
        until = self._until.get(host)
        return until is not None and self._clock() < until

    def hosts(self) -> list[str]:
        return [h for h in self._until if h in self]

    def next_release(self) -> float | None:
        """When the next blacklisted host comes back (monotonic time), or None."""
        now = self._clock()
        times = [t for t in self._until.values() if now < t < float("inf")]
        return min(times) if times else None
