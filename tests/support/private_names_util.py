"""Reads of another module's private names, found in a package's source.

A leading underscore says "only this module uses it": a read from elsewhere is an API nobody
promised, which a change inside that module breaks without warning.  Two kinds are found:

* a private name of another module of the package: ``from fuse.x import _name``,
  ``x._name`` or ``getattr(x, "_name")`` on an imported module (also through
  ``sys.modules``);
* a private attribute of another module's objects: ``engine._add_shared_region(...)`` in
  ``fuse/engine/shm.py``, where ``_add_shared_region`` is defined by another module of the
  package (``fuse/_core.pyx``'s Engine) and by none of the reading module's own code.  What a
  module defines is what it binds: functions, classes, assignments to a name or to an
  attribute (``self._x = ...``), and in Cython ``cdef`` declarations and the ``.pxd`` beside a
  ``.pyx``.  A private attribute that no module of the package defines (``os._exit``,
  ``torch._C``) is another project's, not this check's business.

Python files are parsed with ``ast``.  Cython files are read whole, as text with their strings
and comments blanked: their imports as Python statements, their attribute reads and their
definitions by pattern.  A private *submodule* (``fuse._core``, ``fuse._log``) is a module,
not a name inside one: importing it is allowed, and so are dunder names."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
from typing import Iterable


@dataclasses.dataclass(frozen=True)
class Read:
    """``source`` (what the file says) reads the private ``name`` at ``path``:``line``."""
    path: str
    line: int
    name: str
    source: str


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str, root: pathlib.Path) -> bool:
    """Whether ``dotted`` (``fuse.a.b``) names a module or package of the tree at ``root``."""
    parts = dotted.split(".")
    if parts[0] != root.name:
        return False
    base = root.parent.joinpath(*parts)
    return (base.is_dir() or base.with_suffix(".py").exists()
            or base.with_suffix(".pyx").exists())


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    """The absolute module an ``ImportFrom`` names (relative ones resolved against ``module``)."""
    if not node.level:
        return node.module
    package = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    out = []
    while isinstance(node, ast.Attribute):
        out.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    out.append(node.id)
    return out[::-1]


# -- Cython as text ------------------------------------------------------------------------

_STRING_OR_COMMENT = re.compile(
    r"""(?P<s>[rbuRBUfF]{0,2}(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\\n])*'"""
    r"""|"(?:\\.|[^"\\\n])*"))|(?P<c>\#[^\n]*)""")


def blank_strings_and_comments(text: str) -> str:
    """``text`` with every string literal's body and every comment replaced by spaces (line
    breaks kept, so that line numbers hold): what is left is code."""
    def blank(m: re.Match) -> str:
        body = m.group(0)
        if m.group("c"):
            return " " * len(body)
        quote = 3 if body.rstrip("rbuRBUfF")[:3] in ("'''", '"""') else 1
        prefix = len(body) - len(body.lstrip("rbuRBUfF"))
        inner = body[prefix + quote:len(body) - quote]
        return body[:prefix + quote] + re.sub(r"[^\n]", " ", inner) + body[len(body) - quote:]
    return _STRING_OR_COMMENT.sub(blank, text)


def _pyx_imports(code: str) -> str:
    """The Python-level import statements of Cython code, as Python source on their own lines
    (every other line left blank, so line numbers hold).  ``cimport`` lines are Cython's own
    and name C declarations, not Python names."""
    lines = code.splitlines()
    out = [""] * len(lines)
    start = None
    for number, line in enumerate(lines):
        stripped = line.strip()
        if start is not None:
            out[start] += " " + stripped
            if ")" in stripped:
                start = None
            continue
        if re.match(r"(from\s+\S+\s+import\s|import\s)", stripped) and "cimport" not in stripped:
            out[number] = stripped
            if "(" in stripped and ")" not in stripped:
                start = number
    return "\n".join(out)


_IMPORT_STATEMENT = re.compile(r"^[ \t]*(?:from[ \t]+\S+[ \t]+c?import[ \t]+(?:\([^)]*\)|[^\n]*)"
                               r"|c?import[ \t][^\n]*)", re.M)


def _without_imports(code: str) -> str:
    """``code`` with its import statements blanked (``fuse._log`` there is a module's name,
    not an attribute read), line breaks kept."""
    return _IMPORT_STATEMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)


_CYTHON_ATTRIBUTE = re.compile(r"(?:([A-Za-z_][\w.]*)|[)\]])\s*\.\s*(_\w+)")
_CYTHON_DEFINITION = re.compile(
    r"\b(?:def|cpdef|class)\s+(_\w+)"                      # def _f, cdef class _C
    r"|\bcdef\b[^\n:=(]*?[\s*](_\w+)\s*(?=[,=(\n:\[]|$)"   # cdef int _x, cdef void* _f(...)
    r"|^\s*(_\w+)\s*(?:=[^=]|:)"                           # _x = ..., _x: int
    r"|\bself\s*\.\s*(_\w+)\s*(?:=[^=]|:)", re.M)          # self._x = ...


def _cython_definitions(code: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in _CYTHON_DEFINITION.finditer(code)}


def _cython_attributes(code: str) -> Iterable[tuple[int, list[str]]]:
    """(line, chain) of every private attribute read: chain is ``["a", "b", "_c"]`` for
    ``a.b._c``, or ``[None, "_c"]`` when the object is a call's or a subscript's result."""
    for m in _CYTHON_ATTRIBUTE.finditer(code):
        chain = ([p.strip() for p in m.group(1).split(".")] if m.group(1) else [None])
        yield code.count("\n", 0, m.start()) + 1, chain + [m.group(2)]


# -- Python through ast ----------------------------------------------------------------------

def _python_definitions(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)       # dict(_x=...) and dataclass-style constructors
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.isidentifier():
            out.add(node.value)     # __slots__ = ("_x",), setattr(self, "_x", ...)
    return out


def _python_attributes(tree: ast.AST) -> Iterable[tuple[int, list[str | None]]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain = _dotted(node)
            yield node.lineno, chain if chain is not None else [None, node.attr]


# -- the package ---------------------------------------------------------------------------

@dataclasses.dataclass
class _Module:
    name: str
    path: pathlib.Path
    is_package: bool
    imports: ast.AST                  # its import statements (the whole tree for Python)
    attributes: list                  # (line, chain) of its private attribute reads
    defines: set                      # every name it binds


def _read(path: pathlib.Path, root: pathlib.Path) -> _Module:
    text = path.read_text()
    if path.suffix == ".py":
        tree = ast.parse(text)
        return _Module(module_name(path, root), path, path.stem == "__init__", tree,
                       list(_python_attributes(tree)), _python_definitions(tree))
    code = blank_strings_and_comments(text)
    defines = _cython_definitions(code)
    pxd = path.with_suffix(".pxd")
    if pxd.exists():        # a .pyx's declarations of its own attributes
        defines |= _cython_definitions(blank_strings_and_comments(pxd.read_text()))
    return _Module(module_name(path, root), path, False, ast.parse(_pyx_imports(code)),
                   list(_cython_attributes(_without_imports(code))), defines)


def _sys_modules_lookup(node: ast.AST) -> str | None:
    """The module name in ``sys.modules.get("name")`` or ``sys.modules["name"]``, else None."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        target, key = node.func, node.args[0].value
        if not (isinstance(target, ast.Attribute) and target.attr == "get"):
            return None
        target = target.value
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        target, key = node.value, node.slice.value
    else:
        return None
    if _dotted(target) == ["sys", "modules"] and isinstance(key, str):
        return key
    return None


def _bound_modules(mod: _Module, root: pathlib.Path, found: list[Read]) -> dict[str, str]:
    """Local name -> the package's module it is bound to; records ``from x import _name``
    reads in ``found`` on the way."""
    rel = mod.path.relative_to(root.parent).as_posix()
    modules: dict[str, str] = {}
    for node in ast.walk(mod.imports):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, mod.name, mod.is_package)
            if not source or source.split(".")[0] != root.name:
                continue
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if is_module(full, root):
                    modules[alias.asname or alias.name] = full
                elif private(alias.name) and source != mod.name:
                    found.append(Read(rel, node.lineno, alias.name,
                                      f"from {source} import {alias.name}"))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            # x = sys.modules.get("fuse.a") or sys.modules["fuse.a"]: x is that module
            name = _sys_modules_lookup(node.value)
            if name and name.split(".")[0] == root.name:
                modules[node.targets[0].id] = name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != root.name:
                    continue
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
    return modules


def _getattr_reads(mod: _Module, modules: dict[str, str], root: pathlib.Path,
                   rel: str) -> Iterable[Read]:
    """``getattr(module, "_name")`` on one of the package's modules."""
    for node in ast.walk(mod.imports):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "getattr" and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name) and node.args[0].id in modules
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and private(node.args[1].value)
                and modules[node.args[0].id] != mod.name
                and not is_module(f"{modules[node.args[0].id]}.{node.args[1].value}", root)):
            yield Read(rel, node.lineno, node.args[1].value,
                       f"getattr({node.args[0].id}, {node.args[1].value!r})")


def _attribute_read(mod: _Module, chain: list, modules: dict[str, str], root: pathlib.Path,
                    defined_elsewhere: set[str]) -> str | None:
    """What ``chain`` (ending in a private name) reads that it should not, as the source says
    it, or None."""
    name = chain[-1]
    if chain[0] in modules:
        # walk the chain while it names modules; the first name that is not a module is the
        # one read: a module's private name when it is the last, else an object's attribute
        current = modules[chain[0]]
        for i, part in enumerate(chain[1:], start=1):
            if is_module(f"{current}.{part}", root):
                current = f"{current}.{part}"
                continue
            if i == len(chain) - 1:
                return ".".join(chain) if current != mod.name else None
            break
    if name in mod.defines or name not in defined_elsewhere:
        return None
    return ".".join(c if c is not None else "(...)" for c in chain)


def private_reads(root: pathlib.Path) -> list[Read]:
    """Every read of another module's private name, or of a private attribute another module
    defines, under ``root`` (the package's folder)."""
    paths = sorted(list(root.rglob("*.py")) + list(root.rglob("*.pyx")))
    mods = [_read(p, root) for p in paths]
    definers: dict[str, set[str]] = {}
    for mod in mods:
        for name in mod.defines:
            if private(name):
                definers.setdefault(name, set()).add(mod.name)
    found: list[Read] = []
    for mod in mods:
        rel = mod.path.relative_to(root.parent).as_posix()
        modules = _bound_modules(mod, root, found)
        found.extend(_getattr_reads(mod, modules, root, rel))
        elsewhere = {n for n, where in definers.items() if where - {mod.name}}
        for line, chain in mod.attributes:
            what = _attribute_read(mod, chain, modules, root, elsewhere)
            if what is not None:
                found.append(Read(rel, line, chain[-1], what))
    return sorted(set(found), key=lambda r: (r.path, r.line, r.name))
