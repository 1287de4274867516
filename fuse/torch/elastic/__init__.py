"""``horovod.torch.elastic``: ``run``, ``TorchState``, ``ElasticSampler`` and the state
handlers (a thin module over the torch adapter's :mod:`fuse.frameworks.torch.elastic`)."""

from fuse.frameworks import load_framework as _load

_load("torch").api()        # names the reason when torch is missing or too old

from fuse.frameworks.torch.elastic import *  # noqa: E402,F401,F403
from fuse.frameworks.torch.elastic import __all__  # noqa: E402,F401
