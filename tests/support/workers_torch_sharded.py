"""Worker side of test_sharded_optimizer.py: DistributedOptimizer(sharded=True) against the
unsharded optimizer and against a plain one-process optimizer."""

from __future__ import annotations

import copy

import torch

import fuse.torch as hvd

B = 4           # samples per rank and step
STEPS = 6


class Net(torch.nn.Module):
    """Four layers of similar size, so that a balanced shard holds about 1/N of the bytes."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(24, 24) for _ in range(4))
        self.head = torch.nn.Linear(24, 3)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)

    @staticmethod
    def inputs(g, count):
        return torch.randn(count, 24, generator=g)


class TinyLM(Net):
    """Net behind a token embedding of 61 % of the parameters' bytes (a transformer's is about
    half): owned whole, it alone is more than a rank's share at 2 ranks and at 4."""

    VOCAB = 160

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(self.VOCAB, 24)

    def forward(self, tokens):
        return super().forward(self.embed(tokens).mean(dim=1))

    @staticmethod
    def inputs(g, count):
        return torch.randint(0, TinyLM.VOCAB, (count, 5), generator=g)


MODELS = {"net": Net, "lm": TinyLM}


def _batch(model, step, n):
    g = torch.Generator().manual_seed(500 + step)
    return type(model).inputs(g, n * B), torch.randint(0, 3, (n * B,), generator=g)


def _adamw(params):
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def _max_diff(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def _state_bytes(opt):
    return sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
               if torch.is_tensor(v) and v.dim() > 0)


def _train(model, opt, steps, first, rank, n, passes=1, clip=None, process_set=None):
    """``steps`` steps on this rank's part of the batches ``first, first + 1, ...``."""
    loss_fn = torch.nn.functional.cross_entropy
    for step in range(first, first + steps):
        x, y = _batch(model, step, n * passes)
        opt.zero_grad()
        for micro in range(passes):
            k = rank * passes + micro
            loss = loss_fn(model(x[k * B:(k + 1) * B]), y[k * B:(k + 1) * B]) / passes
            loss.backward()
        if clip is None:
            opt.step()
            continue
        opt.synchronize()
        if hasattr(type(opt), "clip_grad_norm_"):           # the sharded optimizer
            opt.clip_grad_norm_(clip)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with opt.skip_synchronize():
            opt.step()


VARIANTS = {      # label: (DistributedOptimizer keywords, backward passes, clip norm)
    "bpps2": ({"backward_passes_per_step": 2}, 2, None),
    "predivide": ({"gradient_predivide_factor": 2.0}, 1, None),
    "fp16": ({"compression": hvd.Compression.fp16}, 1, None),
    "bf16": ({"compression": hvd.Compression.bf16}, 1, None),
    "clip": ({}, 1, 0.05),
}


def equivalence(bucket_bytes, variants, init=True, model="net"):
    """AdamW with and without sharded=True, on ``MODELS[model]``, with the options
    ``variants`` names; the consolidated state; a plain AdamW restored from it continuing as
    the sharded one does."""
    if init:
        hvd.init()
    r, n = hvd.rank(), hvd.size()
    res = {}
    for label in variants:
        kw, passes, clip = VARIANTS[label]
        (sm, so), (um, uo) = _pair_with(r, bucket_bytes, model, **kw)
        _train(sm, so, STEPS, 0, r, n, passes, clip)
        _train(um, uo, STEPS, 0, r, n, passes, clip)
        moved = _max_diff(sm, _fresh(model))
        res[label] = {"diff": _max_diff(sm, um), "moved": moved}
    # state per rank, and the consolidated state against the unsharded optimizer's
    (sm, so), (um, uo) = _pair_with(r, bucket_bytes, model)
    _train(sm, so, STEPS, 0, r, n)
    _train(um, uo, STEPS, 0, r, n)
    res["diff"], res["moved"] = _max_diff(sm, um), _max_diff(sm, _fresh(model))
    # (state_dict() holds references to the live state, as torch's does; loading one keeps
    # them: copies, so that the optimizers below do not share their state)
    full, ref = copy.deepcopy(so.state_dict()), uo.state_dict()
    res["state_bytes"] = _state_bytes(so)
    res["unsharded_state_bytes"] = _state_bytes(uo)
    res["owned"] = len(so.owned_parameters)
    res["split"] = sorted(so.__dict__["_plan"].split)
    # which buckets were allreduced (padded past ALLREDUCE_PAST_PADDING) rather than
    # reduce-scattered
    res["allreduced"] = list(so.__dict__["_allreduced"])
    res["state_keys_equal"] = sorted(full["state"]) == sorted(ref["state"])
    res["state_diff"] = max((full["state"][k][name] - ref["state"][k][name]).abs().max().item()
                            for k in ref["state"] for name in ("exp_avg", "exp_avg_sq"))
    # load_state_dict of a full state keeps this rank's shard only
    (lm, lo), _ = _pair_with(r, bucket_bytes, model)
    lm.load_state_dict(sm.state_dict())
    lo.load_state_dict(copy.deepcopy(full))
    res["loaded_bytes"] = _state_bytes(lo)
    # a plain AdamW, one process, on the whole batch, restored from the consolidated state
    plain_model = copy.deepcopy(sm)
    plain = _adamw(plain_model.parameters())
    plain.load_state_dict(copy.deepcopy(full))
    _train(plain_model, plain, 4, STEPS, 0, 1, passes=n)   # n micro-batches = every rank's
    _train(sm, so, 4, STEPS, r, n)
    _train(lm, lo, 4, STEPS, r, n)
    res["continued_diff"] = _max_diff(sm, plain_model)
    res["loaded_continued_diff"] = _max_diff(sm, lm)
    if init:
        hvd.shutdown()
    return res


def both_models(bucket_bytes, variants):
    """``equivalence`` on Net, then on TinyLM (its embedding split into blocks), in one job."""
    hvd.init()
    res = {"net": equivalence(bucket_bytes, variants, init=False),
           "lm": equivalence(bucket_bytes, variants, init=False, model="lm")}
    hvd.shutdown()
    return res


def _fresh(model="net"):
    torch.manual_seed(0)
    return MODELS[model]()


def _pair_with(rank, bucket_bytes, model_name="net", **kw):
    out = []
    for sharded in (True, False):
        model = _fresh(model_name)
        extra = {"sharded": True, "bucket_bytes": bucket_bytes} if sharded else {}
        opt = hvd.DistributedOptimizer(_adamw(model.parameters()),
                                       named_parameters=model.named_parameters(),
                                       **extra, **kw)
        out.append((model, opt))
    return out


def four_workers(bucket_bytes):
    """On 4 workers (one job: the workers' start is most of a test's time): equivalence with
    no options, then a process set of two of the job's ranks, broadcast_optimizer_state of a
    checkpoint loaded on the root only, and the combinations sharding refuses."""
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    res = {"equivalence": equivalence(bucket_bytes, [], init=False),
           "lm": equivalence(bucket_bytes, ["clip"], init=False, model="lm")}
    # sharded over ranks {1, 3} (of 4): the set's members match the unsharded optimizer on
    # the same set; the others never call it
    ps = hvd.add_process_set([1, 3])
    if r in (1, 3):
        (sm, so), (um, uo) = _pair_with(r, 2048, process_set=ps)
        _train(sm, so, STEPS, 0, ps.rank(), 2)
        _train(um, uo, STEPS, 0, ps.rank(), 2)
        res["pset_diff"] = _max_diff(sm, um)
    hvd.remove_process_set(ps)

    # broadcast_optimizer_state: rank 0 loads a checkpoint, every rank gets its shard of it
    (sm, so), (um, uo) = _pair_with(r, 2048)
    _train(um, uo, 2, 0, r, n)
    checkpoint = copy.deepcopy(uo.state_dict())     # a checkpoint, not the live state
    sm.load_state_dict(um.state_dict())
    if r == 0:
        so.load_state_dict(checkpoint)
    hvd.broadcast_optimizer_state(so, root_rank=0)
    _train(sm, so, 3, 2, r, n)
    _train(um, uo, 3, 2, r, n)
    res["broadcast_diff"] = _max_diff(sm, um)

    errors = {}
    model = Net()
    for label, kw in (("adasum", {"op": hvd.Adasum}),
                      ("powersgd", {"compression": hvd.Compression.powersgd(rank=2)}),
                      ("groups", {"groups": 2})):
        try:
            hvd.DistributedOptimizer(_adamw(model.parameters()), sharded=True, **kw)
            errors[label] = None
        except ValueError as err:
            errors[label] = str(err)
    # Adafactor keeps row and column factors: never split by default, refused when forced
    lm = _fresh("lm")
    res["adafactor_split"] = sorted(hvd.DistributedOptimizer(
        torch.optim.Adafactor(lm.parameters()), sharded=True).__dict__["_plan"].split)
    try:
        hvd.DistributedOptimizer(torch.optim.Adafactor(lm.parameters()), sharded=True,
                                 split_parameters=True)
        errors["adafactor"] = None
    except ValueError as err:
        errors["adafactor"] = str(err)
    # a split parameter's other blocks are other ranks': without its hooks, no step
    opt = hvd.DistributedOptimizer(_adamw(lm.parameters()), sharded=True)
    opt.remove_hooks()
    try:
        opt.step()
        errors["removed_hooks"] = None
    except RuntimeError as err:
        errors["removed_hooks"] = str(err)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.1),
                                   named_parameters=emb.named_parameters(), sharded=True)
    try:
        emb(torch.tensor([1, 2])).sum().backward()
        opt.step()
        errors["sparse"] = None
    except ValueError as err:
        errors["sparse"] = str(err)
    res["errors"] = errors
    # sparse_as_dense: reduced as dense, and equal on every rank afterwards
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.1),
                                   named_parameters=emb.named_parameters(), sharded=True,
                                   sparse_as_dense=True)
    emb(torch.tensor([r, r + 5])).sum().backward()
    opt.step()
    res["sparse_as_dense_weight"] = emb.weight.detach().clone()
    hvd.shutdown()
    return res
