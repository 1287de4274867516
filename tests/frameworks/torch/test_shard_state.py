"""A split parameter's optimizer state (fuse.frameworks.torch.shard_state): which optimizers
may be split, and a state cut into blocks and joined again, in one process."""

import needs
import pytest

torch = needs.module("torch")

from fuse.frameworks.torch.shard_state import assemble, splits_parameters  # noqa: E402


def _stepped(opt_class, **kw):
    p = torch.nn.Parameter(torch.randn(3, 4, generator=torch.Generator().manual_seed(1)))
    opt = opt_class([p], **kw)
    for _ in range(2):
        p.grad = torch.randn(3, 4)
        opt.step()
    return p, opt


def test_element_wise_optimizers_split_by_default_others_only_when_asked():
    p = [torch.nn.Parameter(torch.zeros(2))]
    for cls in (torch.optim.SGD, torch.optim.AdamW, torch.optim.Adagrad, torch.optim.Rprop):
        assert splits_parameters(cls(p, lr=0.1), None)
        assert not splits_parameters(cls(p, lr=0.1), False)

    class Lamb(torch.optim.Adam):       # a subclass may add statistics over a parameter
        pass
    assert not splits_parameters(Lamb(p), None)
    assert splits_parameters(Lamb(p), True)
    assert not splits_parameters(torch.optim.Adafactor(p), None)
    with pytest.raises(ValueError, match="Adafactor.*row and column"):
        splits_parameters(torch.optim.Adafactor(p), True)
    with pytest.raises(ValueError, match="LBFGS"):
        splits_parameters(torch.optim.LBFGS(p), True)


def test_blocks_of_a_state_join_back_to_it():
    p, opt = _stepped(torch.optim.AdamW, lr=0.1, amsgrad=True)
    whole = opt.state[p]
    blocks = [(a, b, assemble([(0, 12, whole)], a, b, "w")) for a, b in ((0, 5), (5, 12))]
    for a, b, block in blocks:
        assert block["exp_avg"].shape == (b - a,)
        assert torch.equal(block["exp_avg"], whole["exp_avg"].reshape(-1)[a:b])
        # a copy: stepping a block leaves the whole state (and the other block) alone
        assert block["step"] is not whole["step"] and float(block["step"]) == 2
        assert block["exp_avg"].untyped_storage().data_ptr() != \
            whole["exp_avg"].untyped_storage().data_ptr()
    joined = assemble(blocks, 0, 12, "w", p.shape)
    for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"):
        assert torch.equal(joined[key], whole[key]), key
    # the whole range of one piece comes back as it is; a gap gives None
    assert assemble([(0, 12, whole)], 0, 12, "w", p.shape) is whole
    assert assemble(blocks[1:], 0, 12, "w", p.shape) is None
    # of two pieces that both fit, the first wins
    newer = {k: v + 1 for k, v in blocks[0][2].items()}
    got = assemble([(0, 5, newer)] + blocks, 0, 12, "w", p.shape)
    assert torch.equal(got["exp_avg"].reshape(-1)[:5], newer["exp_avg"])
    # ... also where the first begins after the one that covers everything
    newer_tail = {k: v + 1 for k, v in blocks[1][2].items()}
    got = assemble([(5, 12, newer_tail), (0, 12, whole)], 0, 12, "w", p.shape)
    assert torch.equal(got["exp_avg"].reshape(-1)[5:], newer_tail["exp_avg"])
    assert torch.equal(got["exp_avg"].reshape(-1)[:5], whole["exp_avg"].reshape(-1)[:5])
    assert float(got["step"]) == float(whole["step"])     # the scalars of element 0's piece
    # and a piece passed later fills only what the earlier ones leave
    middle = {k: v + 1 for k, v in assemble([(0, 12, whole)], 3, 7, "w").items()}
    got = assemble([(3, 7, middle), (0, 12, whole)], 2, 9, "w")
    flat = whole["exp_avg"].reshape(-1)
    assert torch.equal(got["exp_avg"], torch.cat([flat[2:3], middle["exp_avg"], flat[7:9]]))


def test_a_state_that_is_not_one_value_per_element_is_refused():
    p, opt = _stepped(torch.optim.Adafactor, lr=0.1)
    with pytest.raises(ValueError, match=r"parameter emb\.weight .*not element-wise"):
        assemble([(0, 12, opt.state[p])], 0, 6, "emb.weight")
