"""What fuse's PyTorch optimizer wrappers share, written once.

* :class:`OptimizerWrapper` holds the user's optimizer (``wrapped_optimizer``) and forwards to
  it everything the wrapper does not define: a composition, no class built at run time.
  ``isinstance(opt, torch.optim.SGD)`` still holds because ``__class__`` reports the wrapped
  optimizer's class (as ``unittest.mock`` does); ``type(opt)`` is the wrapper.  The Adasum
  optimizer is one.
* :class:`HookedOptimizer` is a wrapper that reduces gradients from a hook per parameter
  while backward runs and waits for them in ``synchronize()``: ``DistributedOptimizer`` and
  its sharded form.  It counts backward passes per step (``pass_counter``), lets ``step()``
  synchronize first (unless inside ``skip_synchronize()``), refuses ``zero_grad`` while
  reductions are in flight, and removes the hooks on request; each subclass registers its
  hooks and brings its ``synchronize``, what it has in flight and how it follows an elastic
  job's new engine.
"""

from __future__ import annotations

import contextlib
import warnings

from fuse.collectives.grad_sync import PassCounter
from fuse.frameworks.torch.optimizer_checks import (ZERO_GRAD_ERROR, check_optimizer,
                                                    unique_params, wrapped_attribute)


def _wrapped(wrapper):
    return wrapper.wrapped_optimizer


class OptimizerWrapper:
    """``optimizer`` behind a wrapper that forwards what it does not define."""

    def __init__(self, optimizer):
        check_optimizer(optimizer)
        self.__dict__["wrapped_optimizer"] = optimizer

    @property
    def __class__(self):
        return type(self.wrapped_optimizer)

    def __getattr__(self, name):
        # only reached for names the wrapper does not define
        return getattr(self.__dict__["wrapped_optimizer"], name)

    def __setattr__(self, name, value):
        # a property of the wrapper (param_groups, ...) takes the value; the rest lands on the
        # wrapper
        prop = getattr(type(self), name, None)
        if isinstance(prop, property):
            prop.__set__(self, value)
        else:
            self.__dict__[name] = value

    # what schedulers and checkpoints read and assign on the optimizer they are given
    param_groups = wrapped_attribute("param_groups", _wrapped)
    state = wrapped_attribute("state", _wrapped)
    defaults = wrapped_attribute("defaults", _wrapped)


class HookedOptimizer(OptimizerWrapper):
    """A wrapper reducing gradients from per-parameter hooks (see the module's docstring);
    ``pass_counter`` counts each parameter's backward passes in the current step."""

    def __init__(self, optimizer, backward_passes_per_step):
        super().__init__(optimizer)
        d = self.__dict__
        d["pass_counter"] = PassCounter(len(unique_params(optimizer)), backward_passes_per_step)
        d["_should_synchronize"] = True
        d["_synchronized"] = False
        d["_hook_handles"] = []

    # ---- what each subclass brings

    def synchronize(self) -> None:
        raise NotImplementedError

    def _follow_engine(self) -> None:
        """Forget what the previous engine had in flight when an elastic job re-formed."""
        raise NotImplementedError

    def _in_flight(self) -> bool:
        """Whether any reduction was submitted and not waited for."""
        raise NotImplementedError

    # ---- shared

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside this context ``step()`` does not synchronize; call :meth:`synchronize`
        yourself first (gradient clipping, AMP ``GradScaler.unscale_``)."""
        self.__dict__["_should_synchronize"] = False
        try:
            yield
        finally:
            self.__dict__["_should_synchronize"] = True

    def step(self, closure=None):
        """Synchronize, unless inside ``skip_synchronize()`` (warning when it was already done
        outside one), then the wrapped optimizer's step."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            else:
                self.synchronize()
        self.__dict__["_synchronized"] = False
        opt = self.wrapped_optimizer
        loss = opt.step(closure) if closure is not None else opt.step()
        self._after_step()
        return loss

    def _after_step(self) -> None:
        """What a subclass does once the wrapped optimizer has stepped."""

    def zero_grad(self, set_to_none: bool = True):
        # After an elastic re-form, what the old engine left in flight is gone with it: a
        # failure noticed inside backward() leaves hooks' records and handles behind, and the
        # restored loop's first call is this one.
        self._follow_engine()
        if self._in_flight() or self.pass_counter.any_pending():
            raise AssertionError(ZERO_GRAD_ERROR)
        return self.wrapped_optimizer.zero_grad(set_to_none=set_to_none)

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.pass_counter.set_passes(passes)

    @property
    def backward_passes_per_step(self) -> int:
        return self.pass_counter.passes

    def remove_hooks(self) -> None:
        """Stop reducing gradients (the hooks are removed; the optimizer keeps working)."""
        for h in self._hook_handles:
            h.remove()
        self._hook_handles.clear()
        self.__dict__["_active"] = False
