"""One framework contract.

Every framework adapter installed here hands out an ArrayOps that implements every tensor verb
the shared code calls (and its Compression casts through that same object).  That the layers of
the package import one way only is tests/package/test_architecture.py's."""

from __future__ import annotations

import pytest

from fuse.collectives.array_ops import ArrayOps
from fuse.frameworks import describe_frameworks, load_framework

VERBS = ("describe", "empty_like", "allocator", "from_numpy", "dtype_name", "is_floating", "cast")


def _loadable() -> list[str]:
    return [p.name for p in describe_frameworks() if p.loads]


@pytest.mark.parametrize("name", _loadable())
def test_each_adapter_hands_out_ops_with_every_verb(name):
    adapter = load_framework(name)
    ops = adapter.ops()
    assert isinstance(ops, ArrayOps), type(ops)
    missing = [v for v in VERBS if getattr(type(ops), v) is getattr(ArrayOps, v)]
    assert not missing, f"{name}'s {type(ops).__name__} does not implement {missing}"
    if name == "numpy":
        return
    compression = adapter.api().Compression
    assert isinstance(compression.fp16.ops, type(ops)), compression.fp16.ops


def test_torch_is_among_them_where_installed():
    pytest.importorskip("torch")
    assert "torch" in _loadable()
