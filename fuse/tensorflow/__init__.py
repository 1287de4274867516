"""``import fuse.tensorflow as hvd``: the ``horovod.tensorflow`` API on fuse (TF2, Keras 3).

A thin module: it loads the ``tensorflow`` framework adapter through the plugin registry
(which names the reason when TensorFlow is missing or too old) and re-exports its public
names.  ``fuse.tensorflow.keras`` is the Keras API.
"""

from fuse.frameworks import export_api as _export_api

__all__ = _export_api("tensorflow", globals())

# Horovod's package exposes its util module and this private helper; its suite calls both
from fuse.tensorflow import util  # noqa: E402,F401
_executing_eagerly = util.executing_eagerly

__all__ += ["util"]

del _export_api
