"""One framework contract, and imports that point one way.

Every registered framework adapter hands out an ArrayOps that implements every tensor verb the
shared code calls (and its Compression casts through that same object).  An adapter whose
framework is not installed here is reported as skipped, with the reason; where
FUSE_TEST_REQUIRE promises the framework (the TensorFlow and MXNet environments run this file
too: scripts/test_tensorflow.sh, scripts/test_mxnet.sh) it fails instead.  Each layer of the
package imports only the layers below it (FORBIDDEN), and the job state and process sets do not
import the start-up module that imports them."""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import needs
import numpy as np
import pytest

import fuse
from fuse.engine.protocol import DTYPE_CODES
from fuse.collectives.array_ops import ArrayOps
from fuse.frameworks import describe_frameworks, framework_names, load_framework

VERBS = ("describe", "empty_like", "allocator", "from_numpy", "dtype_name", "is_floating", "cast")


def _loaded(name: str):
    """Adapter ``name``, loaded; where it cannot load here, the test is skipped with the reason
    (failed where FUSE_TEST_REQUIRE names its framework, or when needs.py knows no feature of
    that name: an adapter registered by another package must load)."""
    __tracebackhide__ = True
    status = next(p for p in describe_frameworks() if p.name == name)
    if not status.loads:
        if name not in needs.WHY:
            pytest.fail(f"framework adapter {name!r} is registered but does not load: "
                        f"{status.reason}", pytrace=False)
        needs.missing(name, f"the {name} adapter does not load: {status.reason}")
    return load_framework(name)


@pytest.mark.parametrize("name", framework_names())
def test_each_adapter_hands_out_ops_with_every_verb(name):
    adapter = _loaded(name)
    ops = adapter.ops()
    assert isinstance(ops, ArrayOps), type(ops)
    missing = [v for v in VERBS if getattr(type(ops), v) is getattr(ArrayOps, v)]
    assert not missing, f"{name}'s {type(ops).__name__} does not implement {missing}"
    if name == "numpy":
        return
    compression = adapter.api().Compression
    assert isinstance(compression.fp16.ops, type(ops)), compression.fp16.ops


# The float32 tensor [1.5, -2, 3], made by each built-in framework itself (not through the
# adapter, whose verbs are what is checked)
MAKERS = {
    "numpy": lambda: np.array([1.5, -2.0, 3.0], np.float32),
    "torch": lambda: importlib.import_module("torch").tensor([1.5, -2.0, 3.0]),
    "tensorflow": lambda: importlib.import_module("tensorflow").constant([1.5, -2.0, 3.0]),
    "mxnet": lambda: importlib.import_module("mxnet").nd.array([1.5, -2.0, 3.0],
                                                                dtype="float32"),
}


def _values(ops, tensor, dtype) -> list:
    """What ``describe`` exposes of ``tensor``'s memory, read as ``dtype``.  MXNet runs its
    operators asynchronously and its describe expects a ready NDArray (fuse's MXNet calls
    wait for it first), so an MXNet result is waited for here too."""
    if hasattr(tensor, "wait_to_read"):
        tensor.wait_to_read()
    return np.frombuffer(ops.describe(tensor)[0], dtype).tolist()


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_each_adapters_verbs_work_on_its_frameworks_tensors(name):
    ops = _loaded(name).ops()
    tensor = MAKERS[name]()
    framework = type(tensor).__module__.split(".")[0]
    _buffer, code, shape = ops.describe(tensor)
    assert (code, shape) == (DTYPE_CODES["float32"], (3,))
    assert _values(ops, tensor, np.float32) == [1.5, -2.0, 3.0]
    assert ops.dtype_name(tensor) == "float32" and ops.is_floating(tensor)
    # compression's cast: a tensor of the same framework, with the same values
    half = ops.cast(tensor, "float16")
    assert type(half).__module__.split(".")[0] == framework, type(half)
    assert ops.dtype_name(half) == "float16"
    assert _values(ops, half, np.float16) == [1.5, -2.0, 3.0]
    whole = ops.cast(tensor, "int32")
    assert ops.dtype_name(whole) == "int32" and not ops.is_floating(whole)
    assert ops.describe(ops.empty_like(tensor))[1:] == (code, (3,))
    made, _ = ops.allocator(tensor)((2, 2))
    assert ops.describe(made)[1:] == (code, (2, 2))
    counts = ops.from_numpy(np.arange(3, dtype=np.int64), like=tensor)
    assert _values(ops, counts, np.int64) == [0, 1, 2]


def test_every_builtin_adapter_is_registered():
    assert set(MAKERS) <= set(framework_names())


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
