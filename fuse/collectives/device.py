"""Collectives on device (GPU) tensors, written once for every framework.

A framework adapter (for torch, :mod:`fuse.frameworks.torch.device`) turns its tensors into
flat device arrays without a copy, describes each as a :class:`~fuse.engine.device.DeviceRequest`
and calls :func:`submit`; the request then goes through the one engine like a host tensor
(negotiation, validation, fusion, response cache, stall checks, timeline, autotune), and this
rank's :class:`~fuse.engine.device.DeviceExecutor` enqueues it on the GPU backend's stream.

Ordering by events only, never a host wait for the device: :func:`submit` records an event on
the caller's (producer) stream that the collective stream waits for, and
:meth:`DeviceHandle.wait` makes the caller's (consumer) stream wait for the collective's event.
"""

from __future__ import annotations

from typing import Callable, Sequence

from fuse.collectives.ops import Average
from fuse.engine.device import FLOAT_DTYPES, DeviceRequest
from fuse.engine.protocol import (ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, DTYPE_CODES,
                                  REDUCESCATTER)
from fuse.engine.request import RequestSpec
from fuse.worker import device_path, state
from fuse.worker.process_sets import process_set_id

KINDS = {"allreduce": ALLREDUCE, "allgather": ALLGATHER, "broadcast": BROADCAST,
         "alltoall": ALLTOALL, "reducescatter": REDUCESCATTER}


class DeviceHandle:
    """What :func:`submit` returns: the engine's handles of one call's tensors, and
    ``build(requests)``, which makes the framework's result once they are done."""

    def __init__(self, handles: list[int], requests: list[DeviceRequest], build: Callable,
                 backend):
        self.handles, self.requests, self.build, self.backend = handles, requests, build, backend

    def poll(self) -> bool:
        engine = state.engine()
        return all(engine.poll(h) for h in self.handles)

    def wait(self, consumer_stream_ptr: int):
        """The result, with the stream ``consumer_stream_ptr`` ordered after the collective (a
        wait on the device, not on the host).  The host waits only for negotiation and for the
        collective to be enqueued."""
        engine = state.engine()
        first_error = None
        for h in self.handles:
            try:
                engine.wait(h)
            except Exception as err:      # wait for every tensor before raising
                first_error = first_error or err
        if first_error is not None:
            raise first_error
        device = self.requests[0].device
        with self.backend.use_device(device):
            consumer = self.backend.external_stream(consumer_stream_ptr, device)
            waited = set()
            for r in self.requests:
                if id(r.done_event) not in waited:
                    consumer.wait_event(r.done_event)
                    waited.add(id(r.done_event))
        return self.build(self.requests)


def submit(kind: str, requests: Sequence[DeviceRequest], process_set, *, op: int, prescale=1.0,
           postscale=1.0, root: int = -1, producer_stream_ptr: int, build: Callable,
           group_key: str | None = None) -> DeviceHandle:
    """Start a device collective of ``kind`` on ``requests`` (one per tensor; ``group_key``
    names a grouped call).  ``root``: the broadcast's root, a global rank."""
    executor = device_path.get()
    if executor is None:
        raise RuntimeError(f"no GPU backend can run here: {device_path.why_not()}")
    device = executor.claim_device(requests[0].device, [r.device for r in requests])
    for r in requests:
        if r.dtype not in FLOAT_DTYPES and (prescale != 1.0 or postscale != 1.0
                                            or op == Average):
            raise ValueError(f"device {kind} of tensor {r.name!r}: Average and prescale/"
                             f"postscale need a floating dtype on the device path, got {r.dtype}")
    backend = executor.backend
    with backend.use_device(device):
        producer = backend.external_stream(producer_stream_ptr, device)
        ready = backend.new_event(device)
        ready.record(producer)
    for r in requests:
        r.ready_event = ready
    pset = process_set_id(process_set)
    specs = [RequestSpec(KINDS[kind], r.name, DTYPE_CODES[r.dtype], r.shape, pset, op=op,
                         prescale=float(prescale), postscale=float(postscale), root=root,
                         splits=r.splits if kind == "alltoall" else None,
                         group_key=group_key, device=r)
             for r in requests]
    handles = state.engine().enqueue(specs)
    return DeviceHandle(handles, list(requests), build, backend)
