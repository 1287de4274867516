"""Worker side of test_training_flows.py: the training patterns Horovod documents beyond a
plain step (AMP loss scaling with gradient clipping, uneven data with join)."""

from __future__ import annotations

import copy

import torch

import fuse.torch as hvd
from workers_torch_optimizer import Net, _batches, _max_diff

B = 4
_loss = torch.nn.functional.cross_entropy


def _amp_step(model, opt, scaler, x, y, sync, poison=False):
    """Horovod's documented AMP recipe: synchronize, unscale, clip, then step without a
    second synchronization."""
    opt.zero_grad()
    loss = _loss(model(x), y)
    if poison:
        # An overflow on this rank only, in the backward pass itself: the allreduces start
        # from gradient hooks during backward, so a gradient edited afterwards would be
        # overwritten by the reduced value.
        loss = loss * float("inf")
    scaler.scale(loss).backward()
    if sync:
        opt.synchronize()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)
    if sync:
        with opt.skip_synchronize():
            scaler.step(opt)
    else:
        scaler.step(opt)
    scaler.update()


def amp_grad_scaler():
    """GradScaler + clip_grad_norm_ through synchronize()/skip_synchronize(): 2 workers with
    batch B equal 1 process with batch 2B (clipping sees the averaged gradients), and an
    overflow on one rank makes every rank skip the step and lower its scale."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    # Powers of two scale exactly, so the distributed and the reference run agree to rounding.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1000)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1000)
    for step in range(20):
        x, y = _batches(step, n, B)
        _amp_step(model, opt, scaler, x[r * B:(r + 1) * B], y[r * B:(r + 1) * B], sync=True)
        _amp_step(ref, ref_opt, ref_scaler, x, y, sync=False)
    out = {"diff": _max_diff(model, ref), "scale": scaler.get_scale()}

    before = [p.detach().clone() for p in model.parameters()]
    x, y = _batches(99, n, B)
    _amp_step(model, opt, scaler, x[r * B:(r + 1) * B], y[r * B:(r + 1) * B], sync=True,
              poison=(r == 1))
    out["skipped"] = all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    out["scale_after_overflow"] = scaler.get_scale()
    hvd.shutdown()
    return out


def join_uneven_steps():
    """Rank 0 runs out of data after 3 steps and joins; rank 1 trains 2 more steps, rank 0
    contributing zeros (Average still divides by the set size, as in Horovod).  join() returns
    the last rank to join on both; broadcasting from it leaves both with the same weights."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    steps = 3 if r == 0 else 5
    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(steps):
        x, y = _batches(step, n, B)
        opt.zero_grad()
        _loss(model(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]).backward()
        opt.step()
        # the reference: the whole batch while both ranks train, then rank 1's half at 1/n
        ref_opt.zero_grad()
        if step < 3:
            _loss(ref(x), y).backward()
        else:
            (_loss(ref(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]) / n).backward()
        ref_opt.step()
    out = {"diff_from_reference": _max_diff(model, ref)}
    last = hvd.join()
    out["last_joined"] = last
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    out["weights"] = [p.detach().clone() for p in model.parameters()]
    out["diff_after_broadcast"] = _max_diff(model, ref) if r == last else None
    hvd.shutdown()
    return out
