"""The elastic state handlers on their own (no job): what a rollback restores.  The end-to-end
behaviour, with real workers that fail, is in tests/runner/elastic."""

import needs

torch = needs.module("torch")

from fuse.worker.elastic_handlers import StateDictHandler  # noqa: E402


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
