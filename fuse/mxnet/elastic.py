"""``fuse.mxnet.elastic``: ``run``, ``MXNetState``, ``ElasticSampler`` and the state handlers
(a thin module over the mxnet adapter's :mod:`fuse.frameworks.mxnet.elastic`; Horovod has no
MXNet elastic mode, so the names follow ``horovod.torch.elastic``)."""

from fuse.frameworks import load_framework as _load

_load("mxnet").api()        # names the reason when mxnet is missing or too old

from fuse.frameworks.mxnet.elastic import *  # noqa: E402,F401,F403
from fuse.frameworks.mxnet.elastic import __all__  # noqa: E402,F401
