"""``import fuse.torch as hvd``: the ``horovod.torch`` API on fuse.

A thin module: it loads the ``torch`` framework adapter through the plugin registry (which
names the reason when torch is missing or too old) and re-exports its public names.
"""

from fuse.frameworks import load_framework as _load_framework

_adapter = _load_framework("torch")
_api = _adapter.api()

globals().update({_n: getattr(_api, _n) for _n in _api.__all__})
__all__ = list(_api.__all__)

del _load_framework
