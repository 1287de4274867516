"""fuse's strategy and environment for the ``pytorch_lightning`` package (``import
pytorch_lightning as pl``, the spelling of most scripts written for HorovodStrategy):
``from fuse.lightning.pytorch_lightning import FuseStrategy``, or ``strategy="fuse"`` once
:mod:`fuse.lightning` is imported."""

from lightning_fabric.plugins.environments import ClusterEnvironment
from lightning_fabric.utilities.rank_zero import rank_zero_only as _fabric_rank_zero_only
from lightning_utilities.core.rank_zero import rank_zero_only as _utils_rank_zero_only
from pytorch_lightning.strategies import ParallelStrategy, StrategyRegistry
from pytorch_lightning.utilities.rank_zero import rank_zero_only as _rank_zero_only

from .environment import FuseEnvironmentBase
from .strategy import FuseStrategyBase

__all__ = ["FuseEnvironment", "FuseStrategy", "HorovodStrategy"]


class FuseEnvironment(FuseEnvironmentBase, ClusterEnvironment):
    __doc__ = FuseEnvironmentBase.__doc__


class FuseStrategy(FuseStrategyBase, ParallelStrategy):
    __doc__ = FuseStrategyBase.__doc__
    environment_cls = FuseEnvironment
    rank_zero_switches = (_rank_zero_only, _fabric_rank_zero_only, _utils_rank_zero_only)


FuseStrategy.register_strategies(StrategyRegistry)

# Horovod's name, for scripts that import it from here
HorovodStrategy = FuseStrategy
