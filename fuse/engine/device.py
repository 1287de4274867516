"""Device (GPU) tensors in the engine: what a device request carries, and the executor that
runs the coordinator's responses on them.

A device tensor is negotiated like any other: its :class:`~fuse.engine.request.RequestSpec`
carries a :class:`DeviceRequest` instead of host buffers, the coordinator validates, orders,
fuses (with the live, autotuned fusion threshold), caches and stall-checks it with the host
tensors, and the response reaches every member in the same order.  There the engine hands it
to this rank's :class:`DeviceExecutor` (``ResponseRunner._device`` in results.pyx), which
*enqueues* the collective on the GPU backend's stream and returns: the host never waits for
the device.

Ordering with the framework, by events only: at submission an event is recorded on the
framework's current (producer) stream (:attr:`DeviceRequest.ready_event`); the collective
stream waits for it before touching the tensor and records :attr:`DeviceRequest.done_event`
after; whoever synchronizes makes its own stream wait for that event
(:mod:`fuse.collectives.device`).

Kinds with a device meaning: allreduce (Sum, Average, Min, Max, Product; prescale and postscale
on floating dtypes), allgather, broadcast, alltoall, reducescatter.  Adasum, join and the
hierarchical path stay on the host.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fuse.engine.protocol import (ALLGATHER, ALLREDUCE, ALLTOALL, AVERAGE, BROADCAST, MAX, MIN,
                                  PRODUCT, REDUCESCATTER)

# scaled on the device (CuPy has no bfloat16: such tensors travel as uint16, unscaled)
FLOAT_DTYPES = ("float16", "float32", "float64")
_WIRE_OPS = {AVERAGE: "sum", MIN: "min", MAX: "max", PRODUCT: "product"}   # else "sum"
_UNSCALED = 1.0


class DeviceRequest:
    """One device tensor of a collective, as the engine's device executor sees it.

    ``src``: the input as a flat device array.  ``out``: the flat output when its size is known
    before negotiation (allreduce, broadcast; ``out is src`` in place), else None and
    ``allocate(count) -> (framework tensor, flat array)`` makes it once negotiation has decided
    its size.  ``span(count)``, for an in-place tensor: a flat array of ``count`` elements from
    where it starts (the memory after it belongs to the same allocation), so a fused run of
    adjacent tensors is reduced where it lies.  ``dtype``: the dtype's name (``float32``)."""

    __slots__ = ("name", "dtype", "shape", "device", "src", "out", "out_obj", "allocate",
                 "span", "splits", "ready_event", "done_event", "received")

    def __init__(self, name: str, dtype: str, shape: Sequence[int], device: int, src, *,
                 out=None, out_obj=None, allocate: Callable | None = None,
                 span: Callable | None = None, splits: Sequence[int] | None = None):
        self.name, self.dtype, self.shape, self.device = name, dtype, tuple(shape), device
        self.src, self.out, self.out_obj, self.allocate, self.span = src, out, out_obj, allocate, span
        self.splits = list(splits) if splits is not None else None
        self.ready_event = None       # recorded on the producer's stream at submission
        self.done_event = None        # recorded on the collective stream after the collective
        self.received: list[int] | None = None    # alltoall: rows received from each member


class DeviceExecutor:
    """Runs device responses on one GPU backend (:class:`fuse.backends.base.DeviceBackend`):
    one communicator per process set (made on the set's first device response, its unique id
    broadcast over the set's CPU backend group), one fusion buffer per device."""

    def __init__(self, backend, config):
        self.backend = backend
        self.config = config
        self._groups: dict[int, Any] = {}
        self._fusion: dict[int, Any] = {}
        self.device: int | None = None

    def claim_device(self, device: int, devices: Sequence[int]) -> int:
        """The one CUDA device of this process (its first device collective's); ValueError
        for a call with a tensor on another."""
        if self.device is None:
            self.device = device
        other = next((d for d in devices if d != self.device), None)
        if other is not None:
            raise ValueError(f"fuse's device path uses one CUDA device per process (device "
                             f"{self.device}); got a tensor on device {other}")
        return self.device

    # ---- called by the engine thread (with the GIL), in response order on every member

    def run(self, kind: int, requests: list[DeviceRequest], dtype: int, op: int,
            prescale: float, postscale: float, root: int, ranks: list[int], index: int,
            args: list[int], pset: int, cpu_group) -> list[int] | None:
        """Enqueue one response's collective.  ``root``: the broadcast root's position in the
        set; ``ranks``/``index``: the set's members and this rank's position; ``args``: what
        negotiation decided (allgather: rows per member; alltoall: the members x members rows
        sent, row: sender).  Returns, for alltoall, the rows received from each member."""
        device = requests[0].device
        group = self._group(pset, len(ranks), index, device, cpu_group)
        stream = self.backend.stream(device)
        waited = set()
        for r in requests:
            if id(r.ready_event) not in waited:
                stream.wait_event(r.ready_event)
                waited.add(id(r.ready_event))
        received = None
        # This thread's current device is not the caller's: make it the tensors' device.  No
        # backend group around the whole response: NCCL defers a group's calls to its end,
        # and the copies in and out of the fusion buffer must stay in stream order.
        with self.backend.use_device(device), stream:
            if kind == ALLREDUCE:
                self._allreduce(group, requests, op, prescale, postscale, stream)
            elif kind == BROADCAST:
                (r,) = requests
                if r.out is not r.src:
                    r.out[...] = r.src
                group.broadcast(r.out, root, r.dtype, stream)
            elif kind == ALLGATHER:
                (r,) = requests
                row = _row_elems(r.shape)
                counts = [int(rows) * row for rows in args]
                r.out_obj, r.out = r.allocate(sum(counts))
                group.allgatherv(r.src, r.out, counts, r.dtype, stream)
            elif kind == ALLTOALL:
                (r,) = requests
                n = len(ranks)
                row = _row_elems(r.shape)
                sent = [int(args[index * n + j]) for j in range(n)]
                received = [int(args[s * n + index]) for s in range(n)]
                r.received = received
                r.out_obj, r.out = r.allocate(sum(received) * row)
                group.alltoallv(r.src, [s * row for s in sent], r.out,
                                [s * row for s in received], r.dtype, stream)
            elif kind == REDUCESCATTER:
                (r,) = requests
                self._reducescatter(group, r, op, prescale, postscale, len(ranks), index,
                                    stream)
            else:
                raise ValueError(f"no device collective of kind {kind}")
            done = self.backend.new_event(device)
            done.record(stream)
        for r in requests:
            r.done_event = done
        return received

    def _group(self, pset: int, size: int, index: int, device: int, cpu_group):
        group = self._groups.get(pset)
        if group is None:
            def exchange(payload):
                return _broadcast_bytes(cpu_group, payload, index)
            group = self._groups[pset] = self.backend.create_group(index, size, device, exchange)
        return group

    def forget_set(self, pset: int) -> None:
        """The process set was removed: its communicator goes with it."""
        group = self._groups.pop(pset, None)
        if group is not None:
            group.close()

    # ---- the collectives, on the collective stream

    def _fusion_buffer(self, device: int, nbytes: int):
        buf = self._fusion.get(device)
        if buf is None or buf.size < nbytes:
            # made while the collective stream is current, so the memory pool reuses it in
            # that stream's order
            buf = self._fusion[device] = self.backend.empty(max(nbytes, 1 << 20), "uint8",
                                                            device)
        return buf

    def _allreduce(self, group, batch: list[DeviceRequest], op: int, prescale: float,
                   postscale: float, stream) -> None:
        r = batch[0]
        wire_op = _WIRE_OPS.get(op, "sum")
        post = postscale / group.size if op == AVERAGE else postscale
        if len(batch) == 1:
            if r.out is not r.src:
                r.out[...] = r.src
            _scale(r.out, prescale)
            group.allreduce(r.out, r.out, r.dtype, wire_op, stream)
            _scale(r.out, post)
            return
        total = sum(x.src.size for x in batch)
        if _adjacent(batch):        # the optimizer's gradient layout: reduce where they lie
            span = r.span(total)
            _scale(span, prescale)
            group.allreduce(span, span, r.dtype, wire_op, stream)
            _scale(span, post)
            return
        raw = self._fusion_buffer(r.device, total * r.src.itemsize)
        fused = raw[:total * r.src.itemsize].view(r.src.dtype)
        offset = 0
        for x in batch:
            fused[offset:offset + x.src.size] = x.src
            offset += x.src.size
        _scale(fused, prescale)
        group.allreduce(fused, fused, r.dtype, wire_op, stream)
        _scale(fused, post)
        offset = 0
        for x in batch:
            x.out[...] = fused[offset:offset + x.src.size]
            offset += x.src.size

    def _reducescatter(self, group, r: DeviceRequest, op: int, prescale: float,
                       postscale: float, members: int, index: int, stream) -> None:
        row = _row_elems(r.shape)
        counts = [rows * row for rows in even_blocks(r.shape[0], members)]
        work = self._fusion_buffer(r.device, r.src.size * r.src.itemsize)
        work = work[:r.src.size * r.src.itemsize].view(r.src.dtype)
        work[...] = r.src
        _scale(work, prescale)
        r.out_obj, r.out = r.allocate(counts[index])
        group.reducescatter(work, r.out, counts, r.dtype, _WIRE_OPS.get(op, "sum"), stream)
        _scale(r.out, postscale / members if op == AVERAGE else postscale)

    def close(self) -> None:
        for group in self._groups.values():
            group.close()
        self._groups.clear()
        self._fusion.clear()
        self.backend.close()


def _broadcast_bytes(cpu_group, payload: bytes | None, index: int) -> bytes:
    """Position 0's ``payload`` on every member, over the set's CPU backend group: its length,
    then its bytes (the engine thread runs this inside a response, as every member does)."""
    length = np.array([len(payload) if index == 0 else 0], dtype=np.int64)
    cpu_group.broadcast(length.view(np.uint8), 0)
    buf = (np.frombuffer(bytes(payload), dtype=np.uint8).copy() if index == 0
           else np.empty(int(length[0]), dtype=np.uint8))
    cpu_group.broadcast(buf, 0)
    return buf.tobytes()


def _scale(buf, factor: float) -> None:
    if factor != _UNSCALED:
        buf *= buf.dtype.type(factor)


def _adjacent(batch: list[DeviceRequest]) -> bool:
    """Whether the batch's tensors are in place and back to back in one allocation."""
    if batch[0].span is None or batch[0].out is not batch[0].src:
        return False
    for prev, x in zip(batch, batch[1:]):
        if (x.out is not x.src or x.span is None
                or x.src.data.ptr != prev.src.data.ptr + prev.src.nbytes):
            return False
    return True


def _row_elems(shape) -> int:
    n = 1
    for s in shape[1:]:
        n *= int(s)
    return n


def even_blocks(rows: int, members: int) -> list[int]:
    """Rows of each member's block of a reducescatter: even, the remainder to the first
    members (as the host executor splits them)."""
    base, extra = divmod(int(rows), members)
    return [base + (1 if i < extra else 0) for i in range(members)]
