"""The sharded optimizer's plan (fuse.collectives.shard_plan): ownership balanced by bytes,
buckets in backward order, the same plan for the same model and size."""

import pytest

from fuse.collectives.shard_plan import plan


def test_every_parameter_owned_once_and_balanced():
    numels = [1000, 10, 1000, 10, 1000, 10, 1000, 10, 30, 3]
    p = plan(numels, [4] * 10, ["f32"] * 10, 4, bucket_bytes=10**9)
    assert sorted(p.owner) == list(range(10))
    per_rank = [sum(numels[i] for i in p.owned_by(r)) for r in range(4)]
    assert max(per_rank) - min(per_rank) <= 30, per_rank
    (bucket,) = p.buckets
    assert bucket.members == list(range(9, -1, -1))         # backward order
    assert bucket.segment == max(per_rank)
    for r, seg in enumerate(bucket.segments):
        at = 0
        for i in seg:                                       # segments packed, no overlap
            assert bucket.offsets[i] == at and p.owner[i] == r
            at += numels[i]


def test_buckets_cut_by_bytes_and_dtype():
    numels = [100, 100, 100, 100, 50]
    kinds = ["f32", "f32", "f16", "f32", "f32"]
    sizes = [4, 4, 2, 4, 4]
    p = plan(numels, sizes, kinds, 2, bucket_bytes=400)
    # backwards: 4 (200 B), 3 (600 B: cut), 2 in f16 (left open), 1 (400 B: cut),
    # 0 (400 B: cut), then what was left open
    assert [b.members for b in p.buckets] == [[4, 3], [1], [0], [2]]
    assert all(p.bucket_of[i] == b for b, bk in enumerate(p.buckets) for i in bk.members)


def test_plan_is_stable_and_depends_on_size():
    numels = [64, 64, 8, 8, 128, 128, 16, 4]
    args = (numels, [4] * 8, ["f32"] * 8)
    assert plan(*args, 2, 256) == plan(*args, 2, 256)
    two, three = plan(*args, 2, 256), plan(*args, 3, 256)
    assert {r for r in two.owner.values()} == {0, 1}
    assert {r for r in three.owner.values()} == {0, 1, 2}


def test_empty_parameters_travel_nowhere():
    p = plan([0, 5], [4, 4], ["f32", "f32"], 2, 100)
    assert p.owner[0] == 0 and 0 not in p.bucket_of
    with pytest.raises(ValueError, match="at least one rank"):
        plan([1], [4], ["f32"], 0, 100)


def test_a_dominant_parameter_balances_the_whole_model():
    # an embedding of 46 % of the bytes, last in backward order, then 12 equal layers
    numels = [4600] + [450] * 12
    p = plan(numels, [4] * 13, ["f32"] * 13, 2, bucket_bytes=4 * 2000)
    per_rank = [sum(numels[i] for i in p.owned_by(r)) for r in range(2)]
    # balancing each bucket would put the embedding on top of half the layers (about 70 %)
    assert max(per_rank) / sum(numels) <= 0.55, per_rank
    # with 4 ranks no plan owning whole parameters does better than the embedding alone
    p4 = plan(numels, [4] * 13, ["f32"] * 13, 4, bucket_bytes=4 * 2000)
    assert p4.owned_by(p4.owner[0]) == [0]


def test_a_dominant_parameter_does_not_pad_the_buckets():
    """Cut by bytes alone, the embedding's bucket (rank 0's) and the layers' buckets (rank
    1's) would each travel as 2 segments of one rank's share: about 1.7 times the model's
    elements.  Cut by what each rank owns, the segments are about equal."""
    numels = [4600] + [450] * 12
    p = plan(numels, [4] * 13, ["f32"] * 13, 2, bucket_bytes=4 * 2000)
    on_the_wire = sum(2 * b.segment for b in p.buckets)
    assert on_the_wire <= 1.1 * sum(numels), [b.segments for b in p.buckets]
    assert sorted(i for b in p.buckets for i in b.members) == list(range(13))
    for b in p.buckets:
        assert [i for seg in b.segments for i in seg] == sorted(b.members, key=lambda i: (
            p.owner[i], b.members.index(i)))


def test_a_dominant_parameter_that_may_be_split_is_cut_into_a_block_per_rank():
    """An element-wise optimizer's dominant parameter is split, so that no rank holds more
    than 1/size of the bytes + 10 %; its blocks travel in one bucket, one per rank."""
    # an embedding of more than a rank's share of the bytes: 62 % at 2 ranks, 46 % at 4
    for size, numels in ((2, [6000] + [450] * 8), (4, [4600] + [450] * 12)):
        count = len(numels)
        p = plan(numels, [4] * count, ["f32"] * count, size, 4 * 2000, [True] * count)
        assert p.split == {0}
        blocks = [k for k, piece in enumerate(p.pieces) if piece.param == 0]
        length = numels[0] // size
        assert [(p.pieces[k].start, p.pieces[k].stop) for k in blocks] == [
            (a, a + length) for a in range(0, numels[0], length)]
        assert sorted(p.owner[k] for k in blocks) == list(range(size))
        (bucket,) = {p.bucket_of[0]}
        assert set(blocks) <= set(p.buckets[bucket].members)
        per_rank = [sum(p.pieces[k].numel for k in p.owned_by(r)) for r in range(size)]
        assert max(per_rank) <= 1.1 * sum(numels) / size, (size, per_rank)
        # every element in exactly one piece
        assert sum(piece.numel for piece in p.pieces) == sum(numels)


def test_only_what_is_needed_is_split():
    # balanced without a split: nothing is (46 % at 2 ranks: the rest balances it; 4 layers
    # over 4 ranks); a parameter that may not be split stays whole
    numels = [4600] + [450] * 12
    assert plan(numels, [4] * 13, ["f32"] * 13, 2, 4 * 2000, [True] * 13).split == set()
    assert plan([1000] * 4, [4] * 4, ["f32"] * 4, 4, 10**9, [True] * 4).split == set()
    numels = [4600] + [450] * 12
    p = plan(numels, [4] * 13, ["f32"] * 13, 4, 4 * 2000, [False] + [True] * 12)
    assert 0 not in p.split
    assert p.owned_by(p.owner[0]) == [0]
    # blocks of nearly equal length when size does not divide the parameter
    p = plan([10, 1], [4, 4], ["f32"] * 2, 4, 10**9, [True, True])
    assert [(x.start, x.stop) for x in p.pieces if x.param == 0] == [
        (0, 3), (3, 6), (6, 9), (9, 10)]
