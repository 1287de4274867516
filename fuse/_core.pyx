# cython: language_level=3
# distutils: language = c++
"""The fuse engine: request queue, negotiation loop, response cache, fusion buffer, handle table.

Framework threads call :meth:`Engine.enqueue` and get integer handles back at once.  One
background thread per process does everything else, with the GIL released:

* it sends each new request to the coordinator (rank 0) over the control channel: the full
  description the first time a name is seen, a 4-byte cache slot afterwards;
* rank 0's thread also runs the coordinator: it counts, per tensor, which ranks are ready,
  checks that they agree (shape, dtype, op, root), and once every member of the process set is
  ready appends a response to one ordered stream that it sends to every member.  Ready
  allreduces of the same dtype/op/scale are fused into one response up to the fusion threshold;
* every rank executes the responses in stream order, so every rank issues the same collectives in
  the same order: pack into the fusion buffer, one backend call, unpack, scale, complete handles.

An idle engine blocks in ``poll(2)`` on its sockets and an eventfd: no cycle runs without work.
A rank that raises, exits or dies is seen at once by the coordinator (an ABORT message, or the
socket closing), which tells every other rank; their pending and future calls raise with the
failing rank and its message.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE
from cpython.exc cimport PyErr_CheckSignals
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.deque cimport deque
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.unordered_set cimport unordered_set
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from posix.unistd cimport close as c_close

from fuse._wire cimport *
from fuse._protocol cimport *
from fuse._executor cimport Executor, EX_OK, EX_BACKEND, EX_LOCAL

import threading

from fuse._protocol import (ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER,
                            JOIN, PSET_ADD, PSET_REMOVE, AVERAGE, SUM, ADASUM, MIN, MAX, PRODUCT,
                            KIND_NAMES, OP_NAMES, DTYPE_NAMES, DTYPE_CODES, _BACKEND_OPS)
from fuse._executor import FusionBufferManager, reduce_arrays, scale_array

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int c_poll "poll"(pollfd*, unsigned long, int)
    enum: POLLIN, POLLHUP, POLLERR

cdef inline void _acquire(Lock* lock) noexcept:
    """Take the engine lock from code that holds the GIL, releasing the GIL while waiting: the
    engine thread and Python threads only ever wait for the lock without the GIL, so a thread
    that holds the lock and wants the GIL can never meet one that holds the GIL and wants the
    lock."""
    with nogil:
        lock_acquire(lock)


cdef class Engine:
    """The per-process engine.  Built by :func:`fuse.common.basics.init`; not for direct use."""

    cdef int rank, size
    cdef Lock* lock
    cdef vector[Request] queue
    cdef unordered_set[string] names_in_flight
    cdef unordered_map[int64_t, HandleState] handles
    cdef int64_t next_handle
    cdef int state
    cdef string failure
    cdef int failure_kind
    cdef int wake_fd
    # control channel
    cdef int ctl_fd
    cdef string ctl_inbox
    cdef vector[int] worker_fds
    cdef vector[string] worker_inbox
    cdef vector[int] worker_state      # 0 live, 1 said bye, 2 gone
    cdef deque[string] local_frames    # frames from the coordinator to rank 0 itself
    # knobs
    cdef size_t fusion_threshold
    cdef size_t inline_threshold
    cdef size_t zero_copy_bytes
    cdef double cycle_time_s
    cdef double stall_warn_s
    cdef double stall_shutdown_s
    cdef cbool stall_check
    cdef uint32_t cache_capacity
    cdef cbool cache_enabled           # coordinator: assign cache slots (autotune may clear it)
    cdef cbool disable_group_fusion
    # autotune: values set_tuning() left for the engine thread (under the lock)
    cdef cbool tune_pending
    cdef size_t tune_fusion_threshold
    cdef double tune_cycle_time_s
    cdef cbool tune_cache_enabled
    # this rank's view
    cdef unordered_map[string, Request] inflight
    cdef unordered_map[string, WorkerCache] wcache
    cdef unordered_map[uint32_t, string] wslot_owner
    cdef unordered_map[uint64_t, string] sent_hits
    cdef unordered_map[int, PSet] psets
    cdef unordered_set[int] joined_psets
    # coordinator (rank 0)
    cdef unordered_map[string, Pending] table
    cdef vector[string] ready                  # keys ready everywhere, in the order they became so
    cdef unordered_map[string, vector[string]] group_ready
    cdef vector[CacheEntry] cache
    cdef unordered_map[string, uint32_t] cache_index
    cdef uint32_t cache_gen
    cdef uint64_t cache_clock
    cdef double last_emit
    cdef double last_stall_check
    cdef int next_pset_id
    # counters for diagnostics and benchmarks (engine thread only; read approximately)
    cdef uint64_t st_cycles
    # executing responses
    cdef Executor executor
    cdef vector[Request*] exec_reqs    # scratch: this rank's request per tensor of a response
    # Python side
    cdef object _records        # handle -> [input owner, output owner, allocator, result, aux]
    cdef object _groups         # pset id -> backend Group (keeps it alive)
    cdef object _backend
    cdef object _thread
    cdef object _log
    cdef object _create_group   # callable(ranks, id) -> Group, for dynamic process sets
    cdef Timeline* tl           # the timeline's event buffer (recording on rank 0 only)

    def __cinit__(self):
        self.lock = lock_new()
        self.tl = tl_new()
        self.wake_fd = -1
        self.ctl_fd = -1

    def __dealloc__(self):
        cdef size_t i
        if self.wake_fd >= 0:
            c_close(self.wake_fd)
        if self.ctl_fd >= 0:
            c_close(self.ctl_fd)
        for i in range(self.worker_fds.size()):
            if self.worker_fds[i] >= 0:
                c_close(self.worker_fds[i])
        lock_free(self.lock)
        tl_free(self.tl)

    def __init__(self, config, backend, world_group, int ctl_fd, worker_fds, log, create_group):
        """``ctl_fd``: connected socket to rank 0 (workers) or -1 (rank 0).
        ``worker_fds``: rank 0 only, a socket per rank (index 0 unused: -1)."""
        self.rank = config.rank
        self.size = config.size
        self.fusion_threshold = config.fusion_threshold
        self.inline_threshold = config.inline_threshold
        self.zero_copy_bytes = config.zero_copy_threshold
        self.cycle_time_s = config.cycle_time_ms / 1000.0
        self.stall_check = not config.stall_check_disable
        self.stall_warn_s = config.stall_check_time_seconds
        self.stall_shutdown_s = config.stall_shutdown_time_seconds
        if self.stall_shutdown_s and self.stall_shutdown_s < self.stall_warn_s:
            log.warning("FUSE_STALL_SHUTDOWN_TIME_SECONDS (%g) is below the stall warning time "
                        "(%g); ignoring it", self.stall_shutdown_s, self.stall_warn_s)
            self.stall_shutdown_s = 0
        self.cache_capacity = config.cache_capacity
        self.cache_enabled = self.cache_capacity > 0
        self.disable_group_fusion = config.disable_group_fusion
        self.ctl_fd = ctl_fd
        cdef int live
        for fd in worker_fds:
            # (a typed local: Cython passes a conditional expression to push_back by a
            # reference to a temporary that is already gone)
            live = 0 if fd >= 0 else 2
            self.worker_fds.push_back(fd)
            self.worker_inbox.push_back(string(b""))
            self.worker_state.push_back(live)
        self.wake_fd = wake_fd_new()
        self.state = S_RUNNING
        self.next_handle = 1
        self.next_pset_id = 1
        self._records = {}
        self.executor = Executor(self._records)
        self.executor.tl = self.tl
        self._groups = {}
        self._backend = backend
        self._log = log
        self._create_group = create_group
        self.cache.resize(self.cache_capacity)
        self._install_group(0, list(range(self.size)), world_group)

    # ------------------------------------------------------------------ Python-facing API

    def start(self):
        self._thread = threading.Thread(target=self._run, name="fuse-engine", daemon=True)
        self._thread.start()

    def _run(self):
        with nogil:
            self._loop()

    @property
    def rank(self):
        return self.rank

    @property
    def size(self):
        return self.size

    def _install_group(self, int pset_id, ranks, group):
        """Record a process set.  ``group`` is the backend Group, or None on non-members."""
        cdef PSet ps
        cdef fuse_group_ops* native = NULL
        for r in sorted(ranks):
            ps.ranks.push_back(r)
        ps.index = -1
        for i, r in enumerate(sorted(ranks)):
            if r == self.rank:
                ps.index = i
        ps.joined.assign(ps.ranks.size(), 0)
        ps.joined_count = 0
        ps.last_joined = -1
        ps.pygroup = NULL
        ps.native = NULL
        if group is not None:
            self._groups[pset_id] = group
            ps.pygroup = <PyObject*>group
            capsule = group.native_ops()
            if capsule is not None:
                if not PyCapsule_IsValid(capsule, b"fuse.group_ops.v1"):
                    raise TypeError(f"{type(group).__name__}.native_ops() must return a "
                                    "'fuse.group_ops.v1' capsule")
                native = <fuse_group_ops*>PyCapsule_GetPointer(capsule, b"fuse.group_ops.v1")
                if native.api_version != FUSE_BACKEND_API_VERSION:
                    raise TypeError(f"backend ops table has API version {native.api_version}, "
                                    f"fuse expects {FUSE_BACKEND_API_VERSION}")
                self._groups[(pset_id, "capsule")] = capsule
                ps.native = native
        _acquire(self.lock)
        self.psets[pset_id] = ps
        if pset_id >= self.next_pset_id:
            self.next_pset_id = pset_id + 1
        lock_release(self.lock)

    def process_set_ranks(self, int pset_id):
        cdef unordered_map[int, PSet].iterator it
        _acquire(self.lock)
        it = self.psets.find(pset_id)
        if it == self.psets.end():
            lock_release(self.lock)
            return None
        ranks = list(self.psets[pset_id].ranks)
        lock_release(self.lock)
        return ranks

    def process_set_ids(self):
        _acquire(self.lock)
        ids = sorted(p.first for p in self.psets)
        lock_release(self.lock)
        return ids

    def enqueue(self, list specs):
        """Queue requests atomically; returns their handles.

        Each spec is a tuple ``(kind, name, input, output, dtype, shape, op, prescale,
        postscale, root, splits, pset, allocator, group_key)``.  ``input``/``output`` export the
        buffer protocol (C-contiguous; output writable) or are None; ``allocator(shape)``
        returns ``(result, writable_buffer)`` for outputs whose size negotiation decides.
        """
        cdef vector[Request] reqs
        cdef Request r
        cdef Py_buffer view
        cdef size_t nbytes
        cdef list handles = []
        cdef list records = []
        cdef string key
        cdef int i
        for spec in specs:
            (kind, name, inp, out, dtype, shape, op, prescale, postscale, root, splits, pset,
             allocator, group_key) = spec
            r.kind = kind
            r.dtype = dtype
            r.op = op
            r.pset = pset
            r.root = root
            r.prescale = prescale
            r.postscale = postscale
            r.shape.clear()
            for d in shape:
                r.shape.push_back(d)
            r.splits.clear()
            if splits is not None:
                for d in splits:
                    r.splits.push_back(d)
            r.name = name.encode()
            r.group_key = group_key.encode() if group_key else b""
            r.group_size = len(specs) if group_key else 0
            r.rank = self.rank
            r.inp = NULL
            r.out = NULL
            nbytes = <size_t>_numel(r.shape) * dtype_size(dtype)
            if inp is not None:
                PyObject_GetBuffer(inp, &view, PyBUF_C_CONTIGUOUS)
                try:
                    if <size_t>view.len != nbytes:
                        raise ValueError(f"tensor {name!r}: buffer has {view.len} bytes, shape "
                                         f"{tuple(shape)} of {DTYPE_NAMES[dtype]} needs {nbytes}")
                    r.inp = view.buf
                finally:
                    PyBuffer_Release(&view)
            if out is not None:
                PyObject_GetBuffer(out, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
                try:
                    if <size_t>view.len != nbytes:
                        raise ValueError(f"tensor {name!r}: output has {view.len} bytes, "
                                         f"expected {nbytes}")
                    r.out = view.buf
                finally:
                    PyBuffer_Release(&view)
            reqs.push_back(r)
            records.append([inp, out, allocator, None, None])
        _acquire(self.lock)
        if self.state != S_RUNNING:
            msg = self._failure_text()
            lock_release(self.lock)
            from fuse.exceptions import ShutdownError
            raise ShutdownError(msg)
        for i in range(<int>reqs.size()):
            key = _key(reqs[i].pset, reqs[i].name)
            if self.names_in_flight.count(key):
                lock_release(self.lock)
                raise ValueError(
                    f"tensor name {reqs[i].name.decode()!r} was submitted again while a "
                    "collective of that name is still in flight on this rank; give each "
                    "concurrent collective its own name (or wait for the first one)")
            for j in range(i):
                if _key(reqs[j].pset, reqs[j].name) == key:
                    lock_release(self.lock)
                    raise ValueError(f"tensor name {reqs[i].name.decode()!r} appears twice "
                                     "in one grouped call")
        if reqs.size() and reqs[0].pset != 0 and self.psets.count(reqs[0].pset) == 0:
            lock_release(self.lock)
            raise ValueError(f"process set {reqs[0].pset} does not exist (or was removed)")
        for i in range(<int>reqs.size()):
            if self.psets.count(reqs[i].pset) and self.psets[reqs[i].pset].index < 0:
                lock_release(self.lock)
                raise ValueError(f"this rank ({self.rank}) is not a member of process set "
                                 f"{reqs[i].pset}")
        for i in range(<int>reqs.size()):
            reqs[i].handle = self.next_handle
            self.next_handle += 1
            self.names_in_flight.insert(_key(reqs[i].pset, reqs[i].name))
            self.handles[reqs[i].handle].status = H_PENDING
            self.queue.push_back(reqs[i])
            handles.append(reqs[i].handle)
            self._records[reqs[i].handle] = records[i]
        lock_release(self.lock)
        wake_fd_signal(self.wake_fd)
        return handles

    def poll(self, int64_t handle):
        """True once the handle has completed (successfully or not)."""
        cdef bint done
        _acquire(self.lock)
        if self.handles.count(handle) == 0:
            lock_release(self.lock)
            raise ValueError(f"unknown handle {handle}")
        done = self.handles[handle].status != H_PENDING
        lock_release(self.lock)
        return done

    def wait(self, int64_t handle):
        """Block until the handle completes; return ``(value, aux, record)`` and forget it, or
        raise the error it completed with.  Ctrl-C interrupts the wait."""
        cdef int status = H_PENDING
        cdef HandleState hs
        cdef bint known = True
        while True:
            with nogil:                 # the lock is only ever waited for without the GIL
                lock_acquire(self.lock)
                if self.handles.count(handle) == 0:
                    known = False
                else:
                    status = self.handles[handle].status
                    if status == H_PENDING:
                        lock_wait_ms(self.lock, 100.0)
                        status = self.handles[handle].status
                    if status != H_PENDING:
                        hs = self.handles[handle]
                        self.handles.erase(handle)
                lock_release(self.lock)
            if not known:
                raise ValueError(f"unknown handle {handle} (already synchronized?)")
            if status != H_PENDING:
                break
            PyErr_CheckSignals()        # lets Ctrl-C through
        record = self._records.pop(handle, None)
        if status == H_ERROR:
            raise _make_error(hs.error_kind, hs.error.decode(errors="replace"))
        return hs.value, list(hs.aux), record

    def abort(self, str message):
        """This rank is failing: tell the coordinator (and through it everyone) why."""
        cdef string msg = message.encode(errors="replace")
        cdef string frame
        _acquire(self.lock)
        if self.state != S_RUNNING:
            lock_release(self.lock)
            return
        self._fail_locked(_cs("rank ") + _i2s(self.rank) + _cs(" failed: ") + msg, 0)
        lock_release(self.lock)
        if self.rank == 0:
            frame.clear()
            put[uint8_t](frame, MSG_ABORT_ALL)
            put[int](frame, 0)
            put[int](frame, 0)
            put_str(frame, msg)
            self._broadcast_frame(frame)
        elif self.ctl_fd >= 0:
            put[uint8_t](frame, MSG_ABORT)
            put_str(frame, msg)
            with nogil:
                send_frame(self.ctl_fd, frame)
        wake_fd_signal(self.wake_fd)

    def shutdown(self, double timeout=5.0):
        """Stop the background thread.  Pending collectives fail with ShutdownError."""
        _acquire(self.lock)
        if self.state == S_RUNNING:
            self.state = S_STOPPING
        lock_release(self.lock)
        wake_fd_signal(self.wake_fd)
        if self._thread is not None:
            self._thread.join(timeout)
        self._finish_shutdown()

    def _finish_shutdown(self):
        cdef string frame
        _acquire(self.lock)
        if self.state == S_STOPPING:
            self.state = S_STOPPED
            self.failure = b"fuse has been shut down on this rank (fuse.shutdown() was called)"
            self.failure_kind = 2
        self._fail_pending_locked()
        lock_release(self.lock)
        if self.rank == 0:
            put[uint8_t](frame, MSG_COORD_BYE)
            self._broadcast_frame(frame)
        elif self.ctl_fd >= 0:
            put[uint8_t](frame, MSG_BYE)
            with nogil:
                send_frame(self.ctl_fd, frame)
        for g in list(self._groups.values()):
            if hasattr(g, "close"):
                try:
                    g.close()
                except Exception:
                    pass
        self._groups.clear()

    @property
    def failed(self):
        _acquire(self.lock)
        f = self.state == S_FAILED
        lock_release(self.lock)
        return f

    @property
    def failure(self):
        _acquire(self.lock)
        text = self.failure.decode(errors="replace")
        lock_release(self.lock)
        return text

    def stats(self):
        """Counters since start: allreduce responses executed (``allreduces``), how many of
        them were fused (``fused``), coordinator cycles that emitted responses (``cycles``,
        rank 0 only), tensors and bytes they carried, tensors the coordinator
        computed inline, and seconds spent copying through the fusion buffer and in the
        backend."""
        cdef Executor x = self.executor
        return {"allreduces": x.st_allreduces, "fused": x.st_fused,
                "cycles": self.st_cycles,
                "tensors": x.st_tensors, "inline": x.st_inline, "bytes": x.st_bytes,
                "copy_seconds": x.st_copy_s, "backend_seconds": x.st_backend_s}

    def set_tuning(self, size_t fusion_threshold, double cycle_time_ms, bint cache_enabled):
        """Autotune (rank 0): new fusion threshold, cycle time and response-cache switch.
        The engine thread picks them up at the start of its next coordinator step, so one
        step always sees one consistent set.  Only the coordinator's values matter: it alone
        fuses, holds ready tensors and assigns cache slots.  Called from a second Python
        thread (the tuner), so the lock is taken without the GIL: wait() leaves lock_wait_ms
        holding the lock while it takes the GIL back, and the two would deadlock."""
        with nogil:
            lock_acquire(self.lock)
            self.tune_fusion_threshold = fusion_threshold
            self.tune_cycle_time_s = cycle_time_ms / 1000.0
            self.tune_cache_enabled = cache_enabled and self.cache_capacity > 0
            self.tune_pending = True
            lock_release(self.lock)
            wake_fd_signal(self.wake_fd)

    def tuning(self):
        """The values the coordinator uses now: (fusion threshold, cycle time ms, cache)."""
        cdef size_t threshold
        cdef double cycle_s
        cdef cbool cache
        with nogil:
            lock_acquire(self.lock)
            threshold = self.fusion_threshold
            cycle_s = self.cycle_time_s
            cache = self.cache_enabled
            lock_release(self.lock)
        return (threshold, cycle_s * 1000.0, bool(cache))

    cdef void _apply_tuning(self) noexcept nogil:
        """Engine thread: take the values set_tuning() left.  Turning the cache off forgets
        every slot; a worker's later hit on one is answered as stale and sent in full."""
        cdef size_t s
        lock_acquire(self.lock)
        if not self.tune_pending:
            lock_release(self.lock)
            return
        self.tune_pending = False
        self.fusion_threshold = self.tune_fusion_threshold
        self.cycle_time_s = self.tune_cycle_time_s
        if self.cache_enabled and not self.tune_cache_enabled:
            for s in range(self.cache.size()):
                self.cache[s].used = False
            self.cache_index.clear()
        self.cache_enabled = self.tune_cache_enabled
        lock_release(self.lock)

    def timeline_start(self, bint mark_cycles, str backend):
        """Start recording timeline events (call on rank 0 only; see fuse.common.timeline)."""
        cdef string b = backend.upper().encode()
        with nogil:
            tl_start(self.tl, mark_cycles, b)

    def timeline_stop(self):
        with nogil:
            tl_stop(self.tl)

    def timeline_drain(self):
        """The events recorded since the last call: JSON objects joined by ',\\n' (bytes)."""
        cdef string out
        with nogil:
            out = tl_drain(self.tl)
        return out

    @property
    def thread_native_id(self):
        return self._thread.native_id

    @property
    def fusion_buffer_bytes(self):
        return self.executor.fusion.size

    cdef object _failure_text(self):
        if self.failure.size():
            return self.failure.decode(errors="replace")
        return "fuse has been shut down on this rank"

    cdef void _broadcast_frame(self, const string& frame) noexcept:
        cdef size_t i
        with nogil:
            for i in range(1, self.worker_fds.size()):
                if self.worker_fds[i] >= 0 and self.worker_state[i] == 0:
                    send_frame(self.worker_fds[i], frame)

    # ------------------------------------------------------------------ background thread

    cdef void _loop(self) noexcept nogil:
        cdef vector[Request] batch
        cdef string frame
        cdef int timeout_ms
        cdef int state
        cdef bint progressed
        cdef Request r
        cdef int64_t cycle_ts
        while True:
            lock_acquire(self.lock)
            state = self.state
            batch.swap(self.queue)
            lock_release(self.lock)
            if state != S_RUNNING:
                if batch.size():
                    lock_acquire(self.lock)
                    for r in batch:
                        self._complete_locked(r.handle, H_ERROR, self.failure, self.failure_kind)
                    lock_release(self.lock)
                return
            progressed = False
            cycle_ts = tl_clock(self.tl) if tl_cycles_on(self.tl) else -1
            if batch.size():
                self._submit(batch)
                batch.clear()
                progressed = True
            if self.rank == 0:
                if self._coordinator_step():
                    progressed = True
                while self.local_frames.size():
                    frame = self.local_frames.front()
                    self.local_frames.pop_front()
                    self._handle_coordinator_frame(frame)
                    progressed = True
            else:
                if self._read_coordinator():
                    progressed = True
            if progressed and cycle_ts >= 0:
                tl_cycle(self.tl, cycle_ts)
            if not progressed:
                timeout_ms = self._idle_timeout_ms()
                self._wait_for_work(timeout_ms)

    cdef int _idle_timeout_ms(self) noexcept nogil:
        """How long the thread may sleep: forever when nothing is pending anywhere."""
        cdef double remaining
        if self.rank != 0:
            return -1
        if self.ready.size():
            remaining = self.cycle_time_s - (now_seconds() - self.last_emit)
            return <int>(remaining * 1000.0) + 1 if remaining > 0 else 0
        if self.table.size() and self.stall_check:
            return 1000
        return -1

    cdef void _wait_for_work(self, int timeout_ms) noexcept nogil:
        cdef vector[pollfd] fds
        cdef pollfd p
        cdef size_t i
        p.fd = self.wake_fd
        p.events = POLLIN
        p.revents = 0
        fds.push_back(p)
        if self.ctl_fd >= 0:
            p.fd = self.ctl_fd
            fds.push_back(p)
        for i in range(1, self.worker_fds.size()):
            if self.worker_fds[i] >= 0 and self.worker_state[i] != 2:
                p.fd = self.worker_fds[i]
                fds.push_back(p)
        c_poll(fds.data(), fds.size(), timeout_ms)
        if fds[0].revents:
            wake_fd_drain(self.wake_fd)

    # ---- submitting this rank's requests

    cdef void _submit(self, vector[Request]& batch) noexcept nogil:
        cdef string msg
        cdef string full
        cdef string hits
        cdef uint32_t nfull = 0
        cdef uint32_t nhits = 0
        cdef string key
        cdef unordered_map[string, WorkerCache].iterator it
        for r in batch:
            key = _key(r.pset, r.name)
            self._attach_inline(r)
            self.inflight[key] = r
            if r.kind == K_JOIN:
                self.joined_psets.insert(r.pset)
            it = self.wcache.find(key)
            if (self.cache_capacity and it != self.wcache.end()
                    and _same_signature(r, deref_wc(it).sig) and r.group_key.size() == 0):
                put[uint32_t](hits, deref_wc(it).slot)
                put[uint32_t](hits, deref_wc(it).gen)
                put_str(hits, r.data)
                self.sent_hits[(<uint64_t>deref_wc(it).slot << 32) | deref_wc(it).gen] = key
                nhits += 1
            else:
                _write_request(full, r)
                nfull += 1
        put[uint8_t](msg, MSG_REQUESTS)
        put[uint32_t](msg, nfull)
        msg.append(full)
        put[uint32_t](msg, nhits)
        msg.append(hits)
        if self.rank == 0:
            self._ingest(0, msg)
        else:
            if send_frame(self.ctl_fd, msg) != 0:
                self._fail(_cs("lost the connection to the coordinator (rank 0) while sending "
                               "requests: rank 0 exited or crashed"), 2)

    cdef void _attach_inline(self, Request& r) noexcept nogil:
        """Small allreduces (and a small broadcast's root) send their values with the request:
        the coordinator then computes the result itself and no backend collective runs.  One
        round trip instead of negotiation plus a ring, for latency-bound tensors."""
        cdef size_t nbytes
        cdef size_t members
        if self.inline_threshold == 0 or self.psets.count(r.pset) == 0:
            return
        if not (r.kind == K_ALLREDUCE or (r.kind == K_BROADCAST and r.root == self.rank)):
            return
        members = self.psets[r.pset].ranks.size()
        nbytes = <size_t>_numel(r.shape) * dtype_size(r.dtype)
        if nbytes == 0 or nbytes * members > self.inline_threshold:
            return
        r.data.assign(<const char*>r.inp, nbytes)
        if r.kind == K_ALLREDUCE:
            scale_buffer(<void*>r.data.data(), nbytes // dtype_size(r.dtype), r.dtype, r.prescale)

    cdef void _resend_full(self, uint32_t slot, uint32_t gen) noexcept nogil:
        """The coordinator evicted a cache slot we used: send the full request instead."""
        cdef uint64_t k = (<uint64_t>slot << 32) | gen
        cdef string msg
        cdef string key
        if self.sent_hits.count(k) == 0:
            return
        key = self.sent_hits[k]
        self.sent_hits.erase(k)
        if self.wcache.count(key) and self.wcache[key].gen == gen:
            self.wcache.erase(key)
        if self.inflight.count(key) == 0:
            return
        put[uint8_t](msg, MSG_REQUESTS)
        put[uint32_t](msg, 1)
        _write_request(msg, self.inflight[key])
        put[uint32_t](msg, 0)
        if self.rank == 0:
            self._ingest(0, msg)
        elif send_frame(self.ctl_fd, msg) != 0:
            self._fail(_cs("lost the connection to the coordinator (rank 0)"), 2)

    # ---- worker side: reading the response stream

    cdef bint _read_coordinator(self) noexcept nogil:
        cdef ssize_t n
        cdef string frame
        cdef bint got = False
        if self.ctl_fd < 0:
            return False
        n = recv_some(self.ctl_fd, self.ctl_inbox)
        while pop_frame(self.ctl_inbox, frame):
            self._handle_coordinator_frame(frame)
            got = True
        if n == 0 or n == -1:
            c_close(self.ctl_fd)
            self.ctl_fd = -1
            lock_acquire(self.lock)
            if self.state == S_RUNNING:
                self._fail_locked(_cs("lost the connection to the coordinator (rank 0): rank 0 "
                                      "exited or crashed without reporting an error"), 2)
            lock_release(self.lock)
            return True
        return got

    cdef void _handle_coordinator_frame(self, const string& frame) noexcept nogil:
        cdef Reader rd = reader_new(frame)
        cdef uint8_t t = get[uint8_t](rd)
        cdef uint32_t n, i, slot, gen
        cdef int who
        cdef string msg
        cdef Response resp
        cdef int state
        cdef int kind
        if t == MSG_RESPONSES:
            n = get[uint32_t](rd)
            for i in range(n):
                resp = _read_response(rd)
                if rd.bad:
                    self._fail(_cs("corrupt response from the coordinator"), 0)
                    return
                self._execute(resp)
                lock_acquire(self.lock)
                state = self.state
                lock_release(self.lock)
                if state == S_FAILED:
                    return
        elif t == MSG_STALE:
            slot = get[uint32_t](rd)
            gen = get[uint32_t](rd)
            self._resend_full(slot, gen)
        elif t == MSG_ABORT_ALL:      # (who, error kind, message); who < 0: the job itself
            who = get[int](rd)
            kind = get[int](rd)
            msg = get_str(rd)
            self._fail_from(who, msg, kind)
        elif t == MSG_COORD_BYE:
            lock_acquire(self.lock)
            if self.state == S_RUNNING:
                self._fail_locked(_cs("rank 0 has shut down (it called fuse.shutdown() or "
                                      "exited); no further collectives are possible"), 2)
            lock_release(self.lock)

    # ---- completing handles

    cdef void _complete_locked(self, int64_t handle, int status, const string& error,
                               int error_kind) noexcept nogil:
        cdef unordered_map[int64_t, HandleState].iterator it = self.handles.find(handle)
        if it == self.handles.end():
            return
        self.handles[handle].status = status
        self.handles[handle].error = error
        self.handles[handle].error_kind = error_kind
        lock_notify_all(self.lock)

    cdef void _finish_request(self, const string& key, int status, const string& error,
                              int error_kind) noexcept nogil:
        cdef unordered_map[string, Request].iterator it = self.inflight.find(key)
        if it == self.inflight.end():
            return
        cdef int64_t handle = deref_req(it).handle
        if tl_on(self.tl):          # before the handle completes (see tl_close)
            self._tl_close(deref_req(it).name, deref_req(it).dtype, deref_req(it).shape)
        self.inflight.erase(it)
        lock_acquire(self.lock)
        self.names_in_flight.erase(key)
        self._complete_locked(handle, status, error, error_kind)
        lock_release(self.lock)

    cdef void _fail_from(self, int who, const string& msg, int kind) noexcept nogil:
        """Fail because rank ``who`` failed with ``msg`` (``who`` < 0: the job as a whole)."""
        if who >= 0:
            self._fail(_cs("rank ") + _i2s(who) + _cs(" failed: ") + msg, kind)
        else:
            self._fail(msg, kind)

    cdef void _fail(self, const string& why, int kind) noexcept nogil:
        lock_acquire(self.lock)
        self._fail_locked(why, kind)
        lock_release(self.lock)

    cdef void _fail_locked(self, const string& why, int kind) noexcept nogil:
        """Enter the failed state: every pending and future call raises ``why``."""
        if self.state == S_FAILED:
            return
        self.state = S_FAILED
        self.failure = why
        self.failure_kind = kind
        self._fail_pending_locked()
        wake_fd_signal(self.wake_fd)

    cdef void _fail_pending_locked(self) noexcept nogil:
        cdef unordered_map[int64_t, HandleState].iterator it = self.handles.begin()
        cdef string why = self.failure
        if why.size() == 0:
            why = _cs("fuse has been shut down on this rank")
        while it != self.handles.end():
            if deref_hs(it).status == H_PENDING:
                deref_hs(it).status = H_ERROR
                deref_hs(it).error = why
                deref_hs(it).error_kind = self.failure_kind if self.failure_kind else 2
            inc_hs(it)
        self.names_in_flight.clear()
        lock_notify_all(self.lock)

    # ------------------------------------------------------------------ coordinator (rank 0)

    # The coordinator half of Engine (rank 0 only), included into the class body of Engine.
    # It turns requests from every rank into one ordered stream of responses.

    cdef bint _coordinator_step(self) noexcept nogil:
        """Read what the workers sent, check for stalls, emit ready responses."""
        cdef bint progressed = False
        cdef size_t r
        cdef ssize_t n
        cdef string frame
        cdef double now
        self._apply_tuning()
        for r in range(1, self.worker_fds.size()):
            if self.worker_fds[r] < 0 or self.worker_state[r] == 2:
                continue
            n = recv_some(self.worker_fds[r], self.worker_inbox[r])
            while pop_frame(self.worker_inbox[r], frame):
                self._ingest(<int>r, frame)
                progressed = True
            if n == 0 or n == -1:
                self._worker_gone(<int>r)
                progressed = True
            if self._state() != S_RUNNING:
                return True
        now = now_seconds()
        if self.stall_check and self.table.size() and now - self.last_stall_check >= 1.0:
            self.last_stall_check = now
            self._check_stalls(now)
        if self.ready.size():
            if (self.table.size() > self.ready.size()
                    and now - self.last_emit < self.cycle_time_s):
                return progressed          # others are partly submitted: give them a moment
            self._emit()
            progressed = True
        return progressed

    cdef int _state(self) noexcept nogil:
        cdef int s
        lock_acquire(self.lock)
        s = self.state
        lock_release(self.lock)
        return s

    cdef void _worker_gone(self, int r) noexcept nogil:
        c_close(self.worker_fds[r])
        self.worker_fds[r] = -1
        if self.worker_state[r] == 1:      # said goodbye first: a clean exit
            self.worker_state[r] = 2
            self._fail_entries_missing(r)
            return
        self.worker_state[r] = 2
        self._abort_job(r, _cs("the process exited without calling fuse.shutdown() (it "
                               "crashed, was killed, or called os._exit); its connection "
                               "to rank 0 closed"), 0)

    cdef void _abort_job(self, int who, const string& msg, int kind) noexcept nogil:
        """Tell every rank the job failed, then fail here too."""
        cdef string frame
        cdef size_t i
        put[uint8_t](frame, MSG_ABORT_ALL)
        put[int](frame, who)
        put[int](frame, kind)
        put_str(frame, msg)
        for i in range(1, self.worker_fds.size()):
            if self.worker_fds[i] >= 0 and self.worker_state[i] == 0 and <int>i != who:
                send_frame(self.worker_fds[i], frame)
        self._fail_from(who, msg, kind)

    cdef void _ingest(self, int rank, const string& msg) noexcept nogil:
        cdef Reader rd = reader_new(msg)
        cdef uint8_t t = get[uint8_t](rd)
        cdef uint32_t n, i, slot, gen
        cdef Request req
        cdef string frame
        cdef string data
        if t == MSG_REQUESTS:
            n = get[uint32_t](rd)
            for i in range(n):
                req = _read_request(rd)
                if rd.bad:
                    break
                req.rank = rank
                self._add_request(req)
            n = get[uint32_t](rd)
            for i in range(n):
                slot = get[uint32_t](rd)
                gen = get[uint32_t](rd)
                data = get_str(rd)
                if rd.bad:
                    break
                if slot < self.cache.size() and self.cache[slot].used and self.cache[slot].gen == gen:
                    req = self.cache[slot].tmpl
                    req.rank = rank
                    req.data.swap(data)
                    self._add_request(req)
                else:
                    frame.clear()
                    put[uint8_t](frame, MSG_STALE)
                    put[uint32_t](frame, slot)
                    put[uint32_t](frame, gen)
                    self._send_to(rank, frame)
            if rd.bad:
                self._abort_job(rank, _cs("sent a corrupt request message"), 0)
        elif t == MSG_ABORT:
            self._abort_job(rank, get_str(rd), 0)
        elif t == MSG_BYE:
            self.worker_state[rank] = 1
            self._fail_entries_missing(rank)

    cdef void _send_to(self, int rank, const string& frame) noexcept nogil:
        if rank == 0:
            self.local_frames.push_back(frame)
        elif self.worker_fds[rank] >= 0 and self.worker_state[rank] == 0:
            send_frame(self.worker_fds[rank], frame)   # a failure shows up as EOF on read

    cdef void _add_request(self, Request& req) noexcept nogil:
        cdef string key = _key(req.pset, req.name)
        cdef PSet* ps
        cdef int pos
        cdef Pending* entry
        if self.psets.count(req.pset) == 0:
            self._reject(req, _cs("process set ") + _i2s(req.pset) + _cs(" does not exist"))
            return
        ps = &self.psets[req.pset]
        pos = _position(ps, req.rank)
        if pos < 0:
            self._reject(req, _cs("rank ") + _i2s(req.rank) +
                         _cs(" is not a member of process set ") + _i2s(req.pset))
            return
        if self.table.count(key) == 0:
            entry = &self.table[key]
            entry.reqs.resize(ps.ranks.size())
            entry.have.assign(ps.ranks.size(), 0)
            entry.count = 0
            entry.first_time = now_seconds()
            entry.warned = False
            entry.is_ready = False
            entry.all_data = True
            entry.error_kind = 0
        entry = &self.table[key]
        if entry.have[pos]:
            return
        self._accumulate(entry, req)
        req.data.clear()
        entry.reqs[pos] = req
        entry.have[pos] = 1
        entry.count += 1
        if tl_on(self.tl):
            if entry.count == 1:
                tl_span(self.tl, req.name, b'B', TLW_NEGOTIATE, req.kind)
            tl_tick(self.tl, req.name, req.rank)
        if req.kind == K_JOIN:
            if not ps.joined[pos]:
                ps.joined[pos] = 1
                ps.joined_count += 1
            ps.last_joined = req.rank
            self._recheck_pset(req.pset)
        self._check_ready(key)

    cdef void _accumulate(self, Pending* entry, Request& req) noexcept nogil:
        """Fold a small collective's values into the entry as they arrive."""
        cdef Request* first = self._first(entry)
        if not entry.all_data:
            return
        if req.kind == K_BROADCAST:
            if req.data.size():
                entry.acc.swap(req.data)
            return
        if req.kind != K_ALLREDUCE or req.data.size() == 0:
            entry.all_data = False
            entry.acc.clear()
            return
        if first == NULL:
            entry.acc = req.data
            return
        if (first.kind != K_ALLREDUCE or first.dtype != req.dtype or first.op != req.op
                or req.data.size() != entry.acc.size()):
            entry.all_data = False      # validation reports the mismatch
            entry.acc.clear()
            return
        reduce_into(<void*>entry.acc.data(), req.data.data(),
                    req.data.size() // dtype_size(req.dtype), req.dtype, _backend_op(req.op))

    cdef bint _finish_inline(self, Pending* entry, Response* resp) noexcept nogil:
        """If the coordinator holds the whole result, put it in the response."""
        cdef Request* a = self._first(entry)
        cdef PSet* ps = &self.psets[a.pset]
        cdef size_t nbytes = <size_t>_numel(a.shape) * dtype_size(a.dtype)
        cdef size_t i
        cdef string zeros
        cdef double post
        if not entry.all_data or entry.acc.size() != nbytes or nbytes == 0:
            return False
        if a.kind == K_ALLREDUCE:
            for i in range(entry.have.size()):      # joined ranks contribute zeros
                if not entry.have[i] and (a.op == OP_MIN or a.op == OP_MAX or a.op == OP_PRODUCT):
                    zeros.assign(nbytes, <char>0)
                    reduce_into(<void*>entry.acc.data(), zeros.data(), nbytes // dtype_size(a.dtype),
                                a.dtype, _backend_op(a.op))
            post = a.postscale
            if a.op == OP_AVERAGE:
                post = post / <double>ps.ranks.size()
            scale_buffer(<void*>entry.acc.data(), nbytes // dtype_size(a.dtype), a.dtype, post)
        elif a.kind != K_BROADCAST:
            return False
        resp.inline_data = True
        resp.payloads.push_back(string(b""))
        resp.payloads.back().swap(entry.acc)
        return True

    cdef void _reject(self, Request& req, const string& why) noexcept nogil:
        """An error response for one request, sent to its rank only."""
        cdef Response resp
        cdef string frame
        resp.kind = req.kind
        resp.pset = req.pset
        resp.names.push_back(req.name)
        resp.shapes.push_back(req.shape)
        resp.slots.push_back(NO_SLOT)
        resp.gens.push_back(0)
        resp.error = why
        resp.error_kind = 0
        resp.last_joined = -1
        put[uint8_t](frame, MSG_RESPONSES)
        put[uint32_t](frame, 1)
        _write_response(frame, resp)
        self._send_to(req.rank, frame)

    cdef void _recheck_pset(self, int pset) noexcept nogil:
        cdef vector[string] keys
        cdef unordered_map[string, Pending].iterator it = self.table.begin()
        cdef string k
        while it != self.table.end():
            k = it_key(it)
            if not deref_pending(it).is_ready and _key_pset(k) == pset:
                keys.push_back(k)
            inc_pending(it)
        for k in keys:
            self._check_ready(k)

    cdef void _fail_entries_missing(self, int rank) noexcept nogil:
        """Rank shut down cleanly: whatever still waits for it can never complete."""
        cdef vector[string] keys
        cdef string k
        cdef unordered_map[string, Pending].iterator it = self.table.begin()
        while it != self.table.end():
            if not deref_pending(it).is_ready:
                keys.push_back(it_key(it))
            inc_pending(it)
        for k in keys:
            self._check_ready(k)

    cdef void _check_ready(self, const string& key) noexcept nogil:
        cdef Pending* entry = &self.table[key]
        cdef Request* first = NULL
        cdef PSet* ps
        cdef size_t i
        cdef bint complete = True
        cdef string missing_gone
        cdef string joined_problem
        cdef string k
        if entry.is_ready:
            return
        for i in range(entry.have.size()):
            if entry.have[i]:
                first = &entry.reqs[i]
                break
        if first == NULL:
            return
        ps = &self.psets[first.pset]
        for i in range(entry.have.size()):
            if entry.have[i]:
                continue
            if ps.joined[i] and first.kind != K_JOIN:
                if first.kind != K_ALLREDUCE:
                    joined_problem = _cs(_kind_name(first.kind))
                continue
            complete = False
            if ps.ranks[i] != 0 and self.worker_state[ps.ranks[i]] != 0:
                missing_gone = _cs("rank ") + _i2s(ps.ranks[i])
        if joined_problem.size():
            self._error_ready(key, joined_problem + _cs(" is not supported with join at this time "
                              "(only allreduce is): a rank called join() while tensor '") +
                              first.name + _cs("' was outstanding"), 0)
            return
        if not complete:
            if missing_gone.size():
                self._error_ready(key, missing_gone + _cs(" has already shut down (called "
                                  "fuse.shutdown() or exited), so collective '") + first.name +
                                  _cs("' can never complete"), 2)
            return
        entry.is_ready = True
        if tl_on(self.tl):
            self._tl_ready(first)
        if first.group_key.size() and first.group_size > 1:
            self.group_ready[first.group_key].push_back(key)
            if <int>self.group_ready[first.group_key].size() >= first.group_size:
                for k in self.group_ready[first.group_key]:
                    self.ready.push_back(k)
                self.group_ready.erase(first.group_key)
        else:
            self.ready.push_back(key)

    cdef void _error_ready(self, const string& key, const string& why, int kind) noexcept nogil:
        cdef Pending* entry = &self.table[key]
        entry.is_ready = True
        if tl_on(self.tl) and self._first(entry) != NULL:
            self._tl_ready(self._first(entry))
        entry.error = why
        entry.error_kind = kind
        self.ready.push_back(key)

    cdef string _validate(self, Pending* entry) noexcept nogil:
        """Empty if the ranks agree; otherwise the message every rank raises."""
        cdef Request* a = NULL
        cdef Request* b
        cdef PSet* ps
        cdef size_t i, j
        cdef int ra = -1
        cdef int64_t total
        cdef string what
        cdef pair[int, PSet] p
        for i in range(entry.have.size()):
            if entry.have[i]:
                a = &entry.reqs[i]
                ra = a.rank
                break
        ps = &self.psets[a.pset]
        what = _cs(" for tensor '") + a.name + _cs("'")
        if (a.kind == K_ALLGATHER or a.kind == K_ALLTOALL) and a.shape.size() == 0:
            return _cs(_kind_name(a.kind)) + _cs(" needs at least one dimension") + what + \
                _cs(": rank ") + _i2s(ra) + _cs(" sent a scalar")
        if a.kind == K_BROADCAST and _position(ps, a.root) < 0:
            return _cs("broadcast root rank ") + _i2s(a.root) + _cs(" is not a member of process set ") + \
                _i2s(a.pset) + what
        for i in range(entry.have.size()):
            if not entry.have[i] or &entry.reqs[i] == a:
                continue
            b = &entry.reqs[i]
            if b.kind != a.kind:
                return _cs("Mismatched operations") + what + _cs(": rank ") + _i2s(ra) + _cs(" did ") + \
                    _cs(_kind_name(a.kind)) + _cs(", rank ") + _i2s(b.rank) + _cs(" did ") + _cs(_kind_name(b.kind))
            if b.dtype != a.dtype:
                return _cs("Mismatched data types") + what + _cs(": rank ") + _i2s(ra) + _cs(" sent ") + \
                    _cs(dtype_name(a.dtype)) + _cs(", rank ") + _i2s(b.rank) + _cs(" sent ") + _cs(dtype_name(b.dtype))
            if (a.kind == K_ALLREDUCE or a.kind == K_REDUCESCATTER) and b.op != a.op:
                return _cs("Mismatched reduction ops") + what + _cs(": rank ") + _i2s(ra) + _cs(" used ") + \
                    _cs(_op_name(a.op)) + _cs(", rank ") + _i2s(b.rank) + _cs(" used ") + _cs(_op_name(b.op))
            if b.prescale != a.prescale or b.postscale != a.postscale:
                return _cs("Mismatched prescale/postscale factors") + what + _cs(": rank ") + _i2s(ra) + \
                    _cs(" used ") + _d2s(a.prescale) + _cs("/") + _d2s(a.postscale) + _cs(", rank ") + \
                    _i2s(b.rank) + _cs(" used ") + _d2s(b.prescale) + _cs("/") + _d2s(b.postscale)
            if a.kind == K_BROADCAST and b.root != a.root:
                return _cs("Mismatched broadcast root ranks") + what + _cs(": rank ") + _i2s(ra) + \
                    _cs(" gave root ") + _i2s(a.root) + _cs(", rank ") + _i2s(b.rank) + _cs(" gave root ") + _i2s(b.root)
            if a.kind == K_ALLREDUCE or a.kind == K_BROADCAST or a.kind == K_REDUCESCATTER:
                if not vec_eq(b.shape, a.shape):
                    return _cs("Mismatched ") + _cs(_kind_name(a.kind)) + _cs(" tensor shapes") + what + \
                        _cs(": rank ") + _i2s(ra) + _cs(" sent ") + _shape_str(a.shape) + _cs(", rank ") + \
                        _i2s(b.rank) + _cs(" sent ") + _shape_str(b.shape)
            if a.kind == K_ALLGATHER or a.kind == K_ALLTOALL:
                if b.shape.size() != a.shape.size():
                    return _cs("Mismatched ") + _cs(_kind_name(a.kind)) + _cs(" tensor ranks") + what + \
                        _cs(": rank ") + _i2s(ra) + _cs(" sent ") + _shape_str(a.shape) + _cs(", rank ") + \
                        _i2s(b.rank) + _cs(" sent ") + _shape_str(b.shape) + _cs("; only the first dimension may differ")
                for j in range(1, a.shape.size()):
                    if a.shape[j] != b.shape[j]:
                        return _cs("Mismatched ") + _cs(_kind_name(a.kind)) + _cs(" tensor shapes") + what + \
                            _cs(" in dimension ") + _i2s(j) + _cs(": rank ") + _i2s(ra) + _cs(" sent ") + \
                            _shape_str(a.shape) + _cs(", rank ") + _i2s(b.rank) + _cs(" sent ") + \
                            _shape_str(b.shape) + _cs("; only the first dimension may differ")
            if a.kind == K_PSET_ADD and not vec_eq(b.splits, a.splits):
                return _cs("Mismatched add_process_set calls: rank ") + _i2s(ra) + _cs(" asked for ranks ") + \
                    _shape_str(a.splits) + _cs(", rank ") + _i2s(b.rank) + _cs(" for ") + _shape_str(b.splits)
            if a.kind == K_PSET_REMOVE and not vec_eq(b.splits, a.splits):
                return _cs("Mismatched remove_process_set calls: rank ") + _i2s(ra) + _cs(" removed set ") + \
                    _shape_str(a.splits) + _cs(", rank ") + _i2s(b.rank) + _cs(" removed ") + _shape_str(b.splits)
        if a.kind == K_ALLTOALL:
            for i in range(entry.have.size()):
                b = &entry.reqs[i]
                if b.splits.size() and b.splits.size() != ps.ranks.size():
                    return _cs("alltoall splits") + what + _cs(" on rank ") + _i2s(b.rank) + _cs(" has ") + \
                        _i2s(b.splits.size()) + _cs(" entries; the process set has ") + \
                        _i2s(ps.ranks.size()) + _cs(" ranks")
                if b.splits.size() == 0 and b.shape[0] % <int64_t>ps.ranks.size() != 0:
                    return _cs("alltoall without splits") + what + _cs(" needs the first dimension to be "
                        "divisible by the number of ranks: rank ") + _i2s(b.rank) + _cs(" sent ") + \
                        _shape_str(b.shape) + _cs(" to ") + _i2s(ps.ranks.size()) + _cs(" ranks")
        if a.kind == K_PSET_ADD:
            if a.splits.size() == 0:
                return _cs("add_process_set needs at least one rank")
            for i in range(a.splits.size()):
                if a.splits[i] < 0 or a.splits[i] >= self.size or (i and a.splits[i] <= a.splits[i - 1]):
                    return _cs("add_process_set: ranks ") + _shape_str(a.splits) + \
                        _cs(" must be distinct, sorted and below ") + _i2s(self.size)
            for p in self.psets:
                if p.second.ranks.size() == a.splits.size():
                    total = 1
                    for i in range(a.splits.size()):
                        if p.second.ranks[i] != a.splits[i]:
                            total = 0
                    if total:
                        return _cs("add_process_set: a process set with ranks ") + _shape_str(a.splits) + \
                            _cs(" already exists (id ") + _i2s(p.first) + _cs(")")
        if a.kind == K_PSET_REMOVE:
            if a.splits.size() != 1 or a.splits[0] == 0 or self.psets.count(<int>a.splits[0]) == 0:
                return _cs("remove_process_set: no such process set ") + _shape_str(a.splits) + \
                    _cs(" (the global set cannot be removed)")
        return string(b"")

    cdef size_t _entry_bytes(self, Pending* entry) noexcept nogil:
        cdef size_t i
        for i in range(entry.have.size()):
            if entry.have[i]:
                return <size_t>_numel(entry.reqs[i].shape) * dtype_size(entry.reqs[i].dtype)
        return 0

    cdef Request* _first(self, Pending* entry) noexcept nogil:
        cdef size_t i
        for i in range(entry.have.size()):
            if entry.have[i]:
                return &entry.reqs[i]
        return NULL

    cdef Response _make_response(self, Pending* entry) noexcept nogil:
        cdef Response resp
        cdef Request* a = self._first(entry)
        cdef PSet* ps = &self.psets[a.pset]
        cdef size_t i, j
        cdef int64_t n
        resp.kind = a.kind
        resp.dtype = a.dtype
        resp.op = a.op
        resp.pset = a.pset
        resp.root = a.root
        resp.prescale = a.prescale
        resp.postscale = a.postscale
        resp.last_joined = -1
        resp.names.push_back(a.name)
        resp.shapes.push_back(a.shape)
        resp.slots.push_back(NO_SLOT)
        resp.gens.push_back(0)
        resp.inline_data = False
        resp.error = entry.error
        resp.error_kind = entry.error_kind
        if resp.error.size() == 0:
            resp.error = self._validate(entry)
            resp.error_kind = 1
        if resp.error.size():
            return resp
        if a.kind == K_ALLREDUCE or a.kind == K_BROADCAST:
            self._finish_inline(entry, &resp)
        if a.kind == K_ALLGATHER:
            for i in range(entry.reqs.size()):
                resp.rank_dims.push_back(entry.reqs[i].shape[0])
        elif a.kind == K_ALLTOALL:
            for i in range(entry.reqs.size()):
                if entry.reqs[i].splits.size():
                    for j in range(entry.reqs[i].splits.size()):
                        resp.rank_dims.push_back(entry.reqs[i].splits[j])
                else:
                    n = entry.reqs[i].shape[0] // <int64_t>ps.ranks.size()
                    for j in range(ps.ranks.size()):
                        resp.rank_dims.push_back(n)
        elif a.kind == K_JOIN:
            resp.last_joined = ps.last_joined
            ps.joined.assign(ps.ranks.size(), 0)
            ps.joined_count = 0
            ps.last_joined = -1
        elif a.kind == K_PSET_ADD:
            resp.rank_dims.push_back(self.next_pset_id)
            self.next_pset_id += 1
            for i in range(a.splits.size()):
                resp.rank_dims.push_back(a.splits[i])
        elif a.kind == K_PSET_REMOVE:
            resp.rank_dims.push_back(a.splits[0])
        return resp

    cdef bint _fusable(self, Response* r, Pending* entry) noexcept nogil:
        cdef Request* b = self._first(entry)
        if entry.error.size() or b.kind != K_ALLREDUCE:
            return False
        if b.dtype != r.dtype or b.op != r.op or b.pset != r.pset:
            return False
        if b.prescale != r.prescale or b.postscale != r.postscale:
            return False
        if r.inline_data != (entry.all_data and entry.acc.size() ==
                             <size_t>_numel(b.shape) * dtype_size(b.dtype)):
            return False
        if self._validate(entry).size():
            return False
        return True

    cdef void _assign_cache(self, Response* resp, size_t idx, Pending* entry, const string& key) noexcept nogil:
        """Give a negotiated allreduce a cache slot so later submissions travel as 8 bytes."""
        cdef uint32_t slot = NO_SLOT
        cdef uint32_t s
        cdef uint64_t oldest = 0xFFFFFFFFFFFFFFFF
        cdef unordered_map[string, uint32_t].iterator it
        if self.cache_capacity == 0 or not self.cache_enabled:
            return
        self.cache_clock += 1
        it = self.cache_index.find(key)
        if it != self.cache_index.end():
            slot = it_u32(it)
            if _same_signature(self.cache[slot].tmpl, self._first(entry)[0]):
                self.cache[slot].last_use = self.cache_clock
                resp.slots[idx] = slot
                resp.gens[idx] = self.cache[slot].gen
                return
        else:
            for s in range(self.cache_capacity):
                if not self.cache[s].used:
                    slot = s
                    break
            if slot == NO_SLOT:      # evict the least recently used slot nobody is waiting on
                for s in range(self.cache_capacity):
                    if self.cache[s].last_use < oldest and self.table.count(self.cache[s].key) == 0:
                        oldest = self.cache[s].last_use
                        slot = s
            if slot == NO_SLOT:
                return
            if self.cache[slot].used:
                self.cache_index.erase(self.cache[slot].key)
        self.cache_gen += 1
        self.cache[slot].used = True
        self.cache[slot].key = key
        self.cache[slot].tmpl = self._first(entry)[0]
        self.cache[slot].tmpl.inp = NULL
        self.cache[slot].tmpl.out = NULL
        self.cache[slot].gen = self.cache_gen
        self.cache[slot].last_use = self.cache_clock
        self.cache_index[key] = slot
        resp.slots[idx] = slot
        resp.gens[idx] = self.cache_gen

    cdef void _emit(self) noexcept nogil:
        """Turn the ready list into responses (fusing allreduces) and send them, in one order,
        to every member of each response's process set."""
        cdef vector[string] keys
        cdef vector[cbool] taken
        cdef vector[Response] out
        cdef vector[vector[string]] out_keys
        cdef vector[string] bodies
        cdef vector[uint32_t] counts
        cdef Response resp
        cdef Pending* entry
        cdef Pending* other
        cdef size_t i, j, k, total
        cdef PSet* ps
        cdef string frame
        keys.swap(self.ready)
        self.st_cycles += 1
        taken.assign(keys.size(), False)
        for i in range(keys.size()):
            if taken[i]:
                continue
            taken[i] = True
            entry = &self.table[keys[i]]
            resp = self._make_response(entry)
            out_keys.push_back(vector[string]())
            out_keys.back().push_back(keys[i])
            if resp.kind == K_ALLREDUCE and resp.error.size() == 0:
                self._assign_cache(&resp, 0, entry, keys[i])
                total = self._entry_bytes(entry)
                for j in range(i + 1, keys.size()):
                    # A tensor above the zero-copy size is reduced where it lies: copying it
                    # into and out of the fusion buffer costs more than the extra call.
                    if (self.fusion_threshold == 0
                            or self._entry_bytes(entry) > self.zero_copy_bytes):
                        break           # no fusion, or the first tensor is reduced in place
                    if taken[j]:
                        continue
                    other = &self.table[keys[j]]
                    if self._entry_bytes(other) > self.zero_copy_bytes:
                        continue
                    if not self._fusable(&resp, other):
                        continue
                    if (self.disable_group_fusion and
                            self._first(other).group_key != self._first(entry).group_key):
                        continue
                    if total + self._entry_bytes(other) > self.fusion_threshold:
                        continue
                    if resp.inline_data and not self._finish_inline(other, &resp):
                        continue
                    total += self._entry_bytes(other)
                    taken[j] = True
                    resp.names.push_back(self._first(other).name)
                    resp.shapes.push_back(self._first(other).shape)
                    resp.slots.push_back(NO_SLOT)
                    resp.gens.push_back(0)
                    self._assign_cache(&resp, resp.names.size() - 1, other, keys[j])
                    out_keys.back().push_back(keys[j])
            out.push_back(resp)
        bodies.assign(self.size, string(b""))
        counts.assign(self.size, 0)
        for i in range(out.size()):
            ps = &self.psets[out[i].pset]
            frame.clear()
            _write_response(frame, out[i])
            for j in range(ps.ranks.size()):
                k = <size_t>ps.ranks[j]
                bodies[k].append(frame)
                counts[k] += 1
            for j in range(out_keys[i].size()):
                self.table.erase(out_keys[i][j])
        for k in range(<size_t>self.size):
            if counts[k] == 0:
                continue
            frame.clear()
            put[uint8_t](frame, MSG_RESPONSES)
            put[uint32_t](frame, counts[k])
            frame.append(bodies[k])
            self._send_to(<int>k, frame)
        self.last_emit = now_seconds()

    cdef void _check_stalls(self, double now) noexcept nogil:
        """Horovod's stall inspector: name the ranks that keep others waiting."""
        cdef unordered_map[string, Pending].iterator it = self.table.begin()
        cdef Pending* e
        cdef Request* a
        cdef PSet* ps
        cdef size_t i
        cdef string report
        cdef string fatal
        cdef vector[string] per_rank
        cdef vector[int] per_rank_n
        cdef bint any_new = False
        cdef double age
        per_rank.assign(self.size, string(b""))
        per_rank_n.assign(self.size, 0)
        while it != self.table.end():
            e = &deref_pending(it)
            inc_pending(it)
            if e.is_ready:
                continue
            a = self._first(e)
            if a == NULL or a.kind == K_JOIN:
                continue
            age = now - e.first_time
            if age < self.stall_warn_s:
                continue
            if not e.warned:
                any_new = True
                e.warned = True
            ps = &self.psets[a.pset]
            for i in range(e.have.size()):
                if e.have[i] or ps.joined[i]:
                    continue
                per_rank_n[ps.ranks[i]] += 1
                if per_rank_n[ps.ranks[i]] <= 6:
                    if per_rank[ps.ranks[i]].size():
                        per_rank[ps.ranks[i]].append(b", ")
                    per_rank[ps.ranks[i]].append(a.name)
                elif per_rank_n[ps.ranks[i]] == 7:
                    per_rank[ps.ranks[i]].append(b" ...")
            if self.stall_shutdown_s > 0 and age >= self.stall_shutdown_s:
                fatal = a.name
        for i in range(<size_t>self.size):
            if per_rank_n[i]:
                report.append(b"\n  rank ")
                report.append(_i2s(i))
                report.append(b": [")
                report.append(per_rank[i])
                report.append(b"]")
        if fatal.size():
            self._abort_job(-1, _cs("stall: some ranks did not submit collectives the others have "
                                    "waited on for more than ") + _i2s(<int64_t>self.stall_shutdown_s) +
                            _cs(" s (FUSE_STALL_SHUTDOWN_TIME_SECONDS); shutting down. Missing ranks "
                                "and their tensors:") + report, 3)
            return
        if any_new and report.size():
            with gil:
                self._log.warning(
                    "One or more tensors were submitted to be reduced, gathered or broadcast by "
                    "some ranks and have waited for the remaining ranks for more than %g seconds. "
                    "This may indicate that different ranks are trying to submit different "
                    "tensors, or that only a subset of ranks is submitting tensors, which will "
                    "cause a deadlock.\nMissing ranks:%s", self.stall_warn_s,
                    report.decode(errors="replace"))

    # ------------------------------------------------------------------ execution

    # Executing responses (every rank), included into the class body of Engine.
    # Responses arrive in the coordinator's order; each turns into at most one backend collective.

    cdef void _tl_ready(self, Request* first) noexcept nogil:
        """Timeline: negotiation is over, the tensor waits in the response queue."""
        tl_span(self.tl, first.name, b'E', TLW_NEGOTIATE, first.kind)
        tl_span(self.tl, first.name, b'B', TLW_TOP, first.kind)
        tl_span(self.tl, first.name, b'B', TLW_QUEUE, first.kind)

    cdef void _tl_all(self, Response& resp, char ph, uint8_t what) noexcept nogil:
        """Timeline: the same span boundary for every tensor of a (fused) response."""
        tl_span_all(self.tl, resp.names, ph, what, resp.kind)

    cdef void _execute(self, Response& resp) noexcept nogil:
        """Run one response; on the timeline (rank 0): QUEUE ends, the activity, <KIND> ends."""
        cdef size_t i
        cdef uint8_t act = TLW_INLINE if resp.inline_data else TLW_BACKEND
        cdef bint spans = resp.kind != K_ALLREDUCE and resp.error.size() == 0 and (
            resp.kind <= K_REDUCESCATTER)
        if tl_on(self.tl):
            self._tl_all(resp, b'E', TLW_QUEUE)
            if spans:
                self._tl_all(resp, b'B', act)
        self._execute_response(resp)
        if tl_on(self.tl):          # tensors this rank did not finish (not a member, lost)
            for i in range(resp.names.size()):
                self._tl_close(resp.names[i], resp.dtype, resp.shapes[i])

    cdef void _tl_close(self, const string& name, int dtype, const vector[int64_t]& shape) noexcept nogil:
        cdef string args = _cs(dtype_name(dtype))
        args.push_back(0)
        args.append(_shape_str(shape))
        tl_close(self.tl, name, args)

    cdef void _execute_response(self, Response& resp) noexcept nogil:
        cdef size_t i
        cdef PSet* ps
        if resp.error.size():
            for i in range(resp.names.size()):
                self._finish_request(_key(resp.pset, resp.names[i]), H_ERROR, resp.error,
                                     resp.error_kind)
            return
        if resp.kind == K_PSET_ADD:
            self._exec_pset_add(resp)
            return
        if self.psets.count(resp.pset) == 0:
            return
        ps = &self.psets[resp.pset]
        if ps.index < 0:
            return
        self._learn_cache(resp)
        if resp.kind == K_ALLREDUCE:
            self._exec_allreduce(resp, ps)
        elif resp.kind <= K_REDUCESCATTER:
            self._exec_single(resp, ps)
        elif resp.kind == K_BARRIER:
            self._finish_ok(_key(resp.pset, resp.names[0]), 0)
        elif resp.kind == K_JOIN:
            self.joined_psets.erase(resp.pset)
            self._finish_ok(_key(resp.pset, resp.names[0]), resp.last_joined)
        elif resp.kind == K_PSET_REMOVE:
            self._exec_pset_remove(resp)

    cdef void _learn_cache(self, Response& resp) noexcept nogil:
        """Remember the slots the coordinator assigned, so the next submission is a hit."""
        cdef size_t i
        cdef string key
        cdef string old
        cdef WorkerCache wc
        for i in range(resp.names.size()):
            if resp.slots[i] == NO_SLOT:
                continue
            key = _key(resp.pset, resp.names[i])
            if self.wslot_owner.count(resp.slots[i]):
                old = self.wslot_owner[resp.slots[i]]
                if old != key and self.wcache.count(old) and self.wcache[old].slot == resp.slots[i]:
                    self.wcache.erase(old)
            wc.slot = resp.slots[i]
            wc.gen = resp.gens[i]
            wc.sig.kind = resp.kind
            wc.sig.dtype = resp.dtype
            wc.sig.op = resp.op
            wc.sig.pset = resp.pset
            wc.sig.root = resp.root
            wc.sig.prescale = resp.prescale
            wc.sig.postscale = resp.postscale
            wc.sig.shape = resp.shapes[i]
            self.wcache[key] = wc
            self.wslot_owner[resp.slots[i]] = key

    cdef void _finish_ok(self, const string& key, int64_t value) noexcept nogil:
        cdef unordered_map[string, Request].iterator it = self.inflight.find(key)
        if it == self.inflight.end():
            return
        lock_acquire(self.lock)
        if self.handles.count(deref_req(it).handle):
            self.handles[deref_req(it).handle].value = value
        lock_release(self.lock)
        self._finish_request(key, H_DONE, string(b""), 0)

    cdef void _finish_all(self, Response& resp, int status, const string& error, int kind) noexcept nogil:
        cdef size_t i
        for i in range(resp.names.size()):
            self._finish_request(_key(resp.pset, resp.names[i]), status, error, kind)

    cdef void _backend_failed(self, Response& resp, const string& err) noexcept nogil:
        """A collective failed in the backend (usually: a peer died).  Wait briefly for the
        coordinator's word on the cause, then fail the engine with the best message we have."""
        cdef string why = _cs("collective ") + _cs(_kind_name(resp.kind)) + _cs(" of tensor '") + \
            resp.names[0] + _cs("' failed in the backend: ") + err
        self._await_cause(3.0)
        lock_acquire(self.lock)
        if self.state == S_FAILED:
            why = self.failure + _cs(" (while running ") + _cs(_kind_name(resp.kind)) + \
                _cs(" of tensor '") + resp.names[0] + _cs("': ") + err + _cs(")")
            self.failure = why
            self.state = S_RUNNING    # re-enter below so pending handles carry the full message
        self._fail_locked(why, 4)
        lock_release(self.lock)

    cdef void _await_cause(self, double seconds) noexcept nogil:
        """Read control traffic for up to ``seconds`` looking only for failure notices."""
        cdef double deadline = now_seconds() + seconds
        cdef string frame
        cdef ssize_t n
        cdef size_t r
        cdef vector[pollfd] fds
        cdef pollfd p
        while now_seconds() < deadline and self._state() == S_RUNNING:
            if self.rank == 0:
                for r in range(1, self.worker_fds.size()):
                    if self.worker_fds[r] < 0 or self.worker_state[r] == 2:
                        continue
                    n = recv_some(self.worker_fds[r], self.worker_inbox[r])
                    while pop_frame(self.worker_inbox[r], frame):
                        if frame.size() and <uint8_t>frame[0] == MSG_ABORT:
                            self._ingest(<int>r, frame)
                    if n == 0 or n == -1:
                        self._worker_gone(<int>r)
            elif self.ctl_fd >= 0:
                n = recv_some(self.ctl_fd, self.ctl_inbox)
                while pop_frame(self.ctl_inbox, frame):
                    if frame.size() and (<uint8_t>frame[0] == MSG_ABORT_ALL
                                         or <uint8_t>frame[0] == MSG_COORD_BYE):
                        self._handle_coordinator_frame(frame)
                if n == 0 or n == -1:
                    c_close(self.ctl_fd)
                    self.ctl_fd = -1
                    self._fail(_cs("lost the connection to the coordinator (rank 0): rank 0 "
                                   "exited or crashed"), 2)
            else:
                return
            if self._state() != S_RUNNING:
                return
            fds.clear()
            p.events = POLLIN
            p.revents = 0
            if self.ctl_fd >= 0:
                p.fd = self.ctl_fd
                fds.push_back(p)
            for r in range(1, self.worker_fds.size()):
                if self.worker_fds[r] >= 0 and self.worker_state[r] != 2:
                    p.fd = self.worker_fds[r]
                    fds.push_back(p)
            if fds.size() == 0:
                return
            c_poll(fds.data(), fds.size(), 50)

    # ---- the collectives: the executor moves the data, the engine completes the handles

    cdef void _exec_allreduce(self, Response& resp, PSet* ps) noexcept nogil:
        cdef size_t i
        cdef unordered_map[string, Request].iterator it
        cdef string err
        cdef int rc
        self.exec_reqs.clear()
        for i in range(resp.names.size()):
            it = self.inflight.find(_key(resp.pset, resp.names[i]))
            self.exec_reqs.push_back(&deref_req(it) if it != self.inflight.end() else NULL)
        rc = self.executor.allreduce(resp, ps, self.exec_reqs, err)
        if rc == EX_BACKEND:
            self._backend_failed(resp, err)
        elif rc == EX_LOCAL:
            self._finish_all(resp, H_ERROR, err, 0)
        else:
            self._finish_all(resp, H_DONE, string(b""), 0)

    cdef void _exec_single(self, Response& resp, PSet* ps) noexcept nogil:
        """A collective of one tensor: broadcast, allgather, alltoall or reducescatter."""
        cdef string key = _key(resp.pset, resp.names[0])
        cdef unordered_map[string, Request].iterator it = self.inflight.find(key)
        cdef Request* r
        cdef string err
        cdef vector[int64_t] recv_splits
        cdef int rc
        if it == self.inflight.end():
            return
        r = &deref_req(it)
        if resp.kind == K_BROADCAST:
            rc = self.executor.broadcast(resp, ps, r, err)
        elif resp.kind == K_ALLGATHER:
            rc = self.executor.allgather(resp, ps, r, err)
        elif resp.kind == K_ALLTOALL:
            rc = self.executor.alltoall(resp, ps, r, recv_splits, err)
            lock_acquire(self.lock)         # wait() returns the received splits
            if self.handles.count(r.handle):
                self.handles[r.handle].aux.swap(recv_splits)
            lock_release(self.lock)
        else:
            rc = self.executor.reducescatter(resp, ps, r, err)
        if rc == EX_BACKEND:
            self._backend_failed(resp, err)
        elif rc == EX_LOCAL:
            self._finish_request(key, H_ERROR, err, 0)
        else:
            self._finish_request(key, H_DONE, string(b""), 0)

    cdef void _exec_pset_add(self, Response& resp) noexcept nogil:
        cdef string key = _key(resp.pset, resp.names[0])
        cdef int new_id = <int>resp.rank_dims[0]
        cdef string err
        cdef bint member = False
        cdef size_t i
        for i in range(1, resp.rank_dims.size()):
            if resp.rank_dims[i] == self.rank:
                member = True
        self._py_add_group(resp.rank_dims, new_id, member, err)
        if err.size():
            self._finish_request(key, H_ERROR, err, 4)
        else:
            self._finish_ok(key, new_id)

    cdef void _py_add_group(self, vector[int64_t]& rank_dims, int new_id, bint member,
                            string& err) noexcept with gil:
        try:
            ranks = [int(x) for x in list(rank_dims)[1:]]
            group = self._create_group(ranks, new_id) if member else None
            self._install_group(new_id, ranks, group)
        except BaseException as e:
            err = _cs("add_process_set failed: ") + _exc_text(e)

    cdef void _py_drop_group(self, int pid) noexcept with gil:
        group = self._groups.pop(pid, None)
        self._groups.pop((pid, "capsule"), None)
        if group is not None:
            try:
                group.close()
            except Exception:
                pass

    cdef void _exec_pset_remove(self, Response& resp) noexcept nogil:
        cdef string key = _key(resp.pset, resp.names[0])
        cdef int pid = <int>resp.rank_dims[0]
        self._py_drop_group(pid)
        lock_acquire(self.lock)
        self.psets.erase(pid)
        lock_release(self.lock)
        self._finish_ok(key, pid)


def _make_error(int kind, str message):
    from fuse import exceptions as ex
    cls = {1: ex.MismatchError, 2: ex.ShutdownError, 3: ex.StallError,
           4: ex.BackendError}.get(kind, ex.FuseInternalError)
    return cls(message)
