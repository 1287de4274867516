"""``horovod.torch.elastic.state``: ``TorchState`` and the state handlers, for scripts that
import them from here."""

from fuse.torch.elastic import (  # noqa: F401
    ModelStateHandler, ObjectState, OptimizerStateHandler, SamplerStateHandler, StateHandler,
    TorchState, get_handler_registry, set_handler_registry)

__all__ = ["ModelStateHandler", "ObjectState", "OptimizerStateHandler", "SamplerStateHandler",
           "StateHandler", "TorchState", "get_handler_registry", "set_handler_registry"]
