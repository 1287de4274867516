"""fuse's strategy and environment for ``lightning`` (``import lightning.pytorch as pl``)."""

from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only as _fabric_rank_zero_only
from lightning.pytorch.strategies import ParallelStrategy, StrategyRegistry
from lightning.pytorch.utilities.rank_zero import rank_zero_only as _rank_zero_only
from lightning_utilities.core.rank_zero import rank_zero_only as _utils_rank_zero_only

from .environment import FuseEnvironmentBase
from .strategy import FuseStrategyBase

__all__ = ["FuseEnvironment", "FuseStrategy"]


class FuseEnvironment(FuseEnvironmentBase, ClusterEnvironment):
    __doc__ = FuseEnvironmentBase.__doc__


class FuseStrategy(FuseStrategyBase, ParallelStrategy):
    __doc__ = FuseStrategyBase.__doc__
    environment_cls = FuseEnvironment
    rank_zero_switches = (_rank_zero_only, _fabric_rank_zero_only, _utils_rank_zero_only)


FuseStrategy.register_strategies(StrategyRegistry)
