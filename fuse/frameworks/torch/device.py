"""torch CUDA tensors on fuse's device path (:mod:`fuse.collectives.device`), without host
copies.

A CUDA tensor reaches the GPU backend as a flat device array over its own memory (DLPack:
``backend.from_dlpack``); outputs are allocated by torch on the tensor's device.  Ordering uses
torch's current stream on the calling thread: the collective waits for it at submission, and
at synchronize it waits for the collective, with events (no host synchronisation).

When no GPU backend can run (no CuPy, no device), :func:`routes` says no once with the reason
and the caller stages CUDA tensors through host memory as before.

``cuda`` is the only door to ``torch.cuda``: the stand-in tests (no GPU here) replace it with
an object that names "cpu" as the device type, so CPU tensors exercise this wiring.
"""

from __future__ import annotations

import warnings

import torch

from fuse.collectives import calls as _c
from fuse.collectives import device as _device
from fuse.collectives.ops import Adasum, Sum
from fuse.engine.device import DeviceRequest
from fuse.frameworks.torch.tensors import dtype_name
from fuse.job import device_path as _dp
from fuse.job.process_sets import process_set_id
_VIEW_AS = {torch.bfloat16: (torch.int16, "uint16"), torch.bool: (torch.uint8, None)}


class _TorchCuda:
    """What the device path needs from ``torch.cuda``."""

    device_type = "cuda"

    def current_stream_ptr(self, device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream

    def record(self, tensor) -> None:
        """``tensor`` (made by the engine thread, on the device's default stream) is used on
        the caller's current stream: torch's caching allocator must not reuse its memory
        before that stream is done with it."""
        tensor.record_stream(torch.cuda.current_stream(tensor.device))

    def device_index(self, tensor) -> int:
        index = tensor.device.index
        return torch.cuda.current_device() if index is None else index


cuda = _TorchCuda()
_warned = False


def routes(tensors) -> bool:
    """True when ``tensors`` are device tensors and the GPU backend serves them; raises for a
    call mixing device and CPU tensors."""
    kind = cuda.device_type
    if kind == "cuda":      # is_cuda costs a tenth of building t.device: the CPU path asks too
        on_device = [t.is_cuda for t in tensors]
    else:
        on_device = [t.device.type == kind for t in tensors]
    if True not in on_device:
        return False
    if False in on_device:
        raise ValueError("a grouped collective mixes CPU and CUDA tensors; give it one kind")
    if _dp.get() is None:
        global _warned
        if not _warned:
            _warned = True
            warnings.warn(f"fuse: CUDA tensors go through host memory: the GPU backend is "
                          f"unavailable ({_dp.why_not()})", RuntimeWarning, stacklevel=3)
        return False
    return True


def _flat(backend, tensor):
    """A flat device array over ``tensor``'s memory (no copy)."""
    v = tensor.detach().reshape(-1)
    view = _VIEW_AS.get(tensor.dtype)
    if view is not None:
        v = v.view(view[0])
    arr = backend.from_dlpack(v)
    return arr.view(view[1]) if view is not None and view[1] else arr


def _allocator(backend, like):
    def allocate(count):
        out = torch.empty(count, dtype=like.dtype, device=like.device)
        return out, _flat(backend, out)
    return allocate


def _span(backend, tensor):
    """``count -> flat array`` of ``count`` elements from ``tensor``'s start on (within its
    storage: torch's as_strided checks the bounds)."""
    def span(count):
        return _flat(backend, tensor.detach().as_strided((count,), (1,)))
    return span


def _names(name, kind, pset, count, grouped):
    base = name if name is not None else _c.auto_name(kind, pset)
    return [f"{base}.{i}" for i in range(count)] if grouped else [base]


def submit(kind: str, tensors, *, name=None, process_set, grouped=False, inplace=False,
           op=Sum, prescale=1.0, postscale=1.0, root=-1, splits=None):
    """Start a device collective on ``tensors``; a handle for :func:`wait`."""
    executor = _dp.get()
    if op == Adasum:    # (mpi_ops stages Adasum through host memory instead)
        raise ValueError("Adasum is not available on the device path")
    if kind in ("allreduce", "broadcast"):
        for t in tensors:
            if inplace and not t.is_contiguous():
                raise ValueError("Tensor is required to be contiguous.")
    backend = executor.backend
    pset = process_set_id(process_set)
    names = _names(name, ("grouped_" if grouped else "") + kind, pset, len(tensors), grouped)
    sources = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    requests = []
    for n, t in zip(names, sources):
        src = _flat(backend, t)
        out_obj = out = None
        if kind in ("allreduce", "broadcast"):
            out_obj = t if inplace else torch.empty_like(t, memory_format=torch.contiguous_format)
            out = src if inplace else _flat(backend, out_obj)
        requests.append(DeviceRequest(
            n, dtype_name(t.dtype), tuple(t.shape), cuda.device_index(t), src, out=out,
            out_obj=out_obj, allocate=_allocator(backend, t), splits=splits,
            span=_span(backend, t) if inplace and kind == "allreduce" else None))
    shapes = [tuple(t.shape) for t in tensors]
    originals = list(tensors)

    def build(done):
        results = []
        for r, shape, orig in zip(done, shapes, originals):
            if kind in ("allreduce", "broadcast"):
                results.append(orig if inplace else r.out_obj)
            elif kind == "alltoall":
                cuda.record(r.out_obj)
                received = torch.tensor(r.received, dtype=torch.int32)
                results.append((r.out_obj.view(-1, *shape[1:]), received))
            else:
                cuda.record(r.out_obj)
                results.append(r.out_obj.view(-1, *shape[1:]))
        return results if grouped else results[0]
    return _device.submit(kind, requests, process_set, op=op,
                          prescale=prescale, postscale=postscale, root=root,
                          producer_stream_ptr=cuda.current_stream_ptr(requests[0].device),
                          build=build, group_key=names[0].rsplit(".", 1)[0] if grouped else None)


def is_handle(handle) -> bool:
    return isinstance(handle, _device.DeviceHandle)


def wait(handle):
    """The result of a device collective, ordered before later work on the current stream."""
    return handle.wait(cuda.current_stream_ptr(handle.requests[0].device))
