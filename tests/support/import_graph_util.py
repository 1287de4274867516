"""The graph of a package's imports of itself, read from its source: which module imports which.

Every ``import`` counts, wherever it stands (at the top, inside a function, under
``if TYPE_CHECKING:``), with relative imports resolved against the importing module (``from
..runner import x`` in ``fuse/worker/a.py`` is an arrow to ``fuse.runner``, or to
``fuse.runner.x`` when that is a module).  Python files are parsed with ``ast``; Cython files
(``.pyx``, ``.pxd``) are read for their ``import`` and ``cimport`` statements, at any indent,
parenthesised lists included.  A ``.pyx`` and the ``.pxd`` beside it are one module.

An arrow points at the most specific module of the tree the statement names: ``from fuse.a
import b`` is an arrow to ``fuse.a.b`` when that is a module, else to ``fuse.a``.  Importing a
module also runs its parent packages' ``__init__``; those implicit arrows are Python's, not the
source's, and are not drawn.

:func:`circles` finds every set of modules that import each other round a loop;
:func:`climbs` finds every arrow that does not point down a list of layers."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
from typing import Iterable, Sequence

SOURCE_SUFFIXES = (".py", ".pyx", ".pxd")
# fuse/_build_info.py.in: meson writes fuse/_build_info.py from it at build time
GENERATED_SUFFIX = ".py.in"


@dataclasses.dataclass(frozen=True)
class Arrow:
    """``source`` imports ``target`` (both module names) at ``where`` (file:line)."""
    source: str
    target: str
    where: str


def module_files(root: pathlib.Path) -> dict[str, list[pathlib.Path]]:
    """Every module of the package at ``root`` (a folder named as the package), by name."""
    out: dict[str, list[pathlib.Path]] = {}
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        if path.name.endswith(GENERATED_SUFFIX):     # a module meson writes from a template
            named = path.with_name(path.name[:-len(GENERATED_SUFFIX)])
        elif path.suffix in SOURCE_SUFFIXES:
            named = path.with_suffix("")
        else:
            continue
        parts = list(named.relative_to(root.parent).parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.setdefault(".".join(parts), []).append(path)
    return out


_CYTHON_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n#]*)",
                          re.M)
_CYTHON_IMPORT = re.compile(r"^[ \t]*c?import[ \t]+([\w., \t]+)", re.M)


def _cython_statements(text: str) -> Iterable[tuple[int, int, str | None, list[str]]]:
    """(line, level, module, names) of each ``from`` statement and (line, 0, None, modules) of
    each plain ``import``/``cimport`` of a Cython file."""
    for m in _CYTHON_FROM.finditer(text):
        names = [n.split()[0] for n in m.group(3).strip("() \t").replace("\\", " ").split(",")
                 if n.strip()]
        yield (text.count("\n", 0, m.start()) + 1, len(m.group(1)), m.group(2) or None,
               names)
    for m in _CYTHON_IMPORT.finditer(text):
        modules = [n.split()[0] for n in m.group(1).split(",") if n.strip()]
        yield text.count("\n", 0, m.start()) + 1, 0, None, modules


def _python_statements(text: str) -> Iterable[tuple[int, int, str | None, list[str]]]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            yield node.lineno, node.level, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            yield node.lineno, 0, None, [a.name for a in node.names]


def _most_specific(name: str, modules: dict) -> str | None:
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def arrows(root: pathlib.Path) -> list[Arrow]:
    """Every import of the package at ``root`` of one of its own modules."""
    modules = module_files(root)
    out = []
    for module, paths in modules.items():
        for path in paths:
            text = path.read_text()
            is_package = path.stem == "__init__"
            statements = (_python_statements(text) if path.suffix == ".py"
                          else _cython_statements(text))
            where = path.relative_to(root.parent).as_posix()
            for line, level, base, names in statements:
                for target in _targets(module, is_package, level, base, names, modules):
                    if target != module:
                        out.append(Arrow(module, target, f"{where}:{line}"))
    return out


def _targets(module: str, is_package: bool, level: int, base: str | None, names: list[str],
             modules: dict) -> Iterable[str]:
    if base is None and level == 0:        # import a.b.c
        for name in names:
            target = _most_specific(name, modules)
            if target:
                yield target
        return
    if level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - (level - 1)]
        base = ".".join(package + ([base] if base else []))
    for name in names:
        full = f"{base}.{name}"
        target = full if full in modules else _most_specific(base, modules)
        if target:
            yield target


def circles(graph: Iterable[Arrow]) -> list[list[str]]:
    """Every set of two or more modules that reach each other through imports (the strongly
    connected components of the graph, by Tarjan's algorithm), each sorted."""
    succ: dict[str, set[str]] = {}
    for a in graph:
        succ.setdefault(a.source, set()).add(a.target)
        succ.setdefault(a.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(succ):
        if start in index:
            continue
        # iterative depth-first search: (node, its successors still to visit)
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            step = next(todo, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(succ[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def unit_of(module: str, layers: Sequence[Sequence[str]], root: str) -> str | None:
    """The entry of ``layers`` that ``module`` belongs to: the longest that names it or a
    package above it (the bare package name ``root`` names its ``__init__`` only)."""
    best = None
    for tier in layers:
        for unit in tier:
            if module == unit or (unit != root and module.startswith(unit + ".")):
                if best is None or len(unit) > len(best):
                    best = unit
    return best


def climbs(graph: Iterable[Arrow], layers: Sequence[Sequence[str]], root: str) -> list[Arrow]:
    """Every arrow between two units of ``layers`` (a list of tiers, top first, each a list of
    units) that does not point to a lower tier: upwards, or sideways between two units of one
    tier.  Arrows inside one unit are free (``circles`` watches them)."""
    tier = {unit: i for i, units in enumerate(layers) for unit in units}
    out = []
    for a in graph:
        source, target = unit_of(a.source, layers, root), unit_of(a.target, layers, root)
        if source is None or target is None or source == target:
            continue
        if tier[target] <= tier[source]:
            out.append(a)
    return out
