"""Which rank owns which parameter, and which gradients travel together: a sharded optimizer's
plan, written once and framework-free.

Gradients become ready in backward order, roughly the reverse of the parameters' order, so the
plan walks the parameters backwards and cuts them into buckets of about ``bucket_bytes`` (one
bucket per dtype at a time: a bucket is one flat buffer).  Each bucket travels as one
reduce-scatter of ``size`` equal segments, segment ``r`` holding the gradients rank ``r`` owns,
so ownership is decided bucket by bucket: largest parameter first, each to the rank holding the
fewest bytes of the bucket so far, ties to the rank holding the fewest bytes overall, then to
the lowest rank.  That keeps both the padding of a bucket's segments (bandwidth) and each
rank's share of the whole model (optimizer state) close to ``1/size``.  The plan depends only
on the parameters' sizes and dtypes, their order and ``size``: every rank computes the same.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable, Sequence


@dataclasses.dataclass
class Bucket:
    """Parameters (indices, in backward order) that travel as one flat buffer of
    ``size * segment`` elements; ``segments[r]`` are rank ``r``'s, in their order in the
    buffer, ``offsets[i]`` the element offset of parameter ``i`` inside its segment."""

    members: list[int]
    segments: list[list[int]]
    offsets: dict[int, int]
    segment: int        # elements per segment (the largest rank's share, the others padded)


@dataclasses.dataclass
class ShardPlan:
    buckets: list[Bucket]
    owner: dict[int, int]       # parameter index -> rank
    bucket_of: dict[int, int]   # parameter index -> bucket index

    def owned_by(self, rank: int) -> list[int]:
        return sorted(i for i, r in self.owner.items() if r == rank)


def _assign(members: list[int], numels: Sequence[int], itemsize: int, size: int,
            load: list[int]) -> list[list[int]]:
    """Split one bucket's members among ``size`` ranks (``load``: bytes owned so far by
    each rank, updated)."""
    in_bucket = [0] * size
    segments: list[list[int]] = [[] for _ in range(size)]
    for i in sorted(members, key=lambda i: (-numels[i], members.index(i))):
        r = min(range(size), key=lambda r: (in_bucket[r], load[r], r))
        segments[r].append(i)
        in_bucket[r] += numels[i]
        load[r] += numels[i] * itemsize
    order = {i: k for k, i in enumerate(members)}
    return [sorted(seg, key=order.__getitem__) for seg in segments]


def plan(numels: Sequence[int], itemsizes: Sequence[int], kinds: Sequence[Hashable],
         size: int, bucket_bytes: int) -> ShardPlan:
    """The plan for parameters of ``numels`` elements of ``itemsizes`` bytes each, of dtype
    (or device and dtype) ``kinds``, over ``size`` ranks.  Parameters of no element are owned
    by rank 0 and travel in no bucket."""
    if size < 1:
        raise ValueError(f"a shard plan needs at least one rank, got size {size}")
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    open_: dict[Hashable, list[int]] = {}
    open_bytes: dict[Hashable, int] = {}
    cut: list[list[int]] = []
    for i in reversed(range(len(numels))):
        if numels[i] == 0:
            continue
        k = kinds[i]
        open_.setdefault(k, []).append(i)
        open_bytes[k] = open_bytes.get(k, 0) + numels[i] * itemsizes[i]
        if open_bytes[k] >= bucket_bytes:
            cut.append(open_.pop(k))
            del open_bytes[k]
    cut.extend(open_.values())      # what is left, in the order the kinds appeared
    load = [0] * size
    buckets, owner, bucket_of = [], {}, {}
    for b, members in enumerate(cut):
        segments = _assign(members, numels, itemsizes[members[0]], size, load)
        offsets = {}
        for r, seg in enumerate(segments):
            at = 0
            for i in seg:
                offsets[i] = at
                owner[i] = r
                bucket_of[i] = b
                at += numels[i]
        buckets.append(Bucket(members, segments, offsets,
                              max(sum(numels[i] for i in seg) for seg in segments)))
    for i, n in enumerate(numels):
        if n == 0:
            owner[i] = 0
    return ShardPlan(buckets, owner, bucket_of)
