"""Framework-free optimizer bookkeeping and compression (fuse.common)."""

import pytest

from fuse.collectives import compression
from fuse.collectives.array_ops import ArrayOps
from fuse.collectives.grad_sync import (PassCounter, assign_groups, check_names, scaling,
                                   split_groups, wire_names)
from fuse.collectives.ops import Average, Sum


def test_split_groups():
    assert split_groups(5, 2) == [[0, 1, 2], [3, 4]]
    assert split_groups(2, 5) == [[0], [1]]
    with pytest.raises(ValueError):
        split_groups(3, 0)


def test_assign_groups():
    keys = ["a", "b", "c", "d"]
    assert assign_groups(keys) == [[0], [1], [2], [3]]
    assert assign_groups(keys, groups=2) == [[0, 1], [2, 3]]
    assert assign_groups(keys, num_groups=4) == [[0], [1], [2], [3]]
    assert assign_groups(keys, groups=[["d", "b"]], ids=lambda k: k) == [[1, 3], [0], [2]]
    with pytest.raises(ValueError):
        assign_groups(keys, groups=[["z"]], ids=lambda k: k)
    with pytest.raises(ValueError):
        assign_groups(keys, groups=[["a"], ["a"]], ids=lambda k: k)
    with pytest.raises(ValueError):
        assign_groups(keys, groups=2, num_groups=2)


def test_names_and_scaling():
    assert wire_names(["w", None]) == ["allreduce.w", "allreduce.noname.1"]
    check_names([("a", 1), ("b", 2)])
    with pytest.raises(ValueError, match="unique"):
        check_names([("a", 1), ("a", 2)])
    assert scaling(Average, 1.0) == (Average, 1.0, 1.0)
    assert scaling(Average, 4.0) == (Average, 0.25, 4.0)
    with pytest.raises(ValueError):
        scaling(Sum, 2.0)


def test_pass_counter():
    c = PassCounter(2, 2)
    assert not c.record(0) and c.record(0) and c.any_pending()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        c.record(0)
    c.reset()
    assert not c.any_pending()
    with pytest.raises(ValueError):
        c.set_passes(0)


class _ListOps(ArrayOps):
    """Tensors are (dtype, values) pairs (only the dtype verbs compression uses)."""

    def dtype_name(self, t):
        return t[0]

    def is_floating(self, t):
        return t[0].startswith("float") or t[0] == "bfloat16"

    def cast(self, t, name):
        return (name, t[1])


class _FP16(compression.FP16Compressor):
    ops = _ListOps()


def test_compression_through_a_frameworks_ops():
    wire, ctx = _FP16.compress(("float32", [1.0]))
    assert wire == ("float16", [1.0]) and ctx == "float32"
    assert _FP16.decompress(wire, ctx) == ("float32", [1.0])
    ints = ("int32", [1])
    assert _FP16.compress(ints) == (ints, None)
    half = ("float16", [1.0])
    assert _FP16.compress(half) == (half, None)
    with pytest.raises(RuntimeError):
        compression.FP16Compressor.compress(("float32", [1.0]))
