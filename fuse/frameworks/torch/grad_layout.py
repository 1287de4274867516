"""Gradients laid out back to back, so the engine fuses them without copying.

The engine fuses the gradients that become ready together into one allreduce by copying them
into its fusion buffer and back out afterwards: two passes over every fused byte, on the engine
thread, between the backend calls.  When the tensors of a fused response already lie back to
back in response order, the engine reduces that span where it lies instead (``Executor``'s
adjacency check; DDP's ``gradient_as_bucket_view`` plays the same trick with its buckets).

The response order is the order in which the gradients became ready on every rank, which is
the order of the backward pass: the same on every rank and from step to step.  So the layout
learns it during the first step (:meth:`record`), then (:meth:`build`) allocates one flat buffer
per dtype holding, in that order, the gradients the engine would put through its fusion buffer
(:meth:`fuse._core.Engine.goes_through_fusion_buffer`: the small ones travel inline with the
negotiation and the large ones are reduced where they lie anyway, so they would only leave gaps).

From then on backward writes each new gradient straight into its slot: :meth:`receive`, a
hook that autograd runs on the gradient before accumulating it, writes the gradient into a
fresh view of the slot and hands that view to autograd, which takes it as ``p.grad`` as it is
(a tensor nothing else holds is taken without a copy).  That write is the only pass over the
gradient after the operation that computed it: autograd would otherwise copy a gradient it
cannot take (a broadcast one, say, from ``sum``), and the hook after accumulation would copy
it once more.  If ``zero_grad(set_to_none=False)`` keeps the slot in ``p.grad`` (or the pass
accumulates into a gradient already there), autograd adds into the slot and nothing is copied.
Whatever autograd did not put in the slot (a pass with ``create_graph=True``, a gradient of
another layout) :meth:`place` copies in after accumulation, on the backward thread while
earlier gradients are on the wire.  A backward pass in another order only costs the copies
again (the engine falls back to its fusion buffer); results never depend on it.

When every rank is on one host, ``build`` takes ``share``: the flat buffers are then allocated in
memory that every rank maps (:func:`fuse.engine.shm.share_regions`), so the engine reduces a
fused span straight from the ranks' buffers into them instead of staging it through its own
segments.  ``share`` is collective; ``build`` calls it exactly once on every rank.  In shared
memory the gradients the engine reduces where they lie (above its zero-copy threshold) get
slots too: staged through the segments, each would be copied out and back in (twice the
memory traffic of the reduction itself), where from its slot it is reduced straight between
the ranks' buffers like a fused span.

CUDA gradients get slots too when the GPU backend serves them (``on_device``): flat buffers on
their device, one per device and dtype, for gradients the device path would fuse
(``device_fuses``).  The device path reduces a fused run of adjacent in-place tensors where it
lies (:mod:`fuse.job.device_path`), so they skip its device fusion buffer the same way.
"""

from __future__ import annotations

import torch


class GradientLayout:
    def __init__(self):
        self._order: list[int] = []     # parameter indices in first-step submission order
        self._seen: set[int] = set()
        self._slots: dict[int, torch.Tensor] = {}
        self._flats: list[torch.Tensor] = []
        self.built = False
        # gradients written into their slots before accumulation and copied in after it
        self.received = 0
        self.copied = 0

    def record(self, i: int) -> None:
        """Parameter ``i``'s gradient was submitted (learning step only)."""
        if not self.built and i not in self._seen:
            self._seen.add(i)
            self._order.append(i)

    def build(self, params, fuses, share=None, on_device=None, device_fuses=None,
              in_place=None) -> None:
        """Allocate the slots.  ``fuses(nbytes)``: whether the engine would fuse an allreduce
        of that size through its fusion buffer.  ``share(sizes)``: buffers of those sizes in
        memory shared by all ranks, or None (then ordinary memory); with it, ``in_place(nbytes)``
        says which sizes the engine reduces where they lie, which get slots as well (None:
        none).  ``on_device(p)``: whether
        ``p`` is reduced by the GPU backend, and ``device_fuses(nbytes)`` whether the device
        path would fuse it (None: device parameters get no slots)."""
        by_key: dict[tuple, list[int]] = {}
        for i in self._order:
            p = params[i]
            if p.layout != torch.strided or p.numel() == 0:
                continue
            nbytes = p.numel() * p.element_size()
            if on_device is not None and device_fuses is not None and on_device(p):
                if device_fuses(nbytes):
                    by_key.setdefault((p.device, p.dtype), []).append(i)
            elif p.device.type == "cpu" and fuses(nbytes):
                by_key.setdefault((None, p.dtype, "fused"), []).append(i)
            elif (p.device.type == "cpu" and share is not None and in_place is not None
                  and in_place(nbytes)):
                # a buffer of their own: between the fused ones they would break the runs
                # the engine finds adjacent
                by_key.setdefault((None, p.dtype, "in place"), []).append(i)
        # a lone tensor gains nothing from a fusing slot (in shared memory it does: it is
        # reduced straight between the ranks' buffers)
        groups = [(key, members) for key, members in by_key.items()
                  if len(members) > 1 or key[-1] == "in place"]
        numels = [sum(params[i].numel() for i in members) for _key, members in groups]
        host = [k for k, ((device, *_), _m) in enumerate(groups) if device is None]
        shared = None
        if share is not None:       # called even with nothing to share: it is collective
            sizes = [numels[k] * torch.empty((), dtype=groups[k][0][1]).element_size()
                     for k in host]
            shared = dict(zip(host, share(sizes)))
        for k, ((device, dtype, *_), members) in enumerate(groups):
            if device is not None:
                flat = torch.zeros(numels[k], dtype=dtype, device=device)
            elif shared is not None:    # (new shared memory is zeroed)
                flat = torch.frombuffer(shared[k], dtype=dtype, count=numels[k])
            else:
                flat = torch.zeros(numels[k], dtype=dtype)
            offset = 0
            for i in members:
                n = params[i].numel()
                self._slots[i] = flat[offset:offset + n].view(params[i].shape)
                offset += n
            self._flats.append(flat)
        self._order.clear()
        self._seen.clear()
        self.built = True

    def receive(self, i: int, p: torch.Tensor, grad: torch.Tensor):
        """Before autograd accumulates ``grad`` into ``p.grad``: when ``p.grad`` is None and
        parameter ``i`` has a slot, ``grad`` written into a new view of the slot (returned, for
        autograd to take as ``p.grad``); otherwise None (autograd goes on with ``grad``)."""
        if p.grad is not None:
            return None
        slot = self._slots.get(i)
        if (slot is None or grad.layout != torch.strided or grad.dtype != slot.dtype
                or grad.device != slot.device or grad.requires_grad):
            return None
        view = slot.view(slot.shape)    # a tensor of its own, so autograd may take it
        view.copy_(grad)
        self.received += 1
        return view

    def place(self, i: int, p: torch.Tensor) -> None:
        """Make ``p.grad`` parameter ``i``'s slot, copying the gradient in if it is elsewhere."""
        slot = self._slots.get(i)
        if slot is None:
            return
        grad = p.grad
        if grad is None:                # unused this step: it is reduced as zeros
            slot.zero_()
        elif grad.is_sparse or grad.dtype != slot.dtype:
            return
        elif grad.data_ptr() == slot.data_ptr():
            return
        else:
            slot.copy_(grad)
            self.copied += 1
        p.grad = slot

    @property
    def nbytes(self) -> int:
        return sum(f.numel() * f.element_size() for f in self._flats)
