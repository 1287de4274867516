"""fuse for Lightning 2.x: ``Trainer(strategy=FuseStrategy())`` or, after ``import
fuse.lightning``, ``Trainer(strategy="fuse")`` where a script had ``HorovodStrategy`` /
``strategy="horovod"`` (``pip install fuse-dl[lightning]``).

``FuseStrategy`` here is for ``lightning`` (``import lightning.pytorch as pl``); a script on
the ``pytorch_lightning`` package takes :mod:`fuse.lightning.pytorch_lightning`'s.  Importing
this module registers ``strategy="fuse"`` with every one of the two that is installed.
"""

import importlib.util as _util

_HAVE = {name: _util.find_spec(name) is not None for name in ("lightning", "pytorch_lightning")}
if not any(_HAVE.values()):
    raise ImportError("fuse.lightning needs Lightning 2.x: pip install 'fuse-dl[lightning]'")

if _HAVE["pytorch_lightning"]:
    from . import pytorch_lightning  # noqa: F401  (registers strategy="fuse" there)

if _HAVE["lightning"]:
    from .bindings import FuseEnvironment, FuseStrategy
else:
    from .pytorch_lightning import FuseEnvironment, FuseStrategy

# Horovod's name, for scripts that import it from here
HorovodStrategy = FuseStrategy

__all__ = ["FuseStrategy", "FuseEnvironment", "HorovodStrategy"]
