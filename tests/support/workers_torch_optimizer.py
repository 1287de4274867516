"""Worker side of test_optimizer.py."""

from __future__ import annotations

import copy

import torch

import fuse.torch as hvd


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def _batches(step, n_ranks, per_rank):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(n_ranks * per_rank, 1, 8, 8, generator=g)
    y = torch.randint(0, 3, (n_ranks * per_rank,), generator=g)
    return x, y


def _max_diff(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def equivalence():
    """2 workers x batch B with DistributedOptimizer == 1 process with batch 2B (20 steps of SGD
    with momentum and of Adam); backward_passes_per_step=2 == one step on the concatenation."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    B = 4
    out = {}
    loss_fn = torch.nn.functional.cross_entropy
    for label, make in (("sgd", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
                        ("adam", lambda p: torch.optim.Adam(p, lr=0.01))):
        torch.manual_seed(r)                    # different start on each rank...
        dist_model = Net()
        torch.manual_seed(0)
        ref_model = Net()
        opt = hvd.DistributedOptimizer(make(dist_model.parameters()),
                                       named_parameters=dist_model.named_parameters())
        hvd.broadcast_parameters(dist_model.state_dict(), root_rank=0)   # ...made equal
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        ref_model.load_state_dict(dist_model.state_dict())
        ref_opt = make(ref_model.parameters())
        for step in range(20):
            x, y = _batches(step, n, B)
            opt.zero_grad()
            loss_fn(dist_model(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]).backward()
            opt.step()
            ref_opt.zero_grad()
            loss_fn(ref_model(x), y).backward()
            ref_opt.step()
        out[label] = _max_diff(dist_model, ref_model)
        moved = max((p - q).abs().max().item() for p, q in
                    zip(dist_model.parameters(), Net().parameters()))
        assert moved > 1e-3, "training did not change the weights"

    # backward_passes_per_step=2, loss scaled by 1/2 per micro-batch (as Horovod users do)
    torch.manual_seed(0)
    dist_model = Net()
    ref_model = copy.deepcopy(dist_model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist_model.parameters(), lr=0.1,
                                                   momentum=0.9),
                                   named_parameters=dist_model.named_parameters(),
                                   backward_passes_per_step=2)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1, momentum=0.9)
    for step in range(5):
        x, y = _batches(100 + step, n * 2, B)            # 4 micro-batches of B
        opt.zero_grad()
        for micro in range(2):
            k = 2 * r + micro
            (loss_fn(dist_model(x[k * B:(k + 1) * B]), y[k * B:(k + 1) * B]) / 2).backward()
        opt.step()
        ref_opt.zero_grad()
        loss_fn(ref_model(x), y).backward()
        ref_opt.step()
    out["bpps2"] = _max_diff(dist_model, ref_model)
    return out


class WideNet(torch.nn.Module):
    """Weights big enough to go through the engine's fusion buffer (above the inline size,
    below the zero-copy size), and small biases that travel inline."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(64, 256)
        self.l2 = torch.nn.Linear(256, 256)
        self.l3 = torch.nn.Linear(256, 3)

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


def gradient_layout():
    """After the first step DistributedOptimizer keeps the fused gradients back to back in
    backward order, so the engine reduces them without its fusion buffer (and, the ranks
    being on one host, with the buffer in shared memory, straight between the ranks' buffers:
    the fused 320 KiB is above FUSE_SHM_THRESHOLD); training still
    equals 1 process with batch 2B, with zero_grad(set_to_none=True) (the hook copies each
    new gradient into its slot) and set_to_none=False (autograd accumulates into the slot).
    With set_to_none=True, once the layout is built, the hook before accumulation has backward
    write each slotted gradient into its slot and autograd keep it there: the hook after
    accumulation copies nothing.
    Per-parameter hooks fuse whatever is ready together (timing decides); ``groups=1``
    submits everything as one group, which always fuses the two weights."""
    from fuse.worker import lifecycle
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    B = 4
    loss_fn = torch.nn.functional.cross_entropy
    engine = lifecycle.engine()
    out = {}
    for label, groups in (("hooks", None), ("one group", 1)):
        torch.manual_seed(0)
        model = WideNet()
        ref = copy.deepcopy(model)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05,
                                                       momentum=0.9),
                                       named_parameters=model.named_parameters(), groups=groups)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
        copied, adjacent, direct, placed, received = [], [], [], [], []
        for step in range(20):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(n * B, 64, generator=g)
            y = torch.randint(0, 3, (n * B,), generator=g)
            before = engine.stats()
            layout_before = (opt._layout.copied, opt._layout.received)
            opt.zero_grad(set_to_none=step < 10)
            loss_fn(model(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]).backward()
            placed.append(opt._layout.copied - layout_before[0])
            received.append(opt._layout.received - layout_before[1])
            opt.step()
            after = engine.stats()
            copied.append(after["fused"] - before["fused"])
            adjacent.append(after["adjacent"] - before["adjacent"])
            direct.append(after["shm_direct"] - before["shm_direct"])
            ref_opt.zero_grad()
            loss_fn(ref(x), y).backward()
            ref_opt.step()
        weights = [model.l1.weight, model.l2.weight]
        out[label] = {
            "diff": _max_diff(model, ref), "copied": copied, "adjacent": adjacent,
            "direct": direct, "placed": placed, "received": received,
            "storages": len({p.grad.untyped_storage().data_ptr() for p in weights}),
            "fusable": [engine.goes_through_fusion_buffer(p.numel() * 4, 0)
                        for p in model.parameters()],
            "slot_bytes": opt._layout.nbytes}
    return out


def in_place_gradient_slot():
    """Run with FUSE_ZERO_COPY_THRESHOLD=128 KiB: WideNet's 256 KiB l2.weight is then reduced
    where it lies, and the ranks sharing a host, it gets a slot of its own in shared memory
    (l1.weight, fused alone, gets none), so from the second step on the engine reduces it
    straight between the ranks' slots instead of staging it through its segments; training
    still equals 1 process with batch 2B."""
    from fuse.worker import lifecycle
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    B = 4
    loss_fn = torch.nn.functional.cross_entropy
    engine = lifecycle.engine()
    torch.manual_seed(0)
    model = WideNet()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    direct, received = [], []
    for step in range(4):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(n * B, 64, generator=g)
        y = torch.randint(0, 3, (n * B,), generator=g)
        before, got = engine.stats()["shm_direct"], opt._layout.received
        opt.zero_grad()
        loss_fn(model(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]).backward()
        opt.step()
        direct.append(engine.stats()["shm_direct"] - before)
        received.append(opt._layout.received - got)
        ref_opt.zero_grad()
        loss_fn(ref(x), y).backward()
        ref_opt.step()
    return {"diff": _max_diff(model, ref), "slot_bytes": opt._layout.nbytes,
            "direct": direct, "received": received,
            "in_slot": model.l2.weight.grad.untyped_storage().data_ptr()
            != model.l1.weight.grad.untyped_storage().data_ptr()}


def batched_hooks():
    """The hooks queue ready gradients in batches (FUSE_GRAD_BATCH_BYTES): WideNet's 6
    gradients as one batch at the end of backward (one coordinator cycle a step on rank 0),
    or cut by a smaller cap; the ranks may batch differently (rank 0 queues each gradient
    alone in "mixed"), since each gradient is still its own collective.  Each case trains like 1
    process with batch 2B."""
    from fuse.worker import lifecycle
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    B = 4
    loss_fn = torch.nn.functional.cross_entropy
    engine = lifecycle.engine()
    # (rank 0's cap, rank 1's); None: the default
    caps = {"default": (None, None), "mixed": (0, None), "cut": (64 * 1024, 300 * 1024)}
    out = {}
    for label, per_rank in caps.items():
        torch.manual_seed(0)
        model = WideNet()
        ref = copy.deepcopy(model)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05,
                                                       momentum=0.9),
                                       named_parameters=model.named_parameters())
        default_cap = opt._batch_bytes
        if per_rank[r] is not None:
            opt._batch_bytes = per_rank[r]
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
        cycles = []
        for step in range(4):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(n * B, 64, generator=g)
            y = torch.randint(0, 3, (n * B,), generator=g)
            before = engine.stats()["cycles"]
            opt.zero_grad()
            loss_fn(model(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]).backward()
            queued_in_backward = all(e.handle is not None
                                     for es in opt._handles.values() for e in es)
            opt.step()
            cycles.append(engine.stats()["cycles"] - before)
            ref_opt.zero_grad()
            loss_fn(ref(x), y).backward()
            ref_opt.step()
        out[label] = {"diff": _max_diff(model, ref), "cycles": cycles,
                      "queued_in_backward": queued_in_backward,
                      "default_cap": default_cap}
    return out


def _one_step(opt, model, r, scale=1.0):
    opt.zero_grad()
    (model(torch.ones(2, 1, 8, 8) * (r + 1)).sum() * scale).backward()
    opt.step()


def options():
    """compression, op, predivide, groups/num_groups, sparse, process_set, skip_synchronize,
    unused parameters, errors, isinstance and LR schedulers."""
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    res = {}

    def grads_after(**kw):
        torch.manual_seed(0)
        m = Net()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0),
                                       named_parameters=m.named_parameters(), **kw)
        opt.zero_grad()
        (m(torch.ones(2, 1, 8, 8) * (r + 1)).sum()).backward()
        opt.synchronize()
        return [p.grad.clone() for p in m.parameters()], opt

    def local_grads(rank):
        torch.manual_seed(0)
        m = Net()
        (m(torch.ones(2, 1, 8, 8) * (rank + 1)).sum()).backward()
        return [p.grad.clone() for p in m.parameters()]

    per_rank = [local_grads(k) for k in range(n)]
    mean = [sum(gs) / n for gs in zip(*per_rank)]
    total = [sum(gs) for gs in zip(*per_rank)]

    def close(a, b, tol=1e-5):
        return all(torch.allclose(x, y, rtol=tol, atol=tol) for x, y in zip(a, b))

    assert not close(per_rank[0], per_rank[1]), "ranks must have different gradients"
    assert close(grads_after()[0], mean)
    assert close(grads_after(op=hvd.Sum)[0], total)
    assert close(grads_after(gradient_predivide_factor=2.0)[0], mean)
    assert close(grads_after(groups=2)[0], mean)
    assert close(grads_after(num_groups=3)[0], mean)
    torch.manual_seed(0)
    g_fp16 = grads_after(compression=hvd.Compression.fp16)[0]
    assert close(g_fp16, mean, 1e-2) and not close(g_fp16, mean, 1e-7)
    assert close(grads_after(compression=hvd.Compression.bf16)[0], mean, 3e-2)
    # groups as a list of lists of parameters
    torch.manual_seed(0)
    m = Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0),
                                   groups=[[m.conv.weight, m.fc.weight]])
    opt.zero_grad()
    (m(torch.ones(2, 1, 8, 8) * (r + 1)).sum()).backward()
    opt.synchronize()
    assert close([p.grad for p in m.parameters()], mean)
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                 gradient_predivide_factor=2.0, op=hvd.Sum)
        raise AssertionError("predivide with Sum must fail")
    except ValueError:
        pass

    # identity of the wrapper
    assert isinstance(opt, torch.optim.SGD) and isinstance(opt, torch.optim.Optimizer)
    assert isinstance(opt, hvd.DistributedOptimizer)
    assert not isinstance(opt, torch.optim.Adam)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.param_groups[0]["lr"] = 0.0
    _one_step(opt, m, r)
    sched.step()
    assert opt.wrapped_optimizer.param_groups[0]["lr"] == 0.0
    assert opt.state_dict()["param_groups"][0]["lr"] == 0.0

    # skip_synchronize with gradient clipping
    torch.manual_seed(0)
    m = Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0),
                                   named_parameters=m.named_parameters())
    opt.zero_grad()
    (m(torch.ones(2, 1, 8, 8) * (r + 1)).sum()).backward()
    opt.synchronize()
    assert close([p.grad for p in m.parameters()], mean)
    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.01)
    clipped = [p.grad.clone() for p in m.parameters()]
    with opt.skip_synchronize():
        opt.step()
    assert close([p.grad for p in m.parameters()], clipped), "step re-synchronized"

    # zero_grad after backward, too many backward passes
    opt.zero_grad()
    m(torch.ones(2, 1, 8, 8)).sum().backward()
    try:
        opt.zero_grad()
        raise AssertionError("zero_grad between backward and step must fail")
    except AssertionError as err:
        assert "zero_grad() was called after loss.backward()" in str(err), err
    try:
        m(torch.ones(2, 1, 8, 8)).sum().backward()
        raise AssertionError("a second backward must fail")
    except AssertionError as err:
        assert "more than backward_passes_per_step" in str(err), err
    opt.synchronize()
    with opt.skip_synchronize():
        opt.step()

    # named_parameters misuse
    for bad, text in (([("a", m.conv.weight), ("a", m.conv.bias)], "unique"),
                      ([("a", m.conv.weight)], "not named"),
                      ([m.conv.weight], "tuples")):
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                     named_parameters=bad)
            raise AssertionError(f"bad named_parameters accepted: {text}")
        except ValueError as err:
            assert text in str(err), err

    # a parameter unused on rank 1 only: reduced as zeros there, no hang
    torch.manual_seed(0)
    m = Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0),
                                   named_parameters=m.named_parameters())
    opt.zero_grad()
    x = torch.ones(2, 1, 8, 8)
    loss = m(x).sum() if r == 0 else m.conv(x).sum()
    loss.backward()
    opt.step()
    torch.manual_seed(0)
    m0 = Net()
    m0(x).sum().backward()
    assert torch.allclose(m.fc.weight.grad, m0.fc.weight.grad / 2), "unused -> zeros"

    # sparse gradients: allgathered, or reduced dense with sparse_as_dense
    for as_dense in (False, True):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.0),
                                       sparse_as_dense=as_dense)
        opt.zero_grad()
        emb(torch.tensor([r, 5])).sum().backward()
        opt.synchronize()
        want = torch.zeros(10, 3)
        want[0] += 0.5
        want[1] += 0.5
        want[5] += 1.0
        assert torch.allclose(emb.weight.grad.to_dense(), want), (as_dense,
                                                                  emb.weight.grad)
        # reduced dense with sparse_as_dense, but handed back sparse (as Horovod, so that
        # SparseAdam works either way)
        assert emb.weight.grad.is_sparse
        with opt.skip_synchronize():
            opt.step()

    # process set: a set of rank 0 alone leaves rank 0's gradients local
    ps = hvd.add_process_set([0])
    torch.manual_seed(0)
    m = Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0),
                                   named_parameters=m.named_parameters(), process_set=ps)
    opt.zero_grad()
    (m(torch.ones(2, 1, 8, 8) * (r + 1)).sum()).backward()
    opt.step()
    assert close([p.grad for p in m.parameters()], per_rank[r])
    res["ok"] = True
    return res


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


OPTIMIZERS = ["SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop",
              "ASGD", "NAdam", "RAdam", "LBFGS", "SparseAdam", "Adafactor", "Muon"]


def optimizer_state():
    """broadcast_optimizer_state for every torch.optim optimizer, lazy state included: rank 1
    starts empty (or with other options), and ends with rank 0's state dict."""
    hvd.init()
    r = hvd.rank()
    done = []
    for name in OPTIMIZERS:
        cls = getattr(torch.optim, name, None)
        if cls is None:
            continue
        torch.manual_seed(0)
        if name == "SparseAdam":
            model = torch.nn.Embedding(6, 3, sparse=True)
        else:
            model = torch.nn.Linear(4, 3)
        params = list(model.parameters())
        if name == "Muon":
            params = [model.weight]
        lr = 0.01 if r == 0 else 0.5
        opt = cls(params, lr=lr, momentum=0.9) if name == "SGD" else cls(params, lr=lr)
        if r == 0:      # rank 0 has stepped; rank 1's state is still lazily empty
            for _ in range(2):
                def closure():
                    opt.zero_grad()
                    inp = torch.tensor([1, 2]) if name == "SparseAdam" else torch.ones(2, 4)
                    loss = model(inp).pow(2).sum()
                    loss.backward()
                    return loss
                opt.step(closure)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        state = opt.state_dict()
        gathered = hvd.allgather_object(state)
        a, b = gathered
        assert a["param_groups"] == b["param_groups"], (name, a["param_groups"],
                                                        b["param_groups"])
        assert a["param_groups"][0]["lr"] == 0.01
        assert a["state"].keys() == b["state"].keys() and len(a["state"]) > 0, name
        for k in a["state"]:
            for key, v in a["state"][k].items():
                assert _same(v, b["state"][k][key]), (name, key)
        done.append(name)
    return done


def sync_batch_norm():
    """SyncBatchNorm over 2 workers == BatchNorm over the concatenated batch (output, input
    gradient, parameter gradient after averaging, running statistics)."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    g = torch.Generator().manual_seed(7)
    full = torch.randn(8, 3, 5, 5, generator=g) * 2 + 1
    w_out = torch.randn(8, 3, 5, 5, generator=g)
    ref = torch.nn.BatchNorm2d(3)
    sbn = hvd.SyncBatchNorm(3)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        sbn.weight.copy_(ref.weight)
    xin = full.clone().requires_grad_(True)
    ref_out = ref(xin)
    (ref_out * w_out).sum().backward()
    mine = full[r * 4:(r + 1) * 4].clone().requires_grad_(True)
    y = sbn(mine)
    (y * w_out[r * 4:(r + 1) * 4]).sum().backward()
    assert torch.allclose(y, ref_out[r * 4:(r + 1) * 4].detach(), atol=1e-5)
    assert torch.allclose(mine.grad, xin.grad[r * 4:(r + 1) * 4], atol=1e-5), "input grad"
    wgrad = hvd.allreduce(sbn.weight.grad, op=hvd.Sum)
    assert torch.allclose(wgrad, ref.weight.grad, atol=1e-4), (wgrad, ref.weight.grad)
    assert torch.allclose(sbn.running_mean, ref.running_mean, atol=1e-6)
    assert torch.allclose(sbn.running_var, ref.running_var, atol=1e-5)
    sbn.eval()
    ref.eval()
    assert torch.allclose(sbn(full), ref(full), atol=1e-5)
    return True
