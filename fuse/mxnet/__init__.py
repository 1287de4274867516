"""``import fuse.mxnet as hvd``: the ``horovod.mxnet`` API on fuse.

A thin module: it loads the ``mxnet`` framework adapter through the plugin registry (which
names the reason when mxnet is missing or too old) and re-exports its public names.
"""

from fuse.frameworks import export_api as _export_api

__all__ = _export_api("mxnet", globals())

del _export_api
