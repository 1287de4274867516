"""``DistributedOptimizer(..., sharded=True)``: optimizer state and gradients sharded across the
process set (ZeRO stage 2), behind the Horovod API.

How a step goes:

* The parameters are planned once (:mod:`fuse.collectives.shard_plan`): each is owned by one
  rank, chosen so that every rank owns about ``1/size`` of the bytes, and they are cut, in
  backward order, into buckets of about ``bucket_bytes``.  Where one parameter is too large
  for that (a transformer's token embedding), it is split into ``size`` blocks owned by
  different ranks, if the optimizer is element-wise (:mod:`.shard_state`): the wrapped
  optimizer steps a rank's block as a tensor of its own, a view of the parameter's elements,
  and keeps state for that block only.
* Each bucket has one flat buffer, kept from step to step, laid out as ``size`` equal
  segments (segment ``r``: the gradients rank ``r`` owns).  A hook before accumulation writes
  a parameter's new gradient straight into its place there and hands autograd that view as
  ``p.grad``.  A ``Tensor.register_post_accumulate_grad_hook`` per parameter counts backward
  passes (as the unsharded optimizer does, :class:`fuse.collectives.grad_sync.PassCounter`).
  When the last gradient of a bucket is complete, the hook copies in what is not in the
  buffer yet (a split parameter's blocks, a gradient accumulated elsewhere), drops the
  gradients from ``p.grad`` and starts one reduce-scatter of the buffer (compressed as asked),
  which the engine may run in the buffer itself, while autograd computes the rest.  Each rank
  receives the average of the gradients it owns.
  (A bucket whose segments differ so much that the padding would cost more than an allreduce,
  ``ALLREDUCE_PAST_PADDING``, is laid out unpadded and allreduced; each rank keeps its part.)
* :meth:`synchronize` submits the buckets the hooks did not (missing gradients as zeros, so no
  rank waits for one another rank never makes), waits, and leaves ``p.grad`` set to the
  averaged gradient for owned parameters and to None for the others.
* ``step()`` runs the wrapped optimizer, which skips parameters without a gradient, so it
  updates and keeps state for the owned parameters only (while it steps, its param groups
  hold this rank's blocks in place of the split parameters); then every rank's updated parameters
  are allgathered (one grouped call, one tensor per bucket, not padded, in place in the
  buckets' buffers) so every rank holds the full model.

``state_dict()`` gathers the full state from every rank (a collective: call it on every rank),
in the format of the wrapped optimizer class (a split parameter's blocks joined);
``load_state_dict()`` of a full state keeps this rank's part.  :meth:`clip_grad_norm_` clips by the global norm of the sharded gradients.
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch

from fuse.collectives import calls as collectives
from fuse.collectives import shard_plan
from fuse.collectives.grad_sync import scaling
from fuse.collectives.ops import Adasum, Average, Max, Sum
from fuse.collectives.powersgd import PowerSGD
from fuse.frameworks.torch import mpi_ops, shard_state
from fuse.frameworks.torch.optimizer_checks import parameter_names, unique_params
from fuse.frameworks.torch.optimizer_wrapper import HookedOptimizer
from fuse.frameworks.torch.tensors import Compression
from fuse.worker import lifecycle
from fuse.job import state as job_state
from fuse.job.process_sets import global_process_set

# DDP's bucket_cap_mb: large enough to fill the link, small enough to overlap with backward
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
# A reduce-scatter's parts are equal, so a bucket whose segments differ in size travels
# padded to ``size`` times the largest.  Past this many times its gradients' bytes, the bucket
# is allreduced unpadded instead and each rank keeps its part: an allreduce moves about
# 1 + 3(n-1)/n times the bytes through a rank, a reduce-scatter 1 + 2(n-1)/n times the padded
# ones (same-host shared memory: the fusion copy, publishing, reducing, collecting), so the
# allreduce is the cheaper from about 1.3 times; 1.5 leaves the even plans alone (the
# ResNet-50-shaped set's buckets: 1.0-1.44 at 4 ranks) and takes a dominant parameter's (a
# transformer's 46 % embedding at 4 ranks: 1.84).
ALLREDUCE_PAST_PADDING = 1.5


class ShardedOptimizer(HookedOptimizer):
    """``optimizer`` with its state and gradients sharded over ``process_set``; made by
    ``DistributedOptimizer(optimizer, ..., sharded=True)``, which documents the arguments.
    ``bucket_bytes``: about how many gradient bytes travel in one reduce-scatter.
    ``split_parameters``: whether a parameter too large for a rank's share may be split into
    blocks owned by different ranks; by default when ``optimizer`` is one of torch's
    element-wise optimizers (:data:`.shard_state.ELEMENTWISE`: SGD, Adam, AdamW, ...), never
    for optimizers with statistics over a parameter (ValueError when asked for torch's
    Adafactor, LBFGS, SparseAdam)."""

    def __init__(self, optimizer, named_parameters=None, compression=Compression.none,
                 backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                 num_groups=0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set, bucket_bytes=DEFAULT_BUCKET_BYTES,
                 split_parameters=None):
        if op == Adasum:
            raise ValueError("DistributedOptimizer(sharded=True) does not support op=Adasum "
                             "(Adasum combines whole optimizer steps; a sharded step has "
                             "only this rank's part)")
        if compression is PowerSGD or isinstance(compression, PowerSGD):
            raise ValueError("DistributedOptimizer(sharded=True) does not support "
                             "Compression.powersgd: its low-rank factors need the whole "
                             "gradient on every rank; use Compression.fp16 or .bf16")
        if groups is not None or num_groups:
            raise ValueError("DistributedOptimizer(sharded=True) does not take groups or "
                             "num_groups: gradients travel in buckets of about bucket_bytes")
        super().__init__(optimizer, backward_passes_per_step)
        d = self.__dict__
        d["_process_set"] = process_set
        params = unique_params(optimizer)
        d["_params"] = params
        d["_index"] = {id(p): i for i, p in enumerate(params)}
        d["_compression"] = compression
        d["_op"], d["_prescale"], d["_postscale"] = scaling(op, gradient_predivide_factor)
        d["_sparse_as_dense"] = sparse_as_dense
        d["_bucket_bytes"] = int(bucket_bytes)
        d["_names"] = [name if name is not None else f"noname.{i}" for i, name in
                       enumerate(parameter_names(params, named_parameters))]
        d["_loaded"] = None         # the full state last loaded, until the next step
        d["_hooks_removed"] = False
        d["_split_ok"] = shard_state.splits_parameters(optimizer, split_parameters)
        # state this rank holds outside the wrapped optimizer, ((param, start, stop), state):
        # what a re-plan or a split took from it, for state_dict() until the next step or load
        d["_stale"] = []
        d["_blocks"] = {}
        self._replan()
        self._drop_foreign_state()
        d["_hook_handles"] = [p.register_post_accumulate_grad_hook(self._hook)
                              for p in params if p.requires_grad] if self._active else []
        if self._active:
            # and one before accumulation, for backward to write into the buckets' buffers
            self._hook_handles.extend(p.register_hook(functools.partial(self._receive, i))
                                      for i, p in enumerate(params) if p.requires_grad)

    def __repr__(self):
        return f"DistributedOptimizer({self.wrapped_optimizer!r}, sharded=True)"

    # ---- the plan, made again when an elastic job re-forms with another size

    def _replan(self) -> None:
        d = self.__dict__
        pset = self._process_set
        d["_engine_generation"] = job_state.engine_generation()
        d["_included"] = pset.included()
        size = len(pset.ranks) if self._included else 1
        d["_size"] = size
        d["_rank"] = pset.rank() if self._included and size > 1 else 0
        # with one rank there is nothing to shard; an elastic job may grow from one
        d["_active"] = (not self._hooks_removed and self._included
                        and (size > 1 or job_state.config().elastic))
        trainable = [p if p.requires_grad else None for p in self._params]
        self._stash_blocks()
        d["_plan"] = plan = shard_plan.plan(
            [p.numel() if p is not None else 0 for p in trainable],
            [p.element_size() if p is not None else 1 for p in trainable],
            [(p.device, p.dtype) if p is not None else None for p in trainable],
            size, self._bucket_bytes,
            [self._split_ok and self._active and p is not None and p.is_contiguous()
             for p in trainable])
        d["_owned_pieces"] = set(plan.owned_by(self._rank))
        d["_owned"] = {plan.pieces[k].param for k in self._owned_pieces}
        d["_params_in"] = [len({plan.pieces[k].param for k in b.members}) for b in plan.buckets]
        self._make_blocks()
        # per bucket: where each rank's segment begins in the flat gradient buffer, and
        # whether the bucket is allreduced (segments packed) rather than reduce-scattered
        # (segments padded to the largest)
        d["_allreduced"] = [size * b.segment > ALLREDUCE_PAST_PADDING
                            * sum(_filled(b, r, plan.pieces) for r in range(size))
                            for b in self._plan.buckets]
        # and where each rank's parameters lie in it for the allgather: back to back
        d["_gather_bases"] = [_packed_bases(b, size, plan.pieces) for b in plan.buckets]
        d["_bases"] = [gather if packed else [r * b.segment for r in range(size + 1)]
                       for b, packed, gather in zip(plan.buckets, self._allreduced,
                                                    self._gather_bases)]
        # per parameter that is one piece: (bucket, where its gradient lies in the bucket's
        # buffer), for backward to write it there (see _receive)
        d["_slots"] = {plan.pieces[k].param: (b, self._bases[b][r] + bucket.offsets[k])
                       for b, bucket in enumerate(plan.buckets)
                       for r, seg in enumerate(bucket.segments) for k in seg
                       if plan.pieces[k].param not in plan.split}
        d["_ready"] = [0] * len(self._plan.buckets)
        d["_handles"] = {}      # bucket index -> (handle, compression ctx)
        # per bucket, kept from step to step: its gradients' buffer, laid out for the
        # reduce-scatter; once reduced, the allgather of the updated parameters runs in it
        d["_grad_flats"] = {}
        d["_synchronized"] = False
        self.pass_counter.reset()

    def _drop_foreign_state(self) -> None:
        """Forget the state of parameters another rank owns (a re-plan keeps it: the next
        ``state_dict`` gathers it from whoever holds it, and loading re-shards)."""
        state = self.wrapped_optimizer.state
        for i, p in enumerate(self._params):
            if i not in self._owned and p in state:
                del state[p]

    # ---- split parameters: this rank's blocks, stepped as tensors of their own

    def _make_blocks(self) -> None:
        """A tensor per block of a split parameter this rank owns: a view of the parameter's
        elements (made with ``set_``: a tensor of its own, so that the wrapped optimizer
        keys its state by it, sharing the parameter's memory), and the state this rank holds
        moved to the pieces it now owns."""
        plan = self._plan
        blocks = {}
        for k in sorted(self._owned_pieces):
            piece = plan.pieces[k]
            if piece.param in plan.split:
                p = self._params[piece.param].detach()
                blocks[k] = torch.empty(0, dtype=p.dtype, device=p.device)
        self.__dict__["_blocks"] = blocks
        self._point_blocks()
        # per param group, the tensors the wrapped optimizer steps (see _stepping), and the
        # piece each is, as (parameter, start, stop)
        steppers, keys = [], []
        for group in self.wrapped_optimizer.param_groups:
            tensors = []
            for p in group["params"]:
                i = self._index[id(p)]
                if i in plan.split:
                    mine = [k for k in self._blocks if plan.pieces[k].param == i]
                    tensors.extend(self._blocks[k] for k in mine)
                    keys.extend(_key(plan.pieces[k]) for k in mine)
                else:
                    tensors.append(p)
                    keys.append((i, 0, p.numel()))
            steppers.append(tensors)
        self.__dict__["_steppers"], self.__dict__["_stepper_keys"] = steppers, keys
        self._adopt_state()

    def _point_blocks(self) -> None:
        """Aim each block at its parameter's memory again (a parameter whose ``.data`` was
        replaced, by ``model.to()`` for one, lives elsewhere since)."""
        for k, block in self._blocks.items():
            piece = self._plan.pieces[k]
            p = self._params[piece.param].detach()
            offset = p.storage_offset() + piece.start
            if block.untyped_storage().data_ptr() != p.untyped_storage().data_ptr() \
                    or block.storage_offset() != offset or block.numel() != piece.numel:
                with torch.no_grad():
                    block.set_(p.untyped_storage(), offset, (piece.numel,), (1,))

    def _stash_blocks(self) -> None:
        """Before a re-plan: the blocks' state out of the wrapped optimizer, kept as pieces."""
        state = self.wrapped_optimizer.state
        for k, block in self._blocks.items():
            if block in state:
                self._stale.append((_key(self._plan.pieces[k]), state.pop(block)))

    def _adopt_state(self) -> None:
        """The state this rank holds (a split parameter's whole state, made before the split
        or eagerly by the optimizer, as Adagrad does; pieces a re-plan took out) cut or
        joined into the pieces it owns now."""
        state, plan = self.wrapped_optimizer.state, self._plan
        for i in plan.split:
            p = self._params[i]
            if p in state:
                self._stale.append(((i, 0, p.numel()), state.pop(p)))
        if not self._stale:
            return
        for k in self._owned_pieces:
            piece = plan.pieces[k]
            p = self._params[piece.param]
            tensor = self._blocks.get(k, p)
            if tensor in state:
                continue
            held = [(a, b, st) for (i, a, b), st in self._stale if i == piece.param]
            got = shard_state.assemble(held, piece.start, piece.stop, self._names[piece.param],
                                       None if k in self._blocks else p.shape)
            if got is not None:
                state[tensor] = got

    @contextlib.contextmanager
    def _stepping(self):
        """The wrapped optimizer's param groups holding this rank's blocks in place of the
        split parameters (what it steps, saves and loads), then the parameters again."""
        if not self._plan.split:
            yield
            return
        self._point_blocks()
        groups = self.wrapped_optimizer.param_groups
        originals = [group["params"] for group in groups]
        for group, tensors in zip(groups, self._steppers):
            group["params"] = tensors
        try:
            yield
        finally:
            # (load_state_dict makes new group dicts)
            for group, params in zip(self.wrapped_optimizer.param_groups, originals):
                group["params"] = params

    def _follow_engine(self) -> None:
        """An elastic job re-formed (shutdown then init): what was in flight is gone with the
        old engine, and the process set may have another size, so plan again."""
        if job_state.engine_generation() != self._engine_generation:
            self._replan()

    # ---- hooks and the reduce-scatter of gradients

    def _hook(self, p):
        self._follow_engine()
        if not self._active:
            return
        i = self._index[id(p)]
        if self.pass_counter.record(i):
            b = self._plan.bucket_of.get(i)
            if b is None:
                return
            self._ready[b] += 1
            if self._ready[b] == self._params_in[b]:
                self._submit(b)

    def _receive(self, i, grad):
        """Before autograd accumulates parameter ``i``'s gradient: when ``p.grad`` is None,
        the gradient written straight into its place in its bucket's buffer, and that view
        handed to autograd, which takes it as ``p.grad`` (as the unsharded optimizer's
        :class:`.GradientLayout` does): ``_submit`` then has nothing to copy, and no gradient
        tensor is made.  Otherwise None: autograd goes on with ``grad`` (accumulating into a
        ``p.grad`` it has, even one in the buffer), and ``_submit`` copies what is elsewhere."""
        self._follow_engine()
        where = self._slots.get(i) if self._active else None
        p = self._params[i]
        if (where is None or p.grad is not None or where[0] in self._handles
                or grad.layout != torch.strided or grad.requires_grad
                or grad.dtype != p.dtype or grad.device != p.device):
            return None
        b, at = where
        flat = self._bucket_buffer(self._grad_flats, b, self._bases[b][-1])
        view = flat[at:at + p.numel()].view(p.shape)    # a tensor of its own, for autograd
        view.copy_(grad)
        return view

    def _dense_grad(self, i, p):
        g = p.grad
        if g is not None and g.is_sparse:
            if not self._sparse_as_dense:
                raise ValueError(f"parameter {self._names[i]} has a sparse gradient; "
                                 "DistributedOptimizer(sharded=True) reduces dense gradients "
                                 "only: pass sparse_as_dense=True")
            g = g.to_dense()
        return g

    def _submit(self, b: int) -> None:
        bucket = self._plan.buckets[b]
        pieces = self._plan.pieces
        bases = self._bases[b]
        flat = self._bucket_buffer(self._grad_flats, b, bases[-1])
        grads = {}
        for k in bucket.members:
            i = pieces[k].param
            if i not in grads:
                grads[i] = self._dense_grad(i, self._params[i])
        if not self._allreduced[b]:
            # the padding, which the last allgather may have written over, zero again
            for r, gather in enumerate(self._gather_bases[b][1:]):
                filled = gather - self._gather_bases[b][r]
                flat[bases[r] + filled:bases[r + 1]].zero_()
        for r, seg in enumerate(bucket.segments):
            base = bases[r]
            for k in seg:
                piece = pieces[k]
                g = grads[piece.param]
                at = base + bucket.offsets[k]
                if g is None:
                    flat[at:at + piece.numel].zero_()
                elif g.data_ptr() != flat[at:].data_ptr() or g.dtype != flat.dtype:
                    # (not written in place by _receive)
                    flat[at:at + piece.numel].copy_(g.reshape(-1)[piece.start:piece.stop])
        for i in grads:
            # ZeRO-2: the full gradient is not kept; the owner gets the average back
            self._params[i].grad = None
        wire, ctx = self._compression.compress(flat)
        # the buffer (or its compressed copy) is scratch from here: the allreduce runs in
        # it, the reduce-scatter may too (no copy into the engine's fusion buffer)
        collective = "allreduce" if self._allreduced[b] else "reducescatter"
        start = mpi_ops.allreduce_async_ if self._allreduced[b] \
            else mpi_ops.reducescatter_scratch_async
        handle = start(
            wire, name=f"sharded.{collective}.{self._names[pieces[bucket.members[0]].param]}",
            op=self._op,
            process_set=self._process_set, prescale_factor=self._prescale,
            postscale_factor=self._postscale)
        self._handles[b] = (handle, ctx)

    def _bucket_buffer(self, kept: dict, b: int, numel: int) -> torch.Tensor:
        """Bucket ``b``'s buffer of ``numel`` elements in ``kept``, made (zeroed) the first
        time: a step writes the same places of it, so its padding stays zero."""
        buf = kept.get(b)
        if buf is None:
            first = self._params[self._plan.pieces[self._plan.buckets[b].members[0]].param]
            buf = kept[b] = torch.zeros(numel, dtype=first.dtype, device=first.device)
        return buf

    def synchronize(self) -> None:
        """Finish every bucket's reduce-scatter: ``p.grad`` is the averaged gradient for the
        parameters this rank owns and None for the others."""
        self._follow_engine()
        if not self._active:
            self.pass_counter.reset()
            self.__dict__["_synchronized"] = True
            return
        first_error = None
        try:
            for b in range(len(self._plan.buckets)):
                if b not in self._handles:
                    self._submit(b)
        except Exception as err:    # still wait for what was submitted
            first_error = err
        for b in sorted(self._handles):
            handle, ctx = self._handles[b]
            try:
                out = self._compression.decompress(mpi_ops.synchronize(handle), ctx)
            except Exception as err:
                first_error = first_error or err
                continue
            bucket = self._plan.buckets[b]
            if self._allreduced[b]:     # this rank's part only, not the whole buffer, kept
                base = self._bases[b][self._rank]
                out = out[base:self._bases[b][self._rank + 1]].clone()
            for k in bucket.segments[self._rank]:
                piece = self._plan.pieces[k]
                at = bucket.offsets[k]
                grad = out[at:at + piece.numel]
                if k in self._blocks:
                    self._blocks[k].grad = grad
                else:
                    p = self._params[piece.param]
                    p.grad = grad.view(p.shape)
        self._handles.clear()
        self.pass_counter.reset()
        self.__dict__["_ready"] = [0] * len(self._plan.buckets)
        if first_error is not None:
            raise first_error
        self.__dict__["_synchronized"] = True

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Scale the gradients so that the norm of the whole (unsharded) gradient is at most
        ``max_norm``; returns that norm, the same on every rank (as FSDP's
        ``clip_grad_norm_``).  Call it after :meth:`synchronize`, inside
        :meth:`skip_synchronize`.  ``torch.nn.utils.clip_grad_norm_`` would see only this
        rank's shard."""
        if not self._synchronized and self._active:
            raise RuntimeError("clip_grad_norm_ needs the reduced gradients: call "
                               "optimizer.synchronize() first (and step() inside "
                               "optimizer.skip_synchronize())")
        norm_type = float(norm_type)
        grads = [t.grad for t in [*self._params, *self._blocks.values()] if t.grad is not None]
        inf = math.isinf(norm_type)
        if grads:
            norms = torch.stack([g.detach().float().norm(norm_type) for g in grads])
            local = norms.max() if inf else norms.pow(norm_type).sum()
        else:
            local = torch.zeros(())
        local = local.reshape(1).cpu()
        if self._active:
            local = mpi_ops.allreduce(local, name="sharded.clip_grad_norm",
                                      op=Max if inf else Sum, process_set=self._process_set)
        total = local[0] if inf else local[0].pow(1.0 / norm_type)
        coef = float(max_norm) / (float(total) + 1e-6)
        if coef < 1.0:
            for g in grads:
                g.detach().mul_(coef)
        return total

    def step(self, closure=None):
        if self._hooks_removed and self._plan.split:
            raise RuntimeError(
                "this sharded optimizer split parameters into blocks owned by different "
                f"ranks ({', '.join(self._names[i] for i in sorted(self._plan.split))}) and "
                "its hooks were removed: it cannot step them alone; keep the hooks, or make "
                "it with split_parameters=False")
        with self._stepping():
            return super().step(closure)

    def _after_step(self) -> None:
        self.__dict__["_loaded"] = None
        self._stale.clear()
        for block in self._blocks.values():
            block.grad = None
        if self._active:
            self._allgather_parameters()

    def zero_grad(self, set_to_none: bool = True):
        result = super().zero_grad(set_to_none)
        for block in self._blocks.values():
            block.grad = None
        return result

    def _allgather_parameters(self) -> None:
        """Every rank's updated parameters to every rank: one tensor per bucket (this rank's
        parameters of it, not padded: an allgather takes parts of any size), all in one
        grouped allgather.  It runs in the buckets' gradient buffers, free once reduced:
        each rank's parameters are copied to their place in the gathered layout (the ranks'
        parts back to back) and gathered there in place (on CPU), so the step holds no
        buffer of the model's size beyond them; the next step's gradients overwrite them."""
        buckets, pieces = self._plan.buckets, self._plan.pieces
        if not buckets:
            return
        mine, outputs = [], []
        for b, bucket in enumerate(buckets):
            gather = self._gather_bases[b]
            flat = self._bucket_buffer(self._grad_flats, b, self._bases[b][-1])
            seg = flat[gather[self._rank]:gather[self._rank + 1]]
            for k in bucket.segments[self._rank]:
                piece = pieces[k]
                at = bucket.offsets[k]
                params = self._params[piece.param].detach().reshape(-1)
                seg[at:at + piece.numel].copy_(params[piece.start:piece.stop])
            mine.append(seg)
            outputs.append(flat[:gather[-1]])
        name = "sharded.allgather." + self._names[pieces[buckets[0].members[0]].param]
        if outputs[0].device.type == "cpu":
            gathered = mpi_ops.synchronize(mpi_ops.grouped_allgather_into_async(
                mine, outputs, name=name, process_set=self._process_set))
        else:
            gathered = mpi_ops.synchronize(mpi_ops.grouped_allgather_async(
                mine, name=name, process_set=self._process_set))
        with torch.no_grad():
            for b, (bucket, full) in enumerate(zip(buckets, gathered)):
                for r, seg in enumerate(bucket.segments):
                    if r == self._rank:
                        continue
                    base = self._gather_bases[b][r]
                    for k in seg:
                        piece = pieces[k]
                        at = base + bucket.offsets[k]
                        self._write(piece, full[at:at + piece.numel])

    def _write(self, piece: shard_plan.Piece, values: torch.Tensor) -> None:
        """``values`` into the parameter's elements ``piece`` covers (a parameter that is not
        split may be non-contiguous)."""
        p = self._params[piece.param]
        if piece.param in self._plan.split:
            p.view(-1)[piece.start:piece.stop].copy_(values)
        else:
            p.copy_(values.view(p.shape))

    def _in_flight(self) -> bool:
        return bool(self._handles)

    def remove_hooks(self) -> None:
        super().remove_hooks()
        self.__dict__["_hooks_removed"] = True     # and off they stay when an elastic job re-forms

    # ---- checkpoints: the full state, in the wrapped optimizer's format

    @property
    def owned_parameters(self) -> list:
        """The parameters whose optimizer state this rank holds, whole or a block of."""
        return [p for i, p in enumerate(self._params) if i in self._owned]

    def state_dict(self) -> dict:
        """The full optimizer state, gathered from every rank (call it on every rank): what
        the wrapped optimizer class would return unsharded, loadable by it."""
        self._follow_engine()
        with self._stepping():
            local = self.wrapped_optimizer.state_dict()
        if not self._active and not self._plan.split:
            return local
        # the param groups as the parameters (not this rank's blocks) number them
        groups = [dict(packed, params=[self._index[id(p)] for p in group["params"]])
                  for packed, group in zip(local["param_groups"],
                                           self.wrapped_optimizer.param_groups)]
        live = [(self._stepper_keys[pos], st) for pos, st in local["state"].items()]
        parts = [(live, self._stale)]
        if self._active:
            parts = collectives.allgather_object(parts[0], name="sharded.state_dict",
                                                 process_set=self._process_set)
        # each parameter's pieces, the live ones of every rank before what a re-plan kept
        pieces: dict[int, list] = {}
        for held in [live for live, _ in parts] + [stale for _, stale in parts]:
            for (i, a, b), st in held:
                pieces.setdefault(i, []).append((a, b, st))
        full = {}
        for i in sorted(pieces):
            p = self._params[i]
            got = shard_state.assemble(pieces[i], 0, p.numel(), self._names[i], p.shape)
            if got is not None:
                full[i] = got
        return {"state": full, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a full optimizer state (from :meth:`state_dict` or from the unsharded
        optimizer class), keeping the state of the parameters this rank owns (of a split
        parameter, of its blocks)."""
        self._follow_engine()
        # state_dict keys count the parameters over the param groups, in order
        keys = [k for group in state_dict["param_groups"] for k in group["params"]]
        params = [p for group in self.wrapped_optimizer.param_groups for p in group["params"]]
        if len(keys) != len(params):
            raise ValueError(f"the state dict's param groups hold {len(keys)} parameters, "
                             f"this optimizer's {len(params)}")
        key_of = {self._index[id(p)]: k for k, p in zip(keys, params)}
        # the state and groups as the wrapped optimizer sees them while it steps
        state, groups, pos = {}, [], 0
        for saved_group, tensors in zip(state_dict["param_groups"], self._steppers):
            positions = list(range(pos, pos + len(tensors)))
            pos += len(tensors)
            for at in positions:
                i, a, b = self._stepper_keys[at]
                whole = state_dict["state"].get(key_of[i])
                if whole is None or i not in self._owned:
                    continue
                if i in self._plan.split:
                    whole = shard_state.assemble([(0, self._params[i].numel(), whole)],
                                                 a, b, self._names[i])
                state[at] = whole
            groups.append(dict(saved_group, params=positions))
        with self._stepping():
            self.wrapped_optimizer.load_state_dict({"state": state, "param_groups": groups})
        self._stale.clear()
        # kept until the next step, for broadcast_state (a reference, not a copy)
        self.__dict__["_loaded"] = state_dict

    def broadcast_state(self, root_rank: int) -> None:
        """Every rank gets ``root_rank``'s optimizer state, its own shard of it.  A full state
        the root loaded since its last step (``load_state_dict`` of a checkpoint on rank 0
        only, the Horovod pattern) is what travels; otherwise the full state is gathered from
        the shards' owners and the root's param groups (learning rate, ...) travel."""
        self._follow_engine()
        pset = self._process_set
        me = lifecycle.rank()
        full = collectives.broadcast_object(self._loaded if me == root_rank else None,
                                            root_rank, name="sharded.broadcast_state",
                                            process_set=pset)
        if full is None:
            full = self.state_dict()
            full["param_groups"] = collectives.broadcast_object(
                full["param_groups"] if me == root_rank else None, root_rank,
                name="sharded.broadcast_state.param_groups", process_set=pset)
        self.load_state_dict(full)


def _key(piece: shard_plan.Piece) -> tuple[int, int, int]:
    return piece.param, piece.start, piece.stop


def _filled(bucket: shard_plan.Bucket, rank: int, pieces: list) -> int:
    """Elements of ``rank``'s segment of ``bucket`` that hold parameters (the rest pads it)."""
    return sum(pieces[k].numel for k in bucket.segments[rank])


def _packed_bases(bucket: shard_plan.Bucket, size: int, pieces: list) -> list[int]:
    """Where each rank's segment of ``bucket`` begins when the segments lie back to back
    unpadded, and (last) where they end."""
    bases = [0]
    for r in range(size):
        bases.append(bases[-1] + _filled(bucket, r, pieces))
    return bases
