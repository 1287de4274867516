"""fuse on Ray: ``from fuse.ray import RayExecutor`` where a script had
``from horovod.ray import RayExecutor`` (``pip install fuse-dl[ray]``)."""

try:
    import ray as _ray  # noqa: F401  (the integration is nothing without it)
except ImportError as err:
    raise ImportError(f"fuse.ray needs Ray: pip install 'fuse-dl[ray]' ({err})") from err

from .elastic import ElasticRayExecutor, ElasticRaySettings, RayHostDiscovery
from .runner import RayExecutor, RaySettings
from .worker import BaseHorovodWorker, FuseWorker

__all__ = ["RayExecutor", "RaySettings", "BaseHorovodWorker", "FuseWorker",
           "ElasticRayExecutor", "ElasticRaySettings", "RayHostDiscovery"]
