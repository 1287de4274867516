"""How long a package's files and functions are, read from the source.

A function runs from its ``def`` (``cdef``, ``cpdef``) line to the last line of its body that
is not blank: the body being every following line indented deeper than the ``def``, or blank,
or a comment, or inside a triple-quoted string.  Python and Cython are read the same way, as
text, so the one reader serves ``.py``, ``.pyx`` and ``.pxd`` files; a Cython declaration
without a body (a ``.pxd``'s ``cdef int f(self)``) is no function."""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Iterator

SOURCE_SUFFIXES = (".py", ".pyx", ".pxd")

# a def, or a cdef/cpdef whose name is followed by "(" before any "=" (not a variable, class,
# struct, enum or extern block)
_DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)\s*\(")
_CDEF = re.compile(r"^(\s*)c(?:p)?def\s+(?!class\b|extern\b|struct\b|enum\b|union\b|packed\b)"
                   r"[^=(]*?(\w+)\s*\(")


@dataclasses.dataclass(frozen=True)
class Function:
    path: str
    line: int           # of its def
    name: str
    lines: int          # def to the body's last non-blank line, both included


def source_files(root: pathlib.Path) -> Iterator[pathlib.Path]:
    for path in sorted(root.rglob("*")):
        if path.suffix in SOURCE_SUFFIXES and path.is_file():
            yield path


def line_count(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def _code(line: str) -> str:
    """The line without a trailing comment (a '#' inside a string is rare enough to ignore in
    a signature)."""
    return line.split("#", 1)[0].rstrip()


def _in_string_after(line: str, inside: str | None) -> str | None:
    """Which triple quote is still open after ``line`` (None: none), given the one open
    before it."""
    i = 0
    while i < len(line):
        if inside is None:
            if line[i] == "#":
                return None
            for quote in ('"""', "'''"):
                if line.startswith(quote, i):
                    inside, i = quote, i + 3
                    break
            else:
                if line[i] in "\"'":        # a one-line string: skip to its end
                    end = line.find(line[i], i + 1)
                    i = len(line) if end < 0 else end + 1
                else:
                    i += 1
        else:
            end = line.find(inside, i)
            if end < 0:
                return inside
            inside, i = None, end + 3
    return inside


def _header_end(lines: list[str], start: int) -> int | None:
    """The index of the line that ends the signature opened at ``start`` with ':' (None: it
    ends without one, a declaration)."""
    depth = 0
    for i in range(start, len(lines)):
        code = _code(lines[i])
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth <= 0:
            return i if code.endswith(":") else None
    return None


def functions(path: pathlib.Path, relative_to: pathlib.Path) -> list[Function]:
    lines = path.read_text().splitlines()
    # which lines are (partly) inside a triple-quoted string that opened before them
    in_string, inside = [], None
    for line in lines:
        in_string.append(inside is not None)
        inside = _in_string_after(line, inside)
    found = []
    for start, line in enumerate(lines):
        if in_string[start]:
            continue
        match = _DEF.match(line) or _CDEF.match(line)
        if match is None:
            continue
        header_end = _header_end(lines, start)
        if header_end is None:
            continue
        indent, last = len(match.group(1)), header_end
        for i in range(header_end + 1, len(lines)):
            text = lines[i]
            if not in_string[i] and (not text.strip() or text.lstrip().startswith("#")):
                continue        # blank or a comment: the body goes on, or ends above it
            if not in_string[i] and len(text) - len(text.lstrip()) <= indent:
                break
            last = i
        found.append(Function(str(path.relative_to(relative_to)), start + 1, match.group(2),
                              last - start + 1))
    return found


def long_files(root: pathlib.Path, limit: int) -> list[tuple[str, int]]:
    return [(str(p.relative_to(root.parent)), n) for p in source_files(root)
            if (n := line_count(p)) > limit]


def long_functions(root: pathlib.Path, limit: int) -> list[Function]:
    return [f for p in source_files(root) for f in functions(p, root.parent) if f.lines > limit]
