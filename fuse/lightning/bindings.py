"""fuse's strategy and environment for ``lightning`` (``import lightning.pytorch as pl``)."""

from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only as _fabric_rank_zero_only
from lightning.pytorch.strategies import ParallelStrategy, StrategyRegistry
from lightning.pytorch.utilities.rank_zero import rank_zero_only as _rank_zero_only
from lightning_utilities.core.rank_zero import rank_zero_only as _utils_rank_zero_only

from .strategy import bind

__all__ = ["FuseEnvironment", "FuseStrategy"]

FuseEnvironment, FuseStrategy = bind(
    ClusterEnvironment, ParallelStrategy, StrategyRegistry,
    (_rank_zero_only, _fabric_rank_zero_only, _utils_rank_zero_only), __name__)
