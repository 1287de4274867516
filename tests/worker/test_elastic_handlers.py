"""The elastic state handlers on their own (no job): what a rollback restores.  The end-to-end
behaviour, with real workers that fail, is in tests/runner/elastic."""

import needs
import pytest

torch = needs.module("torch")

from fuse.exceptions import FuseInternalError  # noqa: E402
from fuse.worker.elastic_handlers import HandlerState, StateDictHandler  # noqa: E402


def _step(param, opt):
    param.grad = torch.ones_like(param)
    opt.step()


def test_a_second_rollback_restores_the_commit_not_the_steps_after_the_first():
    """torch's Optimizer.load_state_dict keeps the tensors it is given: a handler that handed it
    its committed copy would see that copy changed by the steps after a rollback."""
    param = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([param], lr=0.1, momentum=0.9)
    _step(param, opt)
    handler = StateDictHandler(opt)         # commits the momentum after one step: all ones
    handler.restore()                       # the first rollback
    _step(param, opt)                       # momentum 1.9: must not reach the commit
    handler.restore()                       # the second rollback, before any new commit
    assert opt.state[param]["momentum_buffer"].tolist() == [1.0, 1.0, 1.0]
    assert handler.saved()["state"][0]["momentum_buffer"].tolist() == [1.0, 1.0, 1.0]


class _GatherFails(StateDictHandler):
    """A handler whose copy is collective (as a sharded optimizer's) and whose collective
    fails at the second commit, as when a worker leaves in the middle of it."""

    def __init__(self, value):
        super().__init__(value)
        self.takes = 0

    def take(self):
        self.takes += 1
        if self.takes == 2:
            raise FuseInternalError("the gathering of the state failed: a worker left")
        return super().take()


def test_a_commit_that_fails_half_way_keeps_the_previous_one_whole():
    """The model comes before the optimizer in the state's handlers: a commit whose optimizer
    copy fails must not have kept the new model (nor the new plain attributes) beside the old
    optimizer state; the rollback then gives the last whole commit back."""
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.5, momentum=0.5)
    model = torch.nn.Module()
    model.param = param
    registry = [(torch.optim.Optimizer, _GatherFails), (torch.nn.Module, StateDictHandler)]
    state = HandlerState(registry, model=model, optimizer=opt, step=0)
    _step(param, opt)
    state.step = 1
    state.save()                                      # commit 1 (State.commit's save)
    _step(param, opt)
    state.step = 2
    with pytest.raises(FuseInternalError):
        state.save()                                  # commit 2: the optimizer's copy fails
    _step(param, opt)
    state.restore()
    assert state.step == 1
    assert param.tolist() == [-0.5, -0.5]             # the model of commit 1
    assert opt.state[param]["momentum_buffer"].tolist() == [1.0, 1.0]
