"""``DistributedOptimizer``: averages gradients across workers while backward is still running.

How it works:

* One ``Tensor.register_post_accumulate_grad_hook`` per trainable parameter.  When autograd has
  finished accumulating a parameter's gradient for the ``backward_passes_per_step``-th time,
  the hook submits its allreduce (in place on ``p.grad``, zero copy, unless compressed) and
  returns at once; the engine's background thread negotiates, fuses the gradients that are
  ready into the fusion buffer and reduces them while autograd computes the rest.
* Ready gradients are queued in batches (``FUSE_GRAD_BATCH_BYTES``, 1 MiB): a hook adds its
  gradient to the batch and queues the batch once it holds that many bytes; whatever is left
  goes when backward ends (an autograd final callback).  Each gradient is still its own
  allreduce under its own name, so ranks that batch differently still meet; the batch only
  spares the engine thread one wake-up and negotiation per gradient (a small CNN's 8 gradients
  took 5-6 engine cycles a step where DDP sends one bucket).  A large gradient fills a batch by
  itself and goes at once.
* With ``groups``, the members of a group are submitted together as one grouped allreduce when
  the last of them is ready.
* ``step()`` first calls :meth:`synchronize`, which submits whatever the hooks did not (unused
  parameters are reduced as zeros, so no rank waits for a gradient another rank never makes),
  waits for every handle and writes decompressed results back into ``p.grad``.
* With ``Compression.powersgd(...)`` (:mod:`fuse.collectives.powersgd`), once it is active the
  hook of a gradient worth compressing feeds its error back and computes its P at once; the
  last one starts the single allreduce of every P, and ``synchronize`` does the rest (the Q's
  in one more allreduce).  The other gradients (biases, norms: small) are held back and
  allreduced from ``synchronize`` as one grouped call beside the P and Q messages.
* Without compression, after the first step the gradients the engine would fuse live back to
  back in one buffer, in backward order (:mod:`.grad_layout`), so it reduces them in place;
  a second hook per parameter, which autograd runs before accumulating, has backward write
  each such gradient straight into its place there.

The wrapper is a composition (:mod:`.optimizer_wrapper`, shared with the sharded and Adasum
optimizers): it holds the user's optimizer and forwards everything it does not define to it.
``isinstance(opt, torch.optim.SGD)`` still holds; ``type(opt)`` is :class:`DistributedOptimizer`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from fuse.worker import lifecycle
from fuse.job import state as job_state
from fuse.collectives import calls as collectives
from fuse.collectives.grad_sync import assign_groups, check_names, scaling, wire_names
from fuse.collectives.ops import Adasum, Average, Sum
from fuse.collectives.powersgd import PowerSGD
from fuse.job.process_sets import global_process_set
from fuse.frameworks.torch import device as _device
from fuse.frameworks.torch import mpi_ops
from fuse.frameworks.torch.grad_layout import GradientLayout
from fuse.frameworks.torch.optimizer_checks import (ZERO_GRAD_ERROR, parameter_names,  # noqa: F401
                                                    unique_params)
from fuse.frameworks.torch.optimizer_wrapper import HookedOptimizer
from fuse.frameworks.torch.tensors import Compression


def _shared_allocator(engine):
    """``share(sizes)`` for the gradient layout when the job's ranks share memory, else None.
    (Decided alike on every rank: shared memory is agreed on at init.)"""
    if engine.shared_memory is None:
        return None
    from fuse.collectives import calls as collectives
    from fuse.engine import shm

    def share(sizes):
        return shm.share_regions(engine, sizes, lambda obj: collectives.allgather_object(
            obj, name="fuse.shared_gradient_buffers"))
    return share


SPARSE = "sparse"       # _InFlight.ctx of a sparse gradient: its handle is a wait function


@dataclasses.dataclass
class _InFlight:
    """One gradient whose allreduce is in flight: the parameter's index, the handle to wait for
    (None for the members of a grouped call after the first), the tensor on the wire and the
    compression's context (SPARSE for a sparse gradient)."""

    index: int
    handle: Any
    wire: Any
    ctx: Any


class DistributedOptimizer(HookedOptimizer):
    """Wrap ``optimizer`` so that ``step()`` applies gradients averaged over the process set.

    Args:
        optimizer: any ``torch.optim.Optimizer``.
        named_parameters: ``model.named_parameters()``; names the collectives (recommended).
        compression: ``Compression.none``, ``.fp16`` or ``.bf16`` for the wire, or
            ``Compression.powersgd(rank=4, start_iter=10)`` (an object: one per optimizer).
        backward_passes_per_step: local accumulation: reduce every N backward passes.
        op: ``Average`` (default), ``Sum``, or ``Adasum`` (the workers' optimizer steps
            combined with Adasum: see :mod:`.adasum_optimizer`).
        gradient_predivide_factor: divide by f before the sum and multiply by f after.
        num_groups: deprecated spelling of an int ``groups``.
        groups: an int (that many fused groups) or a list of lists of parameters.
        sparse_as_dense: reduce sparse gradients as dense tensors (handed back sparse);
            otherwise their indices and values are allgathered.
        process_set: the workers this optimizer averages over.
        sharded: shard the optimizer state and the gradients over the process set (ZeRO
            stage 2): see :mod:`.sharded_optimizer`, which also takes ``bucket_bytes`` and
            ``split_parameters``.
    """

    def __new__(cls, optimizer, named_parameters=None, compression=Compression.none,
                backward_passes_per_step=1, op=Average, *args, process_set=global_process_set,
                sharded=False, **kwargs):
        if sharded:
            from fuse.frameworks.torch.sharded_optimizer import ShardedOptimizer
            return ShardedOptimizer(optimizer, named_parameters, compression,
                                    backward_passes_per_step, op, *args,
                                    process_set=process_set, **kwargs)
        # op=Adasum combines the workers' optimizer steps, not their gradients (Horovod's
        # _DistributedAdasumOptimizer): a class of its own, used when there is someone to
        # combine with
        if op == Adasum and len(process_set.ranks) > 1 and process_set.included():
            from fuse.frameworks.torch.adasum_optimizer import DistributedAdasumOptimizer
            return DistributedAdasumOptimizer(optimizer, named_parameters,
                                              backward_passes_per_step, process_set)
        return super().__new__(cls)

    def __init__(self, optimizer, named_parameters=None, compression=Compression.none,
                 backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                 num_groups=0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set, sharded=False):
        super().__init__(optimizer, backward_passes_per_step)
        d = self.__dict__
        d["_process_set"] = process_set
        if compression is PowerSGD:
            raise TypeError("Compression.powersgd makes a compressor with settings: pass "
                            "Compression.powersgd(rank=4, start_iter=10), not the class")
        # a stateful compressor (PowerSGD) runs its own step; the rest travels uncompressed
        d["_powersgd"] = compression if isinstance(compression, PowerSGD) else None
        d["_psgd_step"] = None      # this step's PowerSGDStep, once a hook made it
        # a compressed step's uncompressed dense gradients, held back (see _submit_plain)
        d["_psgd_plain"] = [] if self._powersgd is not None else None
        d["_compression"] = Compression.none if self._powersgd is not None else compression
        d["_op"], d["_prescale"], d["_postscale"] = scaling(op, gradient_predivide_factor)
        d["_sparse_as_dense"] = sparse_as_dense
        params = unique_params(optimizer)
        names = parameter_names(params, named_parameters)
        if named_parameters is None:
            # Horovod's generated names, by place in the param groups: noname.<group>.<index>
            place: dict = {}
            for g, group in enumerate(optimizer.param_groups):
                for j, p in enumerate(group["params"]):
                    place.setdefault(id(p), f"noname.{g}.{j}")
            names = [place[id(p)] for p in params]
            shown = ["allreduce." + n for n in names]
        else:
            shown = names
        # param -> name, as Horovod's optimizer exposes it (scripts and tests read it)
        d["_parameter_names"] = dict(zip(params, shown))
        d["_params"] = params
        d["_wire_names"] = wire_names(names)
        d["_index"] = {id(p): i for i, p in enumerate(params)}
        d["_groups"] = assign_groups(params, groups, num_groups)
        d["_group_of"] = {i: g for g, members in enumerate(self._groups) for i in members}
        d["_group_ready"] = [0] * len(self._groups)
        d["_densified"] = set()     # sparse gradients reduced as dense this step
        d["_handles"] = {}          # group index -> [_InFlight]
        d["_batch"] = []            # _InFlight entries waiting to be queued together
        d["_batch_nbytes"] = 0
        d["_flush_queued"] = False  # the end-of-backward callback is queued
        # an elastic job may grow from one worker: hooks then, as in Horovod
        d["_active"] = process_set.included() and (len(process_set.ranks) > 1
                                                   or job_state.config().elastic)
        d["_engine_generation"] = job_state.engine_generation()     # see _follow_engine
        d["_batch_bytes"] = job_state.config().grad_batch_bytes if self._active else 0
        # compressed gradients travel as new tensors, so only uncompressed ones get slots
        d["_layout"] = (GradientLayout() if self._active and compression is Compression.none
                        else None)
        if self._powersgd is not None:
            self._powersgd.bind(self)
            if self._op not in (Average, Sum):
                raise ValueError("Compression.powersgd reduces with op=Average or op=Sum")
            # which gradients are compressed is fixed by the parameters' shapes and dtypes
            d["_psgd_ranks"] = {i: self._powersgd.rank_for(tuple(p.shape),
                                                             str(p.dtype).replace("torch.", ""))
                                for i, p in enumerate(params)
                                if p.requires_grad and p.device.type == "cpu"}
        d["_hook_handles"] = [p.register_post_accumulate_grad_hook(self._hook)
                              for p in params if p.requires_grad] if self._active else []
        if self._layout is not None:
            # and one before accumulation, for backward to write straight into the slots
            self._hook_handles.extend(
                p.register_hook(functools.partial(self._receive, i))
                for i, p in enumerate(params) if p.requires_grad)

    def __repr__(self):
        return f"DistributedOptimizer({self.wrapped_optimizer!r})"

    # ---- hooks and submission

    def _follow_engine(self):
        """An elastic job re-formed (fuse.shutdown() then init()): the new engine knows none of
        the handles in flight nor the shared gradient buffers.  Drop what was in flight and
        learn the gradient layout again, which every rank of the new job then builds
        together (new workers build theirs for the first time)."""
        generation = job_state.engine_generation()
        if generation == self._engine_generation:
            return
        d = self.__dict__
        d["_engine_generation"] = generation
        d["_handles"] = {}
        d["_densified"] = set()
        d["_group_ready"] = [0] * len(self._groups)
        d["_synchronized"] = False
        d["_psgd_step"] = None
        if self._psgd_plain is not None:
            d["_psgd_plain"] = []
        d["_batch"], d["_batch_nbytes"], d["_flush_queued"] = [], 0, False
        self.pass_counter.reset()
        if self._layout is not None:
            d["_layout"] = GradientLayout()

    def _receive(self, i, grad):
        """Before autograd accumulates parameter ``i``'s gradient: once the layout is built,
        the gradient written into its slot (see :meth:`.GradientLayout.receive`)."""
        self._follow_engine()
        if not self._layout.built:
            return None
        return self._layout.receive(i, self._params[i], grad)

    def _hook(self, p):
        self._follow_engine()
        i = self._index[id(p)]
        if self.pass_counter.record(i):
            g = self._group_of[i]
            self._group_ready[g] += 1
            if self._group_ready[g] == len(self._groups[g]):
                self._submit(g)

    def _grad_for_wire(self, i, p):
        if self._layout is not None:
            if self._layout.built:
                self._layout.place(i, p)
            else:
                self._layout.record(i)
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        if p.grad.is_sparse and self._sparse_as_dense:
            p.grad = p.grad.to_dense()
            self._densified.add(i)      # handed back sparse after the reduction (Horovod)
        return p.grad

    def _compressing(self, i) -> int:
        """The PowerSGD rank of parameter ``i``'s gradient this step (0: not compressed)."""
        if self._powersgd is None or not self._powersgd.active():
            return 0
        return self._psgd_ranks.get(i, 0)

    def _powersgd_step(self):
        """This step's PowerSGDStep, made by the first gradient that needs it."""
        if self._psgd_step is None:
            entries = []
            for i, r in sorted(self._psgd_ranks.items()):
                if r:
                    shape = tuple(self._params[i].shape)
                    entries.append((self._wire_names[i], (shape[0], self._params[i].numel()
                                                          // shape[0]), r))
            self.__dict__["_psgd_step"] = self._powersgd.step(
                entries, self._process_set, self._op, name="powersgd." + self._wire_names[0])
        return self._psgd_step

    def _add_compressed(self, i, p) -> None:
        """Hand parameter ``i``'s gradient to this step's PowerSGD (as an n x m view of its
        memory, where the approximation is written back)."""
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        elif p.grad.is_sparse:
            p.grad = p.grad.to_dense()      # a sparse gradient of a matrix: compressed dense
        elif not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
        step = self._powersgd_step()
        shape = tuple(p.shape)
        matrix = p.grad.detach().numpy().reshape(shape[0], -1)
        if step.add(self._wire_names[i], matrix):
            step.start()        # the last one: every P in one allreduce

    def _submit(self, g):
        members = self._groups[g]
        sparse, dense = [], []
        for i in members:
            if self._compressing(i):
                self._add_compressed(i, self._params[i])
                continue
            grad = self._grad_for_wire(i, self._params[i])
            if grad.is_sparse:
                wait = mpi_ops.sparse_allreduce_async(grad, self._wire_names[i], self._op,
                                                      self._process_set)
                sparse.append(_InFlight(i, wait, None, SPARSE))
                continue
            wire, ctx = self._compression.compress(grad)
            if not wire.is_contiguous():
                wire = wire.contiguous()
            if self._psgd_plain is not None and self._powersgd.active():
                # a compressed step's small uncompressed gradients (biases, norms) go as one
                # grouped allreduce from synchronize: one negotiation instead of ~100
                self._psgd_plain.append(_InFlight(i, None, wire, ctx))
                continue
            dense.append(_InFlight(i, None, wire, ctx))
        # host tensors only: device ones go to the GPU backend or are staged (the stand-in
        # of tests/frameworks/torch/test_gpu_standin.py routes CPU tensors to the device path)
        if (len(members) == 1 and dense and self._batch_bytes
                and dense[0].wire.device.type == "cpu" and not _device.routes([dense[0].wire])):
            self._handles[g] = dense
            self._add_to_batch(dense[0])
            return
        if len(members) == 1 and dense:
            (e,) = dense
            e.handle = mpi_ops.allreduce_async_(e.wire, name=self._wire_names[e.index],
                                                op=self._op, prescale_factor=self._prescale,
                                                postscale_factor=self._postscale,
                                                process_set=self._process_set)
        elif dense:
            # one handle for the group: its first entry waits for it, the others ride along
            dense[0].handle = mpi_ops.grouped_allreduce_async_(
                [e.wire for e in dense], name=f"grouped_allreduce.group{g}."
                + self._wire_names[dense[0].index], op=self._op,
                prescale_factor=self._prescale, postscale_factor=self._postscale,
                process_set=self._process_set)
        self._handles[g] = sparse + dense

    def _submit_plain(self) -> None:
        """Submit the uncompressed gradients a compressed step held back, as one grouped
        allreduce in parameter order (hooks run in each rank's own order; every rank holds
        the same set once every group was submitted)."""
        plain = sorted(self._psgd_plain, key=lambda e: e.index)
        self._psgd_plain.clear()
        plain[0].handle = mpi_ops.grouped_allreduce_async_(
            [e.wire for e in plain], name="grouped_allreduce.powersgd_plain."
            + self._wire_names[plain[0].index], op=self._op, prescale_factor=self._prescale,
            postscale_factor=self._postscale, process_set=self._process_set)
        self._handles[len(self._groups)] = plain     # a key after every group's

    def _add_to_batch(self, entry: _InFlight) -> None:
        """Queue ``entry``'s allreduce with the batch: now if the batch is full, else when
        backward ends (or at ``synchronize``, whichever comes first)."""
        self._batch.append(entry)
        self.__dict__["_batch_nbytes"] += entry.wire.numel() * entry.wire.element_size()
        if self._batch_nbytes >= self._batch_bytes:
            self._flush()
        elif not self._flush_queued:
            try:
                torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            except RuntimeError:    # not inside a backward pass: nothing to wait for
                self._flush()
                return
            self.__dict__["_flush_queued"] = True

    def _end_of_backward(self):
        self.__dict__["_flush_queued"] = False
        self._flush()

    def _flush(self) -> None:
        """Queue the batch's allreduces in one call (one engine wake-up)."""
        batch = self._batch
        if not batch:
            return
        d = self.__dict__
        d["_batch"], d["_batch_nbytes"] = [], 0
        try:
            handles = collectives.allreduce_each_async_(
                mpi_ops.ops, [e.wire for e in batch], [self._wire_names[e.index] for e in batch],
                op=self._op, prescale_factor=self._prescale, postscale_factor=self._postscale,
                process_set=self._process_set)
        except BaseException:
            # never queued: forget them, so synchronize submits them again rather than
            # waiting for nothing
            queued = {id(e) for e in batch}
            for g in [g for g, es in self._handles.items() if es and id(es[0]) in queued]:
                del self._handles[g]
            raise
        for e, h in zip(batch, handles):
            e.handle = h

    def synchronize(self):
        """Finish every gradient's allreduce and write the results into ``p.grad``."""
        self._follow_engine()
        if not self._active:
            self.pass_counter.reset()
            self.__dict__["_synchronized"] = True
            return
        # what the hooks did not submit goes in batches too, flushed here (no callback)
        self.__dict__["_flush_queued"] = True
        try:
            self._flush()
            for g, members in enumerate(self._groups):
                if g in self._handles:
                    continue
                if any(self._params[i].requires_grad for i in members):
                    self._submit(g)
            self._flush()
        finally:
            self.__dict__["_flush_queued"] = False
        if self._psgd_plain:
            self._submit_plain()
        first_error = None
        if self._psgd_step is not None:
            step, self.__dict__["_psgd_step"] = self._psgd_step, None
            try:
                step.finish()
            except Exception as err:   # still wait for the uncompressed gradients
                first_error = err
        for g in sorted(self._handles):
            entries = self._handles[g]
            try:
                for e in entries:
                    i, h, wire, ctx = e.index, e.handle, e.wire, e.ctx
                    p = self._params[i]
                    if ctx is SPARSE:
                        p.grad = h()
                        continue
                    if h is not None:
                        mpi_ops.synchronize(h)
                    out = self._compression.decompress(wire, ctx)
                    if out is not p.grad:
                        p.grad.copy_(out)
                    if i in self._densified:
                        p.grad = p.grad.to_sparse()
            except Exception as err:   # wait for every handle before raising
                first_error = first_error or err
        self._handles.clear()
        self._densified.clear()
        if self._layout is not None and not self._layout.built:
            engine, pset = lifecycle.engine(), self._process_set.process_set_id
            threshold = engine.tuning.values()[0]      # the coordinator's, autotuned or not
            zero_copy = job_state.config().zero_copy_threshold
            self._layout.build(self._params,
                               lambda nbytes: engine.goes_through_fusion_buffer(nbytes, pset),
                               _shared_allocator(engine) if pset == 0 else None,
                               on_device=lambda p: _device.routes([p]),
                               device_fuses=lambda nbytes: nbytes <= threshold,
                               in_place=lambda nbytes: nbytes > zero_copy)
        self.pass_counter.reset()
        self.__dict__["_group_ready"] = [0] * len(self._groups)
        self.__dict__["_synchronized"] = True
        if self._powersgd is not None:
            self._powersgd.end_step()
        if first_error is not None:
            raise first_error

    def _in_flight(self) -> bool:
        return bool(self._handles)
