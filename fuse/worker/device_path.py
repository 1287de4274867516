"""Collectives on device (CUDA) tensors: negotiated on the CPU engine, run on the GPU backend.

CPU tensors never come here: they keep the C engine's path.  A framework adapter (for torch,
:mod:`fuse.frameworks.torch.device`) turns its CUDA tensors into flat device arrays without a
copy and calls :func:`submit`; this module does the rest, framework-free:

* **Ordering with the framework.**  At submission an event is recorded on the framework's
  current (producer) stream.  The collective stream waits for it before touching the tensor,
  and records its own event when done; :meth:`DeviceHandle.wait` makes the consumer's stream
  wait for that event.  The host never waits for the device.
* **Negotiation.**  Every process set has a flush thread.  While requests are pending it
  allgathers their descriptors (name, kind, dtype, shape, op, scales, root, splits) over the
  CPU backend, with fuse's own object allgather.  The requests that every member has submitted
  run in rank 0's submission order, so the NCCL calls are in the same order everywhere.  If
  their descriptors differ, every member gets the same error naming the tensor, the ranks and
  both values.  When every member waits and nothing matches (a name some ranks never submit),
  rank 0 warns after ``FUSE_STALL_CHECK_TIME_SECONDS`` naming the tensors and the ranks that
  lack them, and with ``FUSE_STALL_SHUTDOWN_TIME_SECONDS`` they fail on every rank, as the
  CPU engine's stall inspector does.
* **Fusion.**  Consecutive ready allreduces with the same dtype, op and scales are copied into
  one device fusion buffer per device (up to ``FUSE_FUSION_THRESHOLD`` bytes), reduced with
  one call and copied back, all on the collective stream.  A run of in-place tensors that lie
  back to back (DistributedOptimizer's gradient layout) is reduced where it lies instead.  The other kinds run one by one;
  the backend groups the point-to-point calls of one alltoall or uneven allgather (NCCL group
  start/end).

Only ops with a device meaning are here: allreduce (Sum, Average, Min, Max, Product; prescale
and postscale on floating dtypes), allgather, broadcast, alltoall, reducescatter.  Adasum,
join and the hierarchical path stay on the CPU.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

_FLOATS = ("float16", "float32", "float64")
_UNSCALED = 1.0


class DeviceError(RuntimeError):
    """A device collective failed (mismatch across ranks, backend error, stall)."""


class DeviceRequest:
    """One tensor of a device collective.  ``src`` is the input as a flat device array;
    ``out`` the flat output when its size is known (allreduce, broadcast), else ``allocate``
    (``count -> (framework tensor, flat array)``) makes it after negotiation.  ``span(count)``,
    for an in-place tensor: a flat array of ``count`` elements starting where it starts (the
    memory after it belongs to the same allocation), so a run of adjacent tensors is reduced
    where it lies."""

    def __init__(self, kind: str, name: str, dtype: str, shape: tuple, device: int, src,
                 out=None, out_obj=None, allocate: Callable | None = None, op: str = "sum",
                 prescale: float = 1.0, postscale: float = 1.0, root: int = -1,
                 splits: list[int] | None = None, span: Callable | None = None):
        self.kind, self.name, self.dtype, self.shape = kind, name, dtype, tuple(shape)
        self.device, self.src, self.out, self.out_obj = device, src, out, out_obj
        self.allocate, self.op, self.prescale, self.postscale = allocate, op, prescale, postscale
        self.root, self.splits, self.span = root, splits, span
        self.received: list[int] | None = None     # alltoall: rows received from each member
        self.ready_event = None
        self.handle: DeviceHandle | None = None

    def descriptor(self) -> tuple:
        return (self.name, self.kind, self.dtype, self.shape, self.op, self.prescale,
                self.postscale, self.root, self.splits)


class DeviceHandle:
    """What the adapter returns for a device collective.  ``build(requests)`` makes the
    user-visible result once every request is done."""

    def __init__(self, path: "DevicePath", requests: list[DeviceRequest], build: Callable):
        self.path, self.requests, self.build = path, requests, build
        self._left = len(requests)
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self.done_events: list[Any] = []
        for r in requests:
            r.handle = self

    def _finish(self, event, error=None) -> None:
        with self._lock:
            if event is not None:
                self.done_events.append(event)
            if error is not None and self.error is None:
                self.error = error
            self._left -= 1
            if self._left == 0:
                self._done.set()

    def poll(self) -> bool:
        return self._done.is_set()

    def wait(self, consumer_stream_ptr: int):
        """The result, with ``consumer_stream_ptr``'s stream ordered after the collective (an
        event wait on the device, not a host wait)."""
        while not self._done.wait(1.0):
            self.path.check_alive()
        if self.error is not None:
            raise self.error
        device = self.requests[0].device
        with self.path.backend.use_device(device):
            consumer = self.path.backend.external_stream(consumer_stream_ptr, device)
            for event in self.done_events:
                consumer.wait_event(event)
        return self.build(self.requests)


def _differs(kind: str, a: tuple, b: tuple) -> str | None:
    """Which field of two descriptors of one tensor disagrees, or None."""
    fields = ("name", "kind", "dtype", "shape", "op", "prescale_factor", "postscale_factor",
              "root_rank", "splits")
    for i, field in enumerate(fields):
        x, y = a[i], b[i]
        if field == "splits":
            continue       # each rank has its own splits; their sums are checked by the adapter
        if field == "shape" and kind in ("allgather", "alltoall"):
            x, y = x[1:], y[1:]
            field = "shape after dim 0"
        if x != y:
            return f"{field}: {x!r} vs {y!r}"
    return None


class _SetQueue:
    """The pending device requests of one process set and the thread that flushes them."""

    def __init__(self, path: "DevicePath", process_set):
        self.path, self.process_set = path, process_set
        self.pending: list[DeviceRequest] = []
        self.cond = threading.Condition()
        self.flushes = 0
        self.group = None
        self.unmatched_since: float | None = None
        self.warned = False
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"fuse-device-set-{path.pset_id(process_set)}")
        self.thread.start()

    def add(self, requests: list[DeviceRequest]) -> None:
        with self.cond:
            names = {r.name for r in self.pending}
            for r in requests:
                if r.name in names:
                    raise ValueError(f"a device collective named {r.name!r} is already "
                                     "pending on this rank; names must be unique")
                names.add(r.name)
            self.pending.extend(requests)
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending and not self.path.closed:
                    self.cond.wait()
                if self.path.closed:
                    return
                snapshot = list(self.pending)
            try:
                progressed = self.flush(snapshot)
            except BaseException as err:    # the CPU engine is gone: fail what is pending
                self._fail(snapshot, DeviceError(f"device collectives failed: {err}"))
                if self.path.closed or not self.path.engine_alive():
                    return
                continue
            if not progressed:
                time.sleep(0.002)    # every rank waits for one that has not submitted yet

    def _fail(self, requests, error) -> None:
        with self.cond:
            gone = {id(r) for r in requests}
            self.pending = [r for r in self.pending if id(r) not in gone]
        for r in requests:
            r.handle._finish(None, error)

    def _stalled(self, snapshot, lists, ranks, stalled: float) -> list:
        """Warn (rank 0) or fail (everyone) when every member has waited ``stalled`` seconds
        with nothing matching."""
        warn_after, fail_after = self.path.stall_seconds()
        if not warn_after or stalled <= warn_after:
            return []

        def lacking(r):
            return [ranks[i] for i, m in enumerate(lists) if r.name not in m]
        what = "; ".join(f"{r.name!r} missing on ranks {lacking(r)}" for r in snapshot)
        if fail_after and stalled > fail_after:
            return [(r, DeviceError(f"device {r.kind} of tensor {r.name!r} stalled for more "
                                    f"than {fail_after:g} s: ranks {lacking(r)} never "
                                    "submitted it")) for r in snapshot]
        if not self.warned and self.process_set.rank() == 0:
            self.warned = True
            from fuse._log import logger
            logger.warning("device collectives waiting for %.0f s: %s", stalled, what)
        return []

    def flush(self, snapshot: list[DeviceRequest]) -> bool:
        """One negotiation round over the set; runs what every member has.  True if any
        request finished."""
        ps = self.process_set
        waited = 0.0 if self.unmatched_since is None else time.monotonic() - self.unmatched_since
        name = f"fuse.device.{self.path.pset_id(ps)}.{self.flushes}"
        self.flushes += 1
        gathered = self.path.allgather_object(([r.descriptor() for r in snapshot], waited),
                                              name, ps)
        lists = [dict((d[0], d) for d in descs) for descs, _w in gathered]
        ranks = list(ps.ranks)
        order = [d[0] for d in gathered[0][0]]
        ready = [n for n in order if all(n in m for m in lists)]
        mine = {r.name: r for r in snapshot}
        done: list[DeviceRequest] = []
        failed: list[tuple[DeviceRequest, BaseException]] = []
        runnable: list[DeviceRequest] = []
        for n in ready:
            req = mine[n]
            why = None
            for i, m in enumerate(lists[1:], start=1):
                diff = _differs(req.kind, lists[0][n], m[n])
                if diff:
                    why = (f"device {req.kind} of tensor {n!r}: ranks {ranks[0]} and "
                           f"{ranks[i]} differ in {diff}")
                    break
            if why:
                failed.append((req, DeviceError(why)))
            else:
                if req.kind == "alltoall":     # what each member sends to this one
                    me = ps.rank()
                    req.received = [int(m[n][8][me]) for m in lists]
                elif req.kind == "allgather":  # rows from each member
                    req.splits = [int(m[n][3][0]) for m in lists]
                runnable.append(req)
        if not ready:
            if self.unmatched_since is None:
                self.unmatched_since = time.monotonic()
            # the same gathered numbers on every member: they all decide alike
            failed += self._stalled(snapshot, lists, ranks, min(w for _d, w in gathered))
        else:
            self.unmatched_since, self.warned = None, False
        if runnable:
            try:
                if self.group is None:
                    self.group = self.path.make_group(ps, runnable[0].device)
                event = self.path.execute(self.group, runnable)
                done = runnable
            except BaseException as err:
                failed.extend((r, DeviceError(f"device {r.kind} of tensor {r.name!r} "
                                              f"failed: {err}")) for r in runnable)
                event = None
        with self.cond:
            gone = {id(r) for r in done} | {id(r) for r, _e in failed}
            self.pending = [r for r in self.pending if id(r) not in gone]
        for r in done:
            r.handle._finish(event)
        for r, err in failed:
            r.handle._finish(None, err)
        return bool(done or failed)


class DevicePath:
    """The device path of one process: its backend, streams, fusion buffers and set queues.

    ``services``: the CPU-side services (fuse.collectives.calls and state), passed in so
    this module imports no engine and the stand-in tests can see every call."""

    def __init__(self, backend, config, services):
        self.backend, self.config, self.services = backend, config, services
        self.closed = False
        self._queues: dict[int, _SetQueue] = {}
        self._lock = threading.Lock()
        self._fusion: dict[int, Any] = {}
        self.device: int | None = None

    # ---- CPU-side services
    def pset_id(self, process_set) -> int:
        return self.services.pset_id(process_set)

    def allgather_object(self, obj, name, process_set):
        return self.services.allgather_object(obj, name=name, process_set=process_set)

    def stall_seconds(self) -> tuple[float, float]:
        """(warn after, fail after) in seconds; 0 means never."""
        cfg = self.config
        if cfg.stall_check_disable:
            return 0.0, 0.0
        return float(cfg.stall_check_time_seconds), float(cfg.stall_shutdown_seconds)

    def engine_alive(self) -> bool:
        return self.services.engine_alive()

    def check_alive(self) -> None:
        if not self.engine_alive():
            raise DeviceError("fuse was shut down while a device collective was pending")

    # ---- submission
    def submit(self, requests: list[DeviceRequest], process_set, producer_stream_ptr: int,
               build: Callable) -> DeviceHandle:
        device = requests[0].device
        if self.device is None:
            self.device = device
        if any(r.device != self.device for r in requests):
            raise ValueError(f"fuse's device path uses one CUDA device per process (device "
                             f"{self.device}); got a tensor on device "
                             f"{next(r.device for r in requests if r.device != self.device)}")
        for r in requests:
            if r.dtype not in _FLOATS and (r.prescale != _UNSCALED or r.postscale != _UNSCALED
                                           or r.op == "average"):
                raise ValueError(f"device {r.kind} of tensor {r.name!r}: Average and "
                                 f"prescale/postscale need float16/32/64 on the device path, "
                                 f"got {r.dtype}")
        with self.backend.use_device(device):
            producer = self.backend.external_stream(producer_stream_ptr, device)
            event = self.backend.new_event(device)
            event.record(producer)
        handle = DeviceHandle(self, requests, build)
        for r in requests:
            r.ready_event = event
        self._queue(process_set).add(requests)
        return handle

    def _queue(self, process_set) -> _SetQueue:
        key = self.pset_id(process_set)
        with self._lock:
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = _SetQueue(self, process_set)
            return q

    def make_group(self, process_set, device):
        root = process_set.ranks[0]
        me = process_set.rank()

        def exchange(payload):
            return self.services.broadcast_object(
                payload, root_rank=root, name=f"fuse.device.uid.{self.pset_id(process_set)}",
                process_set=process_set)
        return self.backend.create_group(me, len(process_set.ranks), device, exchange)

    # ---- execution, on the collective stream
    def _fusion_buffer(self, device: int, nbytes: int):
        buf = self._fusion.get(device)
        if buf is None or buf.size < nbytes:
            # made while the collective stream is current, so the memory pool reuses it in
            # that stream's order
            buf = self._fusion[device] = self.backend.empty(max(nbytes, 1 << 20), "uint8",
                                                            device)
        return buf

    def execute(self, group, requests: list[DeviceRequest]):
        """Enqueue ``requests`` (same order on every member) on the collective stream; the
        event that completes them."""
        device = requests[0].device
        stream = self.backend.stream(device)
        waited = set()
        for r in requests:
            if id(r.ready_event) not in waited:
                stream.wait_event(r.ready_event)
                waited.add(id(r.ready_event))
        # no backend group around the whole list: NCCL defers the calls of a group to its
        # end, and the copies in and out of the fusion buffer must stay in stream order.
        # This thread's current device is not the caller's: make it the tensors' device.
        with self.backend.use_device(device), stream:
            for batch in self._batches(requests):
                self._run_batch(group, batch, stream)
            done = self.backend.new_event(device)
            done.record(stream)
        return done

    def _batches(self, requests):
        """Consecutive fusable allreduces together, anything else alone."""
        limit = int(self.config.fusion_threshold)
        batch: list[DeviceRequest] = []
        nbytes = 0

        def key(r):
            return (r.dtype, r.op, r.prescale, r.postscale)
        for r in requests:
            size = r.src.size * r.src.itemsize
            if (r.kind == "allreduce" and batch and key(batch[0]) == key(r)
                    and nbytes + size <= limit):
                batch.append(r)
                nbytes += size
                continue
            if batch:
                yield batch
            batch, nbytes = [r], size
            if r.kind != "allreduce" or size > limit:
                yield batch
                batch, nbytes = [], 0
        if batch:
            yield batch

    def _scale(self, buf, factor: float) -> None:
        if factor != _UNSCALED:
            buf *= buf.dtype.type(factor)

    def _run_batch(self, group, batch, stream) -> None:
        r = batch[0]
        n = group.size
        wire_op = "sum" if r.op == "average" else r.op
        post = r.postscale / n if r.op == "average" else r.postscale
        if r.kind == "allreduce":
            if len(batch) == 1:
                if r.out is not r.src:
                    r.out[...] = r.src
                self._scale(r.out, r.prescale)
                group.allreduce(r.out, r.out, r.dtype, wire_op, stream)
                self._scale(r.out, post)
                return
            total = sum(x.src.size for x in batch)
            if _adjacent(batch):
                span = r.span(total)
                self._scale(span, r.prescale)
                group.allreduce(span, span, r.dtype, wire_op, stream)
                self._scale(span, post)
                return
            raw = self._fusion_buffer(r.device, total * r.src.itemsize)
            fused = raw[:total * r.src.itemsize].view(r.src.dtype)
            offset = 0
            for x in batch:
                fused[offset:offset + x.src.size] = x.src
                offset += x.src.size
            self._scale(fused, r.prescale)
            group.allreduce(fused, fused, r.dtype, wire_op, stream)
            self._scale(fused, post)
            offset = 0
            for x in batch:
                x.out[...] = fused[offset:offset + x.src.size]
                offset += x.src.size
        elif r.kind == "broadcast":
            if r.out is not r.src:
                r.out[...] = r.src
            group.broadcast(r.out, r.root, r.dtype, stream)
        elif r.kind == "allgather":
            row = _row_elems(r.shape)
            counts = [rows * row for rows in r.splits]
            r.out_obj, r.out = r.allocate(sum(counts))
            group.allgatherv(r.src, r.out, counts, r.dtype, stream)
        elif r.kind == "alltoall":
            row = _row_elems(r.shape)
            r.out_obj, r.out = r.allocate(sum(r.received) * row)
            group.alltoallv(r.src, [s * row for s in r.splits], r.out,
                            [s * row for s in r.received], r.dtype, stream)
        elif r.kind == "reducescatter":
            row = _row_elems(r.shape)
            counts = [rows * row for rows in _blocks(r.shape[0], n)]
            work = self._fusion_buffer(r.device, r.src.size * r.src.itemsize)
            work = work[:r.src.size * r.src.itemsize].view(r.src.dtype)
            work[...] = r.src
            self._scale(work, r.prescale)
            r.out_obj, r.out = r.allocate(counts[group.rank])
            group.reducescatter(work, r.out, counts, r.dtype, wire_op, stream)
            self._scale(r.out, post)
        else:
            raise ValueError(f"unknown device collective {r.kind!r}")

    def close(self) -> None:
        self.closed = True
        for q in list(self._queues.values()):
            with q.cond:
                q.cond.notify_all()
        self.backend.close()


def _adjacent(batch) -> bool:
    """Whether the batch's tensors are in place and back to back in one allocation."""
    if batch[0].span is None:
        return False
    for prev, x in zip(batch, batch[1:]):
        if (x.out is not x.src or x.src.data.ptr != prev.src.data.ptr + prev.src.nbytes
                or x.span is None):
            return False
    return batch[0].out is batch[0].src


def _row_elems(shape) -> int:
    n = 1
    for s in shape[1:]:
        n *= int(s)
    return n


def _blocks(rows: int, members: int) -> list[int]:
    """Rows of each member's block: even, the remainder to the first members (as the CPU
    engine does)."""
    base, extra = divmod(rows, members)
    return [base + (1 if i < extra else 0) for i in range(members)]


# ---------------------------------------------------------------- the process's device path

_path: DevicePath | None = None
_unavailable: str | None = None
_path_lock = threading.Lock()


class _Services:
    """The CPU engine's services the device path uses (fuse's own collectives)."""

    def pset_id(self, process_set):
        from fuse.worker.process_sets import process_set_id
        return process_set_id(process_set)

    def allgather_object(self, obj, name, process_set):
        from fuse.collectives import calls as collectives
        return collectives.allgather_object(obj, name=name, process_set=process_set)

    def broadcast_object(self, obj, root_rank, name, process_set):
        from fuse.collectives import calls as collectives
        return collectives.broadcast_object(obj, root_rank=root_rank, name=name,
                                            process_set=process_set)

    def engine_alive(self) -> bool:
        from fuse.worker import state
        return state.is_initialized()


def get() -> DevicePath | None:
    """The device path of this process, made on first use; None (see :func:`why_not`) when
    the GPU backend cannot run here."""
    global _path, _unavailable
    if _path is not None or _unavailable is not None:
        return _path
    with _path_lock:
        if _path is None and _unavailable is None:
            from fuse.backends import load_device_backend
            from fuse.worker import state
            cfg = state.config()
            try:
                cls = load_device_backend(cfg.gpu_backend)
                _path = DevicePath(cls(cfg), cfg, _Services())
            except Exception as err:   # no CuPy / no device: CUDA tensors are staged
                _unavailable = f"{type(err).__name__}: {err}"
    return _path


def why_not() -> str | None:
    return _unavailable


def reset() -> None:
    """Forget the device path (at shutdown; a later init makes a new one)."""
    global _path, _unavailable
    with _path_lock:
        path, _path, _unavailable = _path, None, None
    if path is not None:
        path.close()
