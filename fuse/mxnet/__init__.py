"""``import fuse.mxnet as hvd``: the ``horovod.mxnet`` API on fuse.

A thin module: it loads the ``mxnet`` framework adapter through the plugin registry (which
names the reason when mxnet is missing or too old) and re-exports its public names.
"""

from fuse.frameworks import load_framework as _load_framework

_adapter = _load_framework("mxnet")
_api = _adapter.api()

globals().update({_n: getattr(_api, _n) for _n in _api.__all__})
__all__ = list(_api.__all__)

del _load_framework
