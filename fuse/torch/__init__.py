"""``import fuse.torch as hvd``: the ``horovod.torch`` API on fuse.

A thin module: it loads the ``torch`` framework adapter through the plugin registry (which
names the reason when torch is missing or too old) and re-exports its public names.
"""

from fuse.frameworks import export_api as _export_api

__all__ = _export_api("torch", globals())

del _export_api
