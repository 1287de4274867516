"""One framework contract, and imports that point one way.

Every framework adapter installed here hands out an ArrayOps that implements every tensor verb
the shared code calls (and its Compression casts through that same object); each layer of the
package imports only the layers below it (FORBIDDEN), and the job state and process sets do not
import the start-up module that imports them."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

import fuse
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


PACKAGE = pathlib.Path(fuse.__file__).parent
# What each layer may not import: the launcher sits above the workers, the frameworks above the
# shared code, and fuse.cluster (shared by launcher and workers) below everything.
FORBIDDEN = {
    "cluster": ("fuse.",),
    "engine": ("fuse.frameworks", "fuse.runner", "fuse.worker", "fuse.collectives", "fuse.common"),
    "collectives": ("fuse.frameworks", "fuse.runner", "fuse.worker.lifecycle"),
    "worker": ("fuse.frameworks", "fuse.runner"),
    "common": ("fuse.frameworks", "fuse.runner"),
    "backends": ("fuse.frameworks", "fuse.runner", "fuse.worker", "fuse.collectives"),
}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_downwards_only(layer):
    offenders = {}
    for path in (PACKAGE / layer).rglob("*.py*"):
        if path.suffix not in (".py", ".pyx", ".pxd"):
            continue
        bad = sorted(m for m in _imports_any(path) if m.startswith(FORBIDDEN[layer]))
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = bad
    assert not offenders, offenders


@pytest.mark.parametrize("module", ["state", "process_sets"])
def test_job_state_does_not_import_start_up(module):
    imported = _imports(PACKAGE / "worker" / f"{module}.py")
    assert not {m for m in imported if m.endswith("lifecycle")}, imported


def _imports_any(path: pathlib.Path) -> set[str]:
    """Imports of a Python or Cython file (Cython's cimports read as text)."""
    if path.suffix == ".py":
        return _imports(path)
    text = path.read_text()
    return set(re.findall(r"^\s*(?:from|c?import)\s+(fuse[\w.]*)", text, re.M))
