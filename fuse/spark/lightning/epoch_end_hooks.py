"""Lightning 1.x's ``training_epoch_end(outputs)`` and ``validation_epoch_end(outputs)`` on
Lightning 2's Trainer, which refuses a module that has them.

Modules written for Horovod's estimator (on Lightning 1.x) often have them.  Rather than fail,
the estimator trains such a module as a subclass made on the worker: the old hooks are hidden
from the Trainer, each step's output is kept, and at the epoch's end the old hook gets the
list of them, as Lightning 1.x gave it, before the class's own ``on_*_epoch_end``.
"""

from __future__ import annotations

__all__ = ["with_epoch_end_hooks"]

# the old hook -> (the step whose outputs it gets, the Lightning 2 hook that calls it)
_HOOKS = {"training_epoch_end": ("training_step", "on_train_epoch_end"),
          "validation_epoch_end": ("validation_step", "on_validation_epoch_end")}


def _detached(output):
    import torch
    if isinstance(output, torch.Tensor):
        return output.detach()
    if isinstance(output, dict):
        return {k: _detached(v) for k, v in output.items()}
    return output


def _collecting(step: str):
    def collect(self, *args, **kwargs):
        output = getattr(super(type(self), self), step)(*args, **kwargs)
        self._fuse_step_outputs.setdefault(step, []).append(_detached(output))
        return output
    collect.__name__ = step
    return collect


def _epoch_end(old_hook, step: str, new_hook: str):
    def end(self, *args, **kwargs):
        outputs = self._fuse_step_outputs.pop(step, [])
        old_hook(self, outputs)
        return getattr(super(type(self), self), new_hook)(*args, **kwargs)
    end.__name__ = new_hook
    return end


def with_epoch_end_hooks(model):
    """``model`` itself when it has none of the old hooks; else ``model`` with its class
    changed to a subclass that calls them from Lightning 2's hooks."""
    cls = type(model)
    old = {name: getattr(cls, name) for name in _HOOKS if callable(getattr(cls, name, None))}
    if not old:
        return model
    namespace = {"__module__": cls.__module__}
    for name, hook in old.items():
        step, new_hook = _HOOKS[name]
        namespace[name] = None          # what the Trainer checks for
        namespace[step] = _collecting(step)
        namespace[new_hook] = _epoch_end(hook, step, new_hook)
    model.__class__ = type(cls.__name__, (cls,), namespace)
    model._fuse_step_outputs = {}
    return model
