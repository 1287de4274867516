"""fuse for Lightning 2.x: ``Trainer(strategy=FuseStrategy())`` or, after ``import
fuse.lightning``, ``Trainer(strategy="fuse")`` where a script had ``HorovodStrategy`` /
``strategy="horovod"`` (``pip install fuse[lightning]``)."""

try:
    import lightning.pytorch as _pl  # noqa: F401  (the integration is nothing without it)
except ImportError as err:
    raise ImportError(f"fuse.lightning needs Lightning 2.x: pip install 'fuse[lightning]' "
                      f"({err})") from err

from lightning.pytorch.strategies import StrategyRegistry as _registry

from .environment import FuseEnvironment
from .strategy import FuseStrategy

FuseStrategy.register_strategies(_registry)

# Horovod's name, for scripts that import it from here
HorovodStrategy = FuseStrategy

__all__ = ["FuseStrategy", "FuseEnvironment", "HorovodStrategy"]
