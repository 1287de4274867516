"""No file of fuse over 800 lines and no function over 80: a newcomer reads any piece whole.

Lengths are read from the source, Python and Cython alike (tests/support/code_size_util.py);
on Python files the reader is checked against Python's own parser, so a function it cut short
would fail here rather than pass unseen."""

from __future__ import annotations

import ast
import pathlib

import fuse
from code_size_util import functions, long_files, long_functions, source_files

PACKAGE = pathlib.Path(fuse.__file__).parent
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
MAX_CORE_LINES = 500        # fuse/_core.pyx: the Engine's thin API over fuse/engine/


def test_no_file_is_too_long():
    found = long_files(PACKAGE, MAX_FILE_LINES)
    assert not found, f"files over {MAX_FILE_LINES} lines (split them): {found}"


def test_no_function_is_too_long():
    found = long_functions(PACKAGE, MAX_FUNCTION_LINES)
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(
        f"  {f.path}:{f.line} {f.name}: {f.lines}" for f in found)


def test_the_engine_front_is_thin():
    core = PACKAGE / "_core.pyx"
    assert len(core.read_text().splitlines()) <= MAX_CORE_LINES


def _ast_lengths(path: pathlib.Path) -> dict[tuple[int, str], int]:
    """(def line, name) -> lines from the def to the body's last line, by Python's parser."""
    tree = ast.parse(path.read_text())
    return {(node.lineno, node.name): node.end_lineno - node.lineno + 1
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_reader_agrees_with_pythons_parser():
    """Every Python function of fuse, found with the same length as ``ast`` finds it."""
    checked = 0
    for path in source_files(PACKAGE):
        if path.suffix != ".py":
            continue
        read = {(f.line, f.name): f.lines for f in functions(path, PACKAGE.parent)}
        parsed = _ast_lengths(path)
        assert read == parsed, f"{path}: the reader and ast differ: " + str(
            sorted(set(read.items()) ^ set(parsed.items())))
        checked += len(parsed)
    assert checked > 1000


def test_the_reader_finds_cython_functions(tmp_path):
    source = tmp_path / "m.pyx"
    source.write_text(
        "cdef int x = f(1)\n"                                   # a variable, not a function
        "cdef class C:\n"
        "    cdef int f(self, int a,\n"                         # a signature on two lines
        "               int b) noexcept nogil:\n"
        '        """Doc\n'
        'at column 0."""\n'                                     # inside the docstring
        "        return a\n"
        "\n"
        "# a comment at column 0 between functions\n"
        "    cpdef g(self):\n"
        "        pass\n"
        "cdef extern from *:\n"
        "    int h(int)\n")
    declaration = tmp_path / "m.pxd"
    declaration.write_text("cdef class C:\n    cdef int f(self, int a, int b) noexcept nogil\n")
    assert [(f.name, f.line, f.lines) for f in functions(source, tmp_path)] == [
        ("f", 3, 5), ("g", 10, 2)]
    assert functions(declaration, tmp_path) == []
