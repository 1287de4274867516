"""fuse_pygloo: a fuse communication backend over pygloo, shipped as a package of its own.

The worked example of a third-party backend (README, "Writing a backend plugin"): one class,
:class:`PyglooBackend`, registered in this package's ``pyproject.toml``::

    [project.entry-points."fuse.backends"]
    pygloo = "fuse_pygloo:PyglooBackend"

After ``pip install plugins/fuse-pygloo`` (CPython 3.10: pygloo has no other wheel),
``FUSE_BACKEND=pygloo fuserun -np 2 python train.py`` runs on it.
"""

from fuse_pygloo.backend import PyglooBackend, __version__
from fuse_pygloo.dtypes import REDUCIBLE, UnsupportedDtype
from fuse_pygloo.group import PyglooError, PyglooGroup

__all__ = ["PyglooBackend", "PyglooGroup", "PyglooError", "REDUCIBLE", "UnsupportedDtype",
           "__version__"]
