"""No module of fuse reads a private name of another fuse module.

A leading underscore says "only this module uses it": a read from elsewhere (``from fuse.x
import _name``, or ``x._name`` on an imported fuse module) is an API nobody promised, which a
change inside ``x`` breaks without warning.  Every ``fuse/**/*.py`` is parsed with ``ast``
(and the Python-level ``import`` statements of the ``.pyx`` files, which ``ast`` cannot read
whole).  A private *submodule* (``fuse._core``, ``fuse._log``, ``fuse.backends.gloo._gloo``) is
a module, not a name inside one: importing it is allowed, and so are dunder names."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

import fuse

PACKAGE = pathlib.Path(fuse.__file__).parent

def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str, root: pathlib.Path) -> bool:
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


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


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


def _pyx_imports(text: str) -> str:
    """The Python-level import statements of a Cython file, as Python source on their own
    lines (every other line left blank, so line numbers hold).  ``cimport`` lines are Cython's
    own and name C declarations, not Python names."""
    out = [""] * len(text.splitlines())
    start = None
    for number, line in enumerate(text.splitlines()):
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


def private_reads(root: pathlib.Path) -> list[tuple[str, int, str, str]]:
    """Every read of another fuse module's private name under ``root`` (the ``fuse`` folder):
    (file relative to root's parent, line, private name, what the source says)."""
    found = []
    for path in sorted(list(root.rglob("*.py")) + list(root.rglob("*.pyx"))):
        rel = path.relative_to(root.parent).as_posix()
        module = _module_name(path, root)
        is_package = path.stem == "__init__"
        text = path.read_text()
        tree = ast.parse(_pyx_imports(text) if path.suffix == ".pyx" else text)
        modules: dict[str, str] = {}    # local name -> the fuse module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(node, module, is_package)
                if not source or source.split(".")[0] != root.name:
                    continue
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if _is_module(full, root):
                        modules[alias.asname or alias.name] = full
                    elif _private(alias.name) and source != module:
                        found.append((rel, node.lineno, alias.name,
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
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "getattr" and len(node.args) >= 2
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in modules
                    and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str) and _private(node.args[1].value)
                    and modules[node.args[0].id] != module
                    and not _is_module(f"{modules[node.args[0].id]}.{node.args[1].value}",
                                       root)):
                found.append((rel, node.lineno, node.args[1].value,
                              f"getattr({node.args[0].id}, {node.args[1].value!r})"))
                continue
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            chain = _dotted(node)
            if chain is None or chain[0] not in modules:
                continue
            # walk the chain while it names modules; the first name that is not a module is
            # the one read
            current = modules[chain[0]]
            for i, part in enumerate(chain[1:], start=1):
                if _is_module(f"{current}.{part}", root):
                    current = f"{current}.{part}"
                    continue
                if _private(part) and current != module and i == len(chain) - 1:
                    found.append((rel, node.lineno, part, ".".join(chain)))
                break
    return found


def test_no_module_reads_another_modules_private_name():
    reads = private_reads(PACKAGE)
    assert not reads, ("private names of other fuse modules read (make them public where "
                       "they are meant to be shared):\n"
                       + "\n".join(f"  {f}:{line}: {src}" for f, line, _, src in reads))


def test_the_check_finds_what_it_should(tmp_path):
    root = tmp_path / "fuse"
    (root / "pkg").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "_private_mod.py").write_text("_hidden = 1\n")
    (root / "pkg" / "__init__.py").write_text("_flag = True\n")
    (root / "pkg" / "lib.py").write_text("_secret = 1\ndef _helper(): pass\n")
    (root / "pkg" / "_native.pyx").write_text("cdef int x\n")
    (root / "user.py").write_text(
        "from fuse.pkg.lib import _secret\n"        # read: 1
        "from fuse.pkg import lib, _native\n"      # modules: fine
        "from fuse import _private_mod\n"          # a private module: fine
        "import fuse.pkg.lib as L\n"
        "L._helper()\n"                            # read: 5
        "lib.__name__\n"                           # dunder: fine
        "_private_mod._hidden\n"                   # read: 7 (a private module's private name)
        "import sys\n"
        "m = sys.modules.get('fuse.pkg.lib')\n"
        "getattr(m, '_secret', None)\n"             # read: 10
        "getattr(m, '__doc__')\n"                   # dunder: fine
        "fuse = None\n")
    (root / "pkg" / "rel.py").write_text(
        "from . import _flag\n"                    # read: the package's private name
        "from .lib import _helper as h\n"          # read
        "from . import _native\n")                 # a module: fine
    (root / "pkg" / "mod.pyx").write_text(
        "from libc.stdint cimport int64_t\n"
        "from fuse.pkg.lib import (\n    _secret,\n)\n"
        "cdef class A:\n    pass\n")
    got = sorted((f, line, name) for f, line, name, _ in private_reads(root))
    assert got == [("fuse/pkg/mod.pyx", 2, "_secret"),
                   ("fuse/pkg/rel.py", 1, "_flag"),
                   ("fuse/pkg/rel.py", 2, "_helper"),
                   ("fuse/user.py", 1, "_secret"),
                   ("fuse/user.py", 5, "_helper"),
                   ("fuse/user.py", 7, "_hidden"),
                   ("fuse/user.py", 10, "_secret")], got
