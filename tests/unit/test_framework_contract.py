"""One framework contract, and imports that point one way.

Every framework adapter installed here hands out an ArrayOps that implements every tensor verb
the shared code calls (and its Compression casts through that same object); ``fuse.common``
never imports ``fuse.frameworks``, and the job state, process sets and collectives do not
import the start-up module that imports them."""

from __future__ import annotations

import ast
import pathlib

import pytest

import fuse
from fuse.collectives.array_ops import ArrayOps
from fuse.frameworks import describe_frameworks, load_framework

COMMON = pathlib.Path(fuse.__file__).parent / "common"
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


def _imports(path: pathlib.Path) -> set[str]:
    """Every module a file imports, at any depth (function-local imports included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_common_never_imports_frameworks():
    offenders = {p.name: sorted(m for m in _imports(p) if m.startswith("fuse.frameworks"))
                 for p in COMMON.glob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}, offenders


@pytest.mark.parametrize("module", ["state", "process_sets", "collectives", "array_ops"])
def test_lower_layers_do_not_import_basics(module):
    imported = _imports(COMMON / f"{module}.py")
    assert not {m for m in imported if m.endswith("basics")}, imported
