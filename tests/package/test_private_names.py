"""No module of fuse reads a private name of another fuse module, or a private attribute that
another fuse module defines on its objects.

A leading underscore says "only this module uses it": a read from elsewhere is an API nobody
promised, which a change inside that module breaks without warning.  The reads are found in
the source, Python and Cython alike (tests/support/private_names.py says how)."""

from __future__ import annotations

import pathlib

import pytest

import fuse
from private_names_util import private_reads

PACKAGE = pathlib.Path(fuse.__file__).parent

# Reads still waiting to be made public, by (file, name): each names who owns it.  An entry
# that no longer occurs fails the test below, so the list cannot outlive its reason.
PENDING: set[tuple[str, str]] = {
    # the engine's: its executor's shared-memory flag, read by the engine's loop
    ("fuse/engine/loop.pyx", "_via_shm"),
    # fuse.spark's: its estimators' mixins share helpers across its modules
    ("fuse/spark/common/estimator.py", "_init_params"),
    ("fuse/spark/torch/estimator.py", "_metadata"),
}

# Private attributes of another project's objects whose names a fuse module happens to define
# too (the check goes by name): MXNet's Parameter._data, gluon.Trainer's _optimizer and
# _params, which the MXNet adapter reads to save and restore a trainer; TensorFlow's _numpy.
OTHER_PROJECTS: set[tuple[str, str]] = {
    ("fuse/frameworks/mxnet/elastic.py", "_data"),
    ("fuse/frameworks/mxnet/elastic.py", "_optimizer"),
    ("fuse/frameworks/mxnet/optimizer.py", "_params"),
    # TensorFlow's EagerTensor._numpy(): a view of the tensor's memory where numpy() copies,
    # which the TensorFlow adapter reads its inputs through
    ("fuse/frameworks/tensorflow/tensors.py", "_numpy"),
}


@pytest.fixture(scope="module")
def package_reads():
    return private_reads(PACKAGE)     # parsed once for both tests below


def test_no_module_reads_another_modules_private_name(package_reads):
    unexpected = [r for r in package_reads if (r.path, r.name) not in PENDING | OTHER_PROJECTS]
    assert not unexpected, ("private names of other fuse modules read (make them public where "
                            "they are meant to be shared):\n"
                            + "\n".join(f"  {r.path}:{r.line}: {r.source}" for r in unexpected))


def test_pending_entries_still_occur(package_reads):
    reads = {(r.path, r.name) for r in package_reads}
    gone = sorted((PENDING | OTHER_PROJECTS) - reads)
    assert not gone, f"no longer read, remove from PENDING or OTHER_PROJECTS: {gone}"


def _package(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "fuse"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_finds_private_names_of_modules(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "_private_mod.py": "_hidden = 1\n",
        "pkg/__init__.py": "_flag = True\n",
        "pkg/lib.py": "_secret = 1\ndef _helper(): pass\n",
        "pkg/_native.pyx": "cdef int x\n",
        "user.py": (
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
            "fuse = None\n"),
        "pkg/rel.py": (
            "from . import _flag\n"                    # read: the package's private name
            "from .lib import _helper as h\n"          # read
            "from . import _native\n"),                # a module: fine
        "pkg/mod.pyx": (
            "from libc.stdint cimport int64_t\n"
            "from fuse.pkg.lib import (\n    _secret,\n)\n"
            "cdef class A:\n    pass\n"),
    })
    got = sorted((r.path, r.line, r.name) for r in private_reads(root))
    assert got == [("fuse/pkg/mod.pyx", 2, "_secret"),
                   ("fuse/pkg/rel.py", 1, "_flag"),
                   ("fuse/pkg/rel.py", 2, "_helper"),
                   ("fuse/user.py", 1, "_secret"),
                   ("fuse/user.py", 5, "_helper"),
                   ("fuse/user.py", 7, "_hidden"),
                   ("fuse/user.py", 10, "_secret")], got


def test_the_check_finds_private_attributes_of_other_modules_objects(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "core.pyx": (
            "cdef class Engine:\n"
            "    cdef int _region\n"                       # declared in the .pxd too
            "    def _add_shared_region(self, int n):\n"
            "        self._region = n\n"),
        "core.pxd": "cdef class Engine:\n    cdef int _count\n",
        "engine/__init__.py": "",
        "engine/shm.py": (
            "import os\n"
            "class Segment:\n"
            "    def __init__(self):\n"
            "        self._size = 0\n"
            "    def grow(self, other):\n"
            "        return other._size + self._size\n"       # its own class's: fine
            "def attach(engine):\n"
            "    engine._add_shared_region(1)\n"              # read: 8, the Engine's
            "    os._exit(0)\n"),                             # no fuse module's: not this check's
        "engine/user.pyx": (
            "# engine._region in a comment is not read\n"
            "cdef count(engine):\n"
            "    text = 'engine._count in a string is not read either'\n"
            "    return engine._count + get()._region\n"),    # reads: 4, the .pxd's and .pyx's
    })
    got = sorted((r.path, r.line, r.name, r.source) for r in private_reads(root))
    assert got == [("fuse/engine/shm.py", 8, "_add_shared_region", "engine._add_shared_region"),
                   ("fuse/engine/user.pyx", 4, "_count", "engine._count"),
                   ("fuse/engine/user.pyx", 4, "_region", "(...)._region")], got
