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
which delays the buckets until the dominant parameter's gradient is ready.  That bounds a
rank's share by its largest parameter, so the plan splits the parameters it may split (an
element-wise optimizer steps each element on its own: a block of a parameter is as good as
the whole) into ``size`` blocks of equal length, one piece each: from the start those larger
than ``1/size`` of the bytes (no rank could own one whole within its share), then, largest
first, more while some rank would still own more than ``(1 + STATE_SLACK) / size``.  A split
parameter's blocks land on different ranks of the same bucket, so its bucket stays even.  The plan depends only on
the parameters' sizes, dtypes and splittability, their order and ``size``: every rank
computes the same.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable, Sequence

# how far past 1/size a rank's share of the bytes may go before the plan balances the whole
# model rather than each bucket
STATE_SLACK = 0.1


@dataclasses.dataclass(frozen=True)
class Piece:
    """Elements ``start:stop`` of parameter ``param`` (flattened): what one rank owns.  A
    parameter is one piece, or ``size`` blocks when it was split."""

    param: int
    start: int
    stop: int

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass
class Bucket:
    """Pieces (indices into ``ShardPlan.pieces``, in backward order) that travel as one flat
    buffer of ``size * segment`` elements; ``segments[r]`` are rank ``r``'s, in their order in
    the buffer, ``offsets[k]`` the element offset of piece ``k`` inside its segment.  The
    blocks of a split parameter are all in one bucket."""

    members: list[int]
    segments: list[list[int]]
    offsets: dict[int, int]
    segment: int        # elements per segment (the largest rank's share, the others padded)


@dataclasses.dataclass
class ShardPlan:
    buckets: list[Bucket]
    pieces: list[Piece]         # in the parameters' order, a split one's blocks in a row
    owner: dict[int, int]       # piece index -> rank
    bucket_of: dict[int, int]   # parameter index -> bucket index
    split: set[int]             # the parameters cut into blocks

    def owned_by(self, rank: int) -> list[int]:
        """The pieces ``rank`` owns, in order."""
        return sorted(k for k, r in self.owner.items() if r == rank)


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


def _cut(pieces: Sequence[Piece], nbytes: Sequence[int], kinds: Sequence[Hashable],
         bucket_bytes: int, owner_of, size: int) -> list[list[int]]:
    """Buckets of piece indices in backward order, one dtype at a time: a bucket is cut, at a
    parameter's end (its blocks travel together), once each of the ``size`` ranks' segments
    (``owner_of(k)``: the rank whose segment holds piece ``k``) holds ``bucket_bytes /
    size``; what is left ends in one last bucket per kind."""
    quota = bucket_bytes / size
    open_: dict[Hashable, list[int]] = {}
    open_bytes: dict[Hashable, list[int]] = {}
    cut: list[list[int]] = []
    for k in reversed(range(len(pieces))):
        piece = pieces[k]
        if piece.numel == 0:
            continue
        kind = kinds[piece.param]
        open_.setdefault(kind, []).append(k)
        per_rank = open_bytes.setdefault(kind, [0] * size)
        per_rank[owner_of(k)] += nbytes[k]
        if piece.start == 0 and min(per_rank) >= quota:
            cut.append(open_.pop(kind))
            del open_bytes[kind]
    cut.extend(open_.values())      # what is left, in the order the kinds appeared
    return cut


def _pieces(numels: Sequence[int], split: set[int], size: int) -> list[Piece]:
    """Every parameter as one piece, or as ``size`` blocks of (nearly) equal length."""
    pieces = []
    for i, n in enumerate(numels):
        if i not in split:
            pieces.append(Piece(i, 0, n))
            continue
        step = -(-n // size)
        pieces.extend(Piece(i, a, min(a + step, n)) for a in range(0, n, step))
    return pieces


def plan(numels: Sequence[int], itemsizes: Sequence[int], kinds: Sequence[Hashable],
         size: int, bucket_bytes: int, splittable: Sequence[bool] | None = None) -> ShardPlan:
    """The plan for parameters of ``numels`` elements of ``itemsizes`` bytes each, of dtype
    (or device and dtype) ``kinds``, over ``size`` ranks.  ``splittable[i]``: parameter ``i``
    may be cut into blocks owned by different ranks (None: none may).  Parameters of no
    element are owned by rank 0 and travel in no bucket."""
    if size < 1:
        raise ValueError(f"a shard plan needs at least one rank, got size {size}")
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    splittable = splittable or [False] * len(numels)
    total = sum(n * s for n, s in zip(numels, itemsizes))
    # what no rank can own whole and stay near its share is split from the start
    split = {i for i, n in enumerate(numels)
             if splittable[i] and n >= size and n * itemsizes[i] > total / size}
    bound = (1 + STATE_SLACK) / size
    while True:
        pieces = _pieces(numels, split, size)
        nbytes = [p.numel * itemsizes[p.param] for p in pieces]
        cut = _cut(pieces, nbytes, kinds, bucket_bytes, lambda k: 0, 1)
        owner = _by_bucket(cut, nbytes, size)
        if _largest_share(owner, nbytes, size) <= bound:
            break
        owner = _over_model(cut, nbytes, size)
        candidates = [i for i, n in enumerate(numels)
                      if splittable[i] and i not in split and n >= size]
        if _largest_share(owner, nbytes, size) <= bound or not candidates:
            # cut again, now that the owners are known, so that every rank's segment of a
            # bucket holds about as much (the cut by bytes alone would pad most segments to
            # the size of one rank's: the dominant parameter's bucket, and the rest owned by
            # the others)
            cut = _cut(pieces, nbytes, kinds, bucket_bytes, owner.__getitem__, size)
            break
        # the largest parameter not yet split, into blocks
        split.add(max(candidates, key=lambda i: (numels[i] * itemsizes[i], -i)))
    buckets, bucket_of = [], {}
    for b, members in enumerate(cut):
        segments = [[k for k in members if owner[k] == r] for r in range(size)]
        offsets = {}
        for seg in segments:
            at = 0
            for k in seg:
                offsets[k] = at
                bucket_of[pieces[k].param] = b
                at += pieces[k].numel
        buckets.append(Bucket(members, segments, offsets,
                              max(sum(pieces[k].numel for k in seg) for seg in segments)))
    for k, piece in enumerate(pieces):
        if piece.numel == 0:
            owner[k] = 0
    return ShardPlan(buckets, pieces, owner, bucket_of, split)
