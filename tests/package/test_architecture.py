"""fuse's imports form no circle, and every one of them points down the layers.

The graph is read from the source (tests/support/import_graph.py): every import of a fuse
module by a fuse module, Python and Cython, at any depth in a file, relative ones resolved.
Two checks over it prove the shape: no set of modules imports itself round a loop, and every
arrow between two parts of the package points to a lower tier of LAYERS.  Each check is shown
to catch what it should on a small package made for it."""

from __future__ import annotations

import pathlib

import pytest

import fuse
from import_graph_util import Arrow, arrows, circles, climbs, module_files, unit_of

PACKAGE = pathlib.Path(fuse.__file__).parent
ROOT = PACKAGE.name

# The tiers of the package, top first.  A module belongs to the longest entry that names it or
# a package above it ("fuse" alone is the package's __init__); it may import its own entry's
# modules and those of any lower tier, never a higher tier's or another entry of its own tier.
LAYERS = (
    ("fuse.__main__",),                         # python -m fuse
    ("fuse.info",),                             # python -m fuse.info: reports on all below
    # the integrations: where workers start (Spark, Ray); Spark's Lightning estimator runs a
    # Lightning Trainer with fuse's strategy on each worker
    ("fuse.spark", "fuse.ray"),
    ("fuse.lightning",),                        # the Lightning strategy that drives workers
    # the front doors, Horovod's import paths: thin modules gathering names from below
    ("fuse", "fuse.torch", "fuse.tensorflow", "fuse.keras", "fuse.mxnet", "fuse.elastic"),
    # the framework adapters, and the launcher beside them (it starts workers, imports none)
    ("fuse.frameworks", "fuse.runner"),
    # horovod.common's names, and the collectives on NumPy arrays
    ("fuse.common", "fuse._api"),
    # a worker's life: init, shutdown, elastic re-forming (it calls collectives)
    ("fuse.worker",),
    # the collectives over a running job, and the backend plugins (found by entry point)
    ("fuse.collectives", "fuse.backends.gloo", "fuse.backends.mpi", "fuse.backends.nccl"),
    # the running job as this process knows it: engine, configuration, process sets
    ("fuse.job",),
    ("fuse._core",),                            # the engine's front
    ("fuse.engine",),                           # the engine's parts
    ("fuse.backends",),                         # the backend contract and registry
    ("fuse.cluster",),                          # hosts, the store, thread budgets
    ("fuse.config", "fuse.ignored_knobs", "fuse.exceptions", "fuse._log", "fuse._build_info"),
)


@pytest.fixture(scope="module")
def graph() -> list[Arrow]:
    return arrows(PACKAGE)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in module_files(PACKAGE) if unit_of(m, LAYERS, ROOT) is None)
    assert not unplaced, f"modules in no entry of LAYERS (place them): {unplaced}"


def test_the_graph_is_read_whole(graph):
    """Imports in functions, Cython cimports and relative imports are all in the graph."""
    seen = {(a.source, a.target) for a in graph}
    assert ("fuse._core", "fuse.engine.request") in seen            # a cimport in a .pyx
    assert ("fuse.engine.segments", "fuse._log") in seen            # inside a cdef function
    assert ("fuse", "fuse.runner") in seen                          # inside fuse.run


def test_no_import_circle(graph):
    found = circles(graph)
    assert not found, "modules that import each other round a loop:\n" + "\n".join(
        "  " + " <-> ".join(c) + "\n" + "\n".join(
            f"      {a.source} -> {a.target} ({a.where})" for a in graph
            if a.source in c and a.target in c) for c in found)


def test_every_arrow_points_down_the_layers(graph):
    found = climbs(graph, LAYERS, ROOT)
    assert not found, "imports that do not point down LAYERS:\n" + "\n".join(
        f"  {a.where}: {a.source} -> {a.target}" for a in found)


def _package(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_find_what_they_should(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "top/__init__.py": "from pkg.low import a\n",                   # down: fine
        "top/t.py": "from pkg import side\n",                            # sideways
        "side.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from ..top import t\n",               # up, relative
        "low/b.py": "from . import c\n",
        "low/c.pyx": "cdef g():\n    from pkg.low import (\n        b,\n    )\n",  # circle
        "low/d.pxd": "from pkg.top.t cimport *\n",                       # up, cimport
        "low/e.py": "if False:\n    import pkg.low.a\n",                 # down the tier: fine
    })
    layers = (("pkg", "pkg.top", "pkg.side"), ("pkg.low",))
    graph = arrows(root)
    assert circles(graph) == [["pkg.low.b", "pkg.low.c"]]
    assert sorted((a.source, a.target, a.where) for a in climbs(graph, layers, "pkg")) == [
        ("pkg.low.a", "pkg.top.t", "pkg/low/a.py:2"),
        ("pkg.low.d", "pkg.top.t", "pkg/low/d.pxd:1"),
        ("pkg.top.t", "pkg.side", "pkg/top/t.py:1"),
    ]
    assert unit_of("pkg.low.a", layers, "pkg") == "pkg.low"
    assert unit_of("pkg.other", layers, "pkg") is None     # "pkg" names only its __init__
