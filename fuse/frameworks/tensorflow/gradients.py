"""Averaging a list of gradients, shared by ``DistributedGradientTape`` and the Keras
``DistributedOptimizer``.

The bookkeeping (groups, op and predivide scaling) comes from :mod:`fuse.collectives.grad_sync`.
All dense gradients of one call go to the engine from one host function: each ungrouped
gradient as its own allreduce and each group as one grouped allreduce, all submitted before
any is waited for, so the engine fuses them as Horovod's would.  Inside ``tf.function`` that
host function is a single ordered ``tf.py_function``.
"""

from __future__ import annotations

import tensorflow as tf

from fuse.collectives import calls as _c
from fuse.collectives.grad_sync import assign_groups, scaling
from fuse.collectives.ops import Average
from fuse.job.process_sets import global_process_set
from fuse.frameworks.tensorflow import mpi_ops
from fuse.frameworks.tensorflow.bridge import run_host
from fuse.frameworks.tensorflow.tensors import Compression, host_output


class GradientReducer:
    """The options of a distributed tape or optimizer, and ``reduce(grads, variables)``."""

    def __init__(self, prefix: str, compression=Compression.none, sparse_as_dense=False,
                 op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        self.prefix = prefix
        self.scale_local_gradients = scale_local_gradients
        self._local: dict[int, object] = {}   # id -> variable kept local (model parallel)
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op, self.prescale, self.postscale = scaling(op, gradient_predivide_factor)
        if groups is not None and num_groups:
            raise ValueError("give groups or num_groups (deprecated), not both")
        if groups is not None and not isinstance(groups, int) and not (
                isinstance(groups, (list, tuple)) and all(isinstance(g, (list, tuple))
                                                          for g in groups)):
            raise ValueError("groups must be an int or a list of lists of variables")
        self.groups = groups
        self.num_groups = num_groups
        self.process_set = process_set

    def register_local(self, variable) -> None:
        """Keep ``variable``'s gradient on this worker (Horovod's ``register_local_source`` /
        ``register_local_var``): not reduced, only divided by the set size when
        ``scale_local_gradients``."""
        for v in (variable, getattr(variable, "_value", None)):   # a Keras 3 variable's tf one
            if v is not None:
                self._local[id(v)] = v

    def is_local(self, variable) -> bool:
        return id(variable) in self._local

    @property
    def active(self) -> bool:
        return self.process_set.included() and len(self.process_set.ranks) > 1

    def reduce(self, grads, variables, postscale: float = 1.0):
        """``grads`` averaged (or summed) over the process set, in the same structure.  None
        gradients stay None; ``tf.IndexedSlices`` are gathered unless ``sparse_as_dense``."""
        grads = list(grads)
        variables = list(variables)
        local = [i for i, v in enumerate(variables) if i < len(grads) and self.is_local(v)]
        if local:
            return self._reduce_with_local(grads, variables, local, postscale)
        if not self.active:
            return grads
        out = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            if isinstance(grads[i], tf.IndexedSlices) and self.sparse_as_dense:
                grads[i] = tf.convert_to_tensor(grads[i])
        dense = [i for i in present if not isinstance(grads[i], tf.IndexedSlices)]
        for i in present:
            if isinstance(grads[i], tf.IndexedSlices):
                out[i] = mpi_ops.allreduce(grads[i], op=self.op,
                                           name=f"{self.prefix}.{i}.sparse",
                                           process_set=self.process_set)
        if dense:
            keys = [variables[i] if i < len(variables) else i for i in dense]
            groups = assign_groups(keys, self._dense_groups(variables, keys),
                                   self.num_groups)
            reduced = self._reduce_dense([grads[i] for i in dense], dense, groups, postscale)
            for i, g in zip(dense, reduced):
                out[i] = g
        return out

    def _reduce_with_local(self, grads, variables, local, postscale):
        """Reduce the global gradients; keep the local ones (scaled as Horovod scales them)."""
        keep = set(local)
        shared = [i for i in range(len(grads)) if i not in keep]
        reduced = self.reduce([grads[i] for i in shared], [variables[i] for i in shared],
                              postscale)
        out = list(grads)
        for i, g in zip(shared, reduced):
            out[i] = g
        size = len(self.process_set.ranks)
        for i in local:
            g = grads[i]
            if g is None or not self.scale_local_gradients or size == 1:
                continue
            if isinstance(g, tf.IndexedSlices):
                out[i] = tf.IndexedSlices(g.values / size, g.indices, g.dense_shape)
            else:
                out[i] = g / size
        return out

    def _dense_groups(self, variables, dense_keys):
        """``groups`` restricted to the gradients reduced densely (a sparse gradient in a
        group is gathered on its own); a member that is no source at all is an error."""
        if not isinstance(self.groups, (list, tuple)):
            return self.groups
        every = {id(v) for v in variables}
        dense = {id(k) for k in dense_keys}
        out = []
        for group in self.groups:
            for v in group:
                if id(v) not in every:
                    raise ValueError("groups contains a variable that is not one of the "
                                     "sources whose gradients are reduced")
            kept = [v for v in group if id(v) in dense]
            if kept:
                out.append(kept)
        return out

    def _reduce_dense(self, tensors, indices, groups, postscale):
        wires, ctxs = zip(*(self.compression.compress(tf.convert_to_tensor(t))
                            for t in tensors))
        names = [f"{self.prefix}.{i}" for i in indices]
        wires, names, groups, unpack = pack_small(list(wires), names, groups)
        outs = self._reduce_wires(wires, names, groups, postscale)
        return [self.compression.decompress(o, c) for o, c in zip(unpack(outs), ctxs)]

    def _reduce_wires(self, wires, names, groups, postscale):
        op, pre, post = self.op, self.prescale, self.postscale * postscale
        ps = self.process_set

        def host(arrays):
            waits = []
            for members in groups:
                if len(members) == 1:
                    k = members[0]
                    # written into a TensorFlow tensor, returned without a copy
                    tensor, view = host_output(arrays[k])
                    h = (_c.allreduce_async(mpi_ops.ops, arrays[k], output=view,
                                            name=names[k], op=op, prescale_factor=pre,
                                            postscale_factor=post, process_set=ps), tensor)
                else:
                    h = _c.grouped_allreduce_async(
                        mpi_ops.ops, [arrays[k] for k in members],
                        name=f"{names[members[0]]}.group", op=op, prescale_factor=pre,
                        postscale_factor=post, process_set=ps)
                waits.append((members, h))
            results = [None] * len(arrays)
            first_error = None
            for members, h in waits:   # wait for every handle before raising
                try:
                    if isinstance(h, tuple):
                        h, value = h
                        _c.synchronize(h)
                    else:
                        value = _c.synchronize(h)
                except Exception as err:
                    first_error = first_error or err
                    continue
                for k, v in zip(members, value if len(members) > 1 else [value]):
                    results[k] = v
            if first_error is not None:
                raise first_error
            return results

        return run_host(host, list(wires), [w.dtype for w in wires], [w.shape for w in wires],
                        "allreduce_gradients")


# Ungrouped gradients up to this size travel packed into one flat tensor per dtype
PACK_BYTES = 64 * 1024


def pack_small(wires: list, names: list, groups: list):
    """The small ungrouped gradients packed into one flat tensor per dtype, so that they cross
    into the host function and the engine as one allreduce (concatenated and split again by
    TensorFlow, in the graph) instead of one each: the fixed cost of a gradient, about as
    much as a collective of a few KiB (a TensorFlow output tensor made on the host, a request
    negotiated and waited for), is paid once per dtype instead of once per bias or norm.
    Every rank builds the same step, so the packs match; their names are their first
    member's.  Returns ``(wires, names, groups, unpack)``: the tensors to reduce (the packs
    after the rest), their names, the groups over them, and ``unpack(reduced)``, the reduced
    values in the original order and shapes."""
    packs: dict = {}
    for members in groups:
        if len(members) != 1:
            continue
        w = wires[members[0]]
        n = w.shape.num_elements() if w.shape.is_fully_defined() else None
        if n and n * w.dtype.size <= PACK_BYTES:
            packs.setdefault(w.dtype, []).append(members[0])
    packs = {dtype: ks for dtype, ks in packs.items() if len(ks) > 1}
    if not packs:
        return wires, names, groups, lambda outs: outs
    packed = {k for ks in packs.values() for k in ks}
    kept = [k for k in range(len(wires)) if k not in packed]
    at = {k: j for j, k in enumerate(kept)}
    new_wires = [wires[k] for k in kept]
    new_names = [names[k] for k in kept]
    new_groups = [[at[k] for k in members] for members in groups
                  if not (len(members) == 1 and members[0] in packed)]
    for ks in packs.values():
        new_groups.append([len(new_wires)])
        new_wires.append(tf.concat([tf.reshape(wires[k], [-1]) for k in ks], 0))
        new_names.append(f"{names[ks[0]]}.packed{len(ks)}")

    def unpack(outs):
        result = [None] * len(wires)
        for k, j in at.items():
            result[k] = outs[j]
        for p, ks in enumerate(packs.values()):
            parts = tf.split(outs[len(kept) + p], [wires[k].shape.num_elements() for k in ks])
            for k, part in zip(ks, parts):
                result[k] = tf.reshape(part, wires[k].shape)
        return result
    return new_wires, new_names, new_groups, unpack
