"""``DistributedOptimizer(..., op=Adasum)``: Horovod's Adasum optimizer for PyTorch.

Adasum combines what each worker's optimizer would do, not raw gradients: ``step()`` lets the
wrapped optimizer take its local step from the current parameters, then replaces each
parameter by start + Adasum of the workers' updates (``fuse.collectives.adasum``), as Horovod's
``_DistributedAdasumOptimizer`` does.  The updates are combined after backward (no overlap
with it); like Horovod's, it has no ``skip_synchronize``.
"""

from __future__ import annotations

import torch

from fuse.collectives.ops import Adasum
from fuse.job.process_sets import global_process_set
from fuse.frameworks.torch import mpi_ops
from fuse.frameworks.torch.optimizer_checks import unique_params
from fuse.frameworks.torch.optimizer_wrapper import OptimizerWrapper


class DistributedAdasumOptimizer(OptimizerWrapper):
    """Wrap ``optimizer`` so that ``step()`` applies the Adasum of every worker's update."""

    def __init__(self, optimizer, named_parameters=None, backward_passes_per_step=1,
                 process_set=global_process_set):
        super().__init__(optimizer)
        d = self.__dict__
        d["_process_set"] = process_set
        d["_passes"] = int(backward_passes_per_step)
        d["_calls"] = 0
        d["_params"] = unique_params(optimizer)

    def __setattr__(self, name, value):
        # Horovod's Adasum optimizer is a subclass of the user's: attributes land on it
        setattr(self.wrapped_optimizer, name, value)

    def synchronize(self):
        """Nothing to wait for: the updates are combined inside :meth:`step`."""

    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        """The wrapped optimizer's local step, then every parameter set to its start value
        plus the Adasum of all workers' updates.  With ``backward_passes_per_step`` = N the
        gradients of N backward passes accumulate and only every N-th call steps."""
        self.__dict__["_calls"] += 1
        if self._calls % self._passes:
            return None
        trained = [p for p in self._params if p.grad is not None]
        starts = [p.detach().clone() for p in trained]
        loss = self.wrapped_optimizer.step(closure)
        with torch.no_grad():
            deltas = [p.detach() - s for p, s in zip(trained, starts)]
            if deltas:
                combined = mpi_ops.grouped_allreduce(deltas, op=Adasum,
                                                     process_set=self._process_set)
                for p, s, delta in zip(trained, starts, combined):
                    p.copy_(s + delta)
        return loss

    def zero_grad(self, set_to_none: bool = True):
        return self.wrapped_optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.wrapped_optimizer.state_dict()

    def load_state_dict(self, state):
        return self.wrapped_optimizer.load_state_dict(state)
