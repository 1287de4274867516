"""Which rank owns which parameter, and which gradients travel together: a sharded optimizer's
plan, written once and framework-free.

Gradients become ready in backward order, roughly the reverse of the parameters' order, so the
plan walks the parameters backwards and cuts them into buckets of about ``bucket_bytes`` (one
bucket per dtype at a time: a bucket is one flat buffer).  Each bucket travels as one
reduce-scatter of ``size`` equal segments, segment ``r`` holding the gradients rank ``r`` owns,
so ownership is first decided bucket by bucket: largest parameter first, each to the rank
holding the fewest bytes of the bucket so far, ties to the rank holding the fewest bytes
overall, then to the lowest rank.  That keeps both the padding of a bucket's segments
(bandwidth) and each rank's share of the whole model (optimizer state) close to ``1/size``
when no parameter is a large part of the model.  When one is (a transformer's embedding), that
share can grow well past ``1/size`` (a 46 % embedding: 67 % on one of 2 ranks), so if some
rank would own more than ``(1 + STATE_SLACK) / size`` of the bytes, ownership is decided over
the whole model instead (largest first, each to the least loaded rank), which bounds the share
by ``1/size`` or the largest parameter; the buckets are then cut again so that each rank's
segment of a bucket holds about ``bucket_bytes / size`` (cut by bytes alone, the dominant
parameter's bucket and every bucket of the others' parameters would be padded to one rank's
share: 1.67 times the model's bytes on the wire for that transformer on 2 ranks, 1.0 now),
which delays the buckets until the dominant parameter's gradient is ready.  Ownership is per
parameter: no plan gives a rank less than its largest parameter.  The plan depends only on
the parameters' sizes and dtypes, their order and ``size``: every rank computes the same.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable, Sequence

# how far past 1/size a rank's share of the bytes may go before the plan balances the whole
# model rather than each bucket
STATE_SLACK = 0.1


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


def _by_bucket(cut: list[list[int]], nbytes: Sequence[int], size: int) -> dict[int, int]:
    """Owners balancing each bucket, ties to the rank owning the fewest bytes overall."""
    load = [0] * size
    owner = {}
    for members in cut:
        in_bucket = [0] * size
        for i in sorted(members, key=lambda i: (-nbytes[i], i)):
            r = min(range(size), key=lambda r: (in_bucket[r], load[r], r))
            owner[i] = r
            in_bucket[r] += nbytes[i]
            load[r] += nbytes[i]
    return owner


def _over_model(cut: list[list[int]], nbytes: Sequence[int], size: int) -> dict[int, int]:
    """Owners balancing the whole model: largest first, each to the least loaded rank."""
    load = [0] * size
    owner = {}
    for i in sorted((i for members in cut for i in members), key=lambda i: (-nbytes[i], i)):
        r = min(range(size), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += nbytes[i]
    return owner


def _largest_share(owner: dict[int, int], nbytes: Sequence[int], size: int) -> float:
    load = [0] * size
    for i, r in owner.items():
        load[r] += nbytes[i]
    return max(load) / max(sum(load), 1)


def _cut(numels: Sequence[int], nbytes: Sequence[int], kinds: Sequence[Hashable],
         bucket_bytes: int, owner_of, size: int) -> list[list[int]]:
    """Buckets in backward order, one dtype at a time: a bucket is cut once each of the
    ``size`` ranks' segments (``owner_of(i)``: the rank whose segment holds ``i``) holds
    ``bucket_bytes / size``; what is left ends in one last bucket per kind."""
    quota = bucket_bytes / size
    open_: dict[Hashable, list[int]] = {}
    open_bytes: dict[Hashable, list[int]] = {}
    cut: list[list[int]] = []
    for i in reversed(range(len(numels))):
        if numels[i] == 0:
            continue
        k = kinds[i]
        open_.setdefault(k, []).append(i)
        per_rank = open_bytes.setdefault(k, [0] * size)
        per_rank[owner_of(i)] += nbytes[i]
        if min(per_rank) >= quota:
            cut.append(open_.pop(k))
            del open_bytes[k]
    cut.extend(open_.values())      # what is left, in the order the kinds appeared
    return cut


def plan(numels: Sequence[int], itemsizes: Sequence[int], kinds: Sequence[Hashable],
         size: int, bucket_bytes: int) -> ShardPlan:
    """The plan for parameters of ``numels`` elements of ``itemsizes`` bytes each, of dtype
    (or device and dtype) ``kinds``, over ``size`` ranks.  Parameters of no element are owned
    by rank 0 and travel in no bucket."""
    if size < 1:
        raise ValueError(f"a shard plan needs at least one rank, got size {size}")
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    nbytes = [n * s for n, s in zip(numels, itemsizes)]
    cut = _cut(numels, nbytes, kinds, bucket_bytes, lambda i: 0, 1)
    owner = _by_bucket(cut, nbytes, size)
    if _largest_share(owner, nbytes, size) > (1 + STATE_SLACK) / size:
        owner = _over_model(cut, nbytes, size)
        # cut again, now that the owners are known, so that every rank's segment of a bucket
        # holds about as much (the cut by bytes alone would pad most segments to the size of
        # one rank's: the dominant parameter's bucket, and the rest owned by the others)
        cut = _cut(numels, nbytes, kinds, bucket_bytes, owner.__getitem__, size)
    buckets, bucket_of = [], {}
    for b, members in enumerate(cut):
        segments = [[i for i in members if owner[i] == r] for r in range(size)]
        offsets = {}
        for seg in segments:
            at = 0
            for i in seg:
                offsets[i] = at
                bucket_of[i] = b
                at += numels[i]
        buckets.append(Bucket(members, segments, offsets,
                              max(sum(numels[i] for i in seg) for seg in segments)))
    for i, n in enumerate(numels):
        if n == 0:
            owner[i] = 0
    return ShardPlan(buckets, owner, bucket_of)
