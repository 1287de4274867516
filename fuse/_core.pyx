# cython: language_level=3
# distutils: language = c++
"""The fuse engine's Python API: :class:`Engine`, one per process.

Framework threads call :meth:`Engine.enqueue` and get integer handles back at once; they
:meth:`Engine.wait` for them (running the loop themselves while the engine thread sleeps, for
a lone collective) or :meth:`Engine.poll` them.  Everything else happens in the engine's loop
(:class:`fuse.engine.loop.Loop`), with the GIL released, on the engine's background thread.

The engine's parts are modules of fuse/engine/, cut where the state is owned (see
fuse/engine/meson.build):

* ``protocol``: the wire format, every control frame, and the structs every part shares
  (protocol.pxd);
* ``request``: ``RequestSpec``, a collective as its caller asked for it (and its buffers);
* ``channel``: the control channel's sockets, and what the idle engine thread sleeps on;
* ``handles``: the handle table and the failure state Python threads wait on; its methods take
  its lock;
* ``psets``: the process sets and the backend connections each runs over;
* ``submitter``: this rank's requests in flight and its side of the response cache;
* ``coordinator``: rank 0's negotiation; it owns the request table, the response cache, the
  fusion decisions and the autotuned knobs (``Tuning``), and reaches the engine only through
  ``CoordinatorLink``; ``validate``: whether the ranks agree;
* ``executor``: runs a response's collective on this rank; owns the fusion buffer;
* ``results``: runs each response through the executor (device responses through the device
  executor, fuse/engine/device.py) and completes this rank's handles;
* ``loop``: one pass of the loop, and which thread runs it; it builds and owns the parts above;
* this module: the ``Engine``, the Python API over the loop.
"""

from cpython.exc cimport PyErr_CheckSignals

from fuse.engine.protocol cimport *
from fuse.engine.executor cimport Executor
from fuse.engine.segments cimport SharedSegments
from fuse.engine.request cimport RequestSpec
from fuse.engine.channel cimport ControlChannel
from fuse.engine.psets cimport ProcessSets
from fuse.engine.handles cimport HandleTable
from fuse.engine.loop cimport Loop, DRIVE_NOT_MINE

import threading


cdef class Engine:
    """The per-process engine.  Built by :func:`fuse.worker.lifecycle.init`; not for direct
    use."""

    cdef int rank, size
    cdef Loop loop                      # the loop and the parts it owns
    # the loop's parts the API reaches (see Loop for who guards what)
    cdef HandleTable table
    cdef ControlChannel channel
    cdef ProcessSets psets
    cdef double spin_s                  # FUSE_SPIN_TIME_US: whether wait() may drive the loop
    cdef double shm_warn_s, shm_fail_s  # how long a shared-memory barrier waits for a member
    # Python side
    cdef object _records        # handle -> its RequestSpec, until wait() (under the GIL)
    cdef object _backend
    cdef object _thread
    cdef object _engine_ident   # the engine thread's threading.get_ident(), once started
    cdef object _log

    def __init__(self, config, backend, world_group, int ctl_fd, worker_fds, log, create_group):
        """``ctl_fd``: connected socket to rank 0 (workers) or -1 (rank 0).
        ``worker_fds``: rank 0 only, a socket per rank (index 0 unused: -1)."""
        self.rank = config.rank
        self.size = config.size
        self.spin_s = config.spin_time_us / 1e6
        self._records = {}
        self.loop = Loop(config, backend, ctl_fd, worker_fds, log, create_group, self._records)
        self.table = self.loop.table
        self.channel = self.loop.channel
        self.psets = self.loop.psets
        # A member late in shared memory is reported like a stalled rank: a warning after the
        # stall-check time, a StallError after the stall-shutdown time, or, when that is off,
        # after the Gloo timeout, as the same allreduce through Gloo would fail.
        self.shm_warn_s = 0 if config.stall_check_disable else config.stall_check_time_seconds
        self.shm_fail_s = config.stall_shutdown_seconds or config.gloo_timeout_seconds
        self._backend = backend
        self._log = log
        self._install_group(0, list(range(self.size)), world_group)

    # ------------------------------------------------------------------ Python-facing API

    def set_hosts(self, names):
        """Every rank's host name, by rank, for messages that name a rank."""
        self.channel.set_hosts(names)
        self.loop.coord.set_hosts(names)

    def use_mailboxes(self, segments):
        """Negotiate through same-host shared-memory mailboxes (fuse.engine.mailbox.connect)
        instead of the control sockets; before start()."""
        self.channel.use_mailboxes(segments)

    @property
    def mailboxes(self):
        """How many peers this rank negotiates with through a mailbox (0: the sockets)."""
        return self.channel.mailboxes

    @property
    def mailbox_segments(self):
        """This rank's mapped mailbox segments (writable views; a worker has its own)."""
        return self.channel.mailbox_segments

    def set_straggler_hook(self, hook):
        """Rank 0: what the coordinator calls when it flags a straggler (see
        Coordinator.set_straggler_hook)."""
        self.loop.coord.set_straggler_hook(hook)

    def straggler_frame(self):
        """The latest straggler report the coordinator sent (bytes; empty before the first),
        decoded by fuse.engine.protocol.decode_stragglers."""
        cdef string body
        with nogil:
            body = self.loop.straggler_frame()
        return <bytes>body

    def start(self):
        self._thread = threading.Thread(target=self._run, name="fuse-engine", daemon=True)
        self._thread.start()
        self._engine_ident = self._thread.ident

    def _run(self):
        with nogil:
            self.loop.run()
        self.loop.detach()

    @property
    def rank(self):
        return self.rank

    @property
    def size(self):
        return self.size

    def _install_group(self, int pset_id, ranks, group):
        self.psets.install(pset_id, ranks, group)

    def install_twin(self, int pset_id, group):
        return self.psets.install_twin(pset_id, group)

    def install_shm(self, int pset_id, SharedSegments segments):
        segments.set_patience(self.shm_warn_s, self.shm_fail_s)
        self.psets.install_shm(pset_id, segments)

    def install_hierarchy(self, int pset_id, SharedSegments local, cross_ranks, cross_group,
                           size_t min_bytes, size_t gather_min_bytes, local_index):
        self.psets.install_hierarchy(pset_id, local, cross_ranks, cross_group, min_bytes,
                                     gather_min_bytes, local_index)

    def install_device_executor(self, executor):
        """Run this rank's device (GPU) responses with ``executor``
        (:class:`fuse.engine.device.DeviceExecutor`): made on the rank's first device request,
        before that request is queued, so before any response for it can arrive."""
        self.loop.runner.device_executor = executor

    @property
    def device_executor(self):
        return self.loop.runner.device_executor

    def add_shared_region(self, list maps, list sizes):
        """Register one more shared region with the world's shared-memory allreduce (see
        fuse.engine.shm.share_regions), between two passes of the loop."""
        segments = self.shared_memory
        if segments is None:
            raise RuntimeError("shared memory is not in use in this job")
        with nogil:
            self.loop.take_loop(True)   # no allreduce runs while the region list grows
        try:
            (<SharedSegments>segments).add_region(maps, sizes)
        finally:
            self.loop.hand_back_loop(True)

    @property
    def shared_memory(self):
        """The world's SharedSegments, or None when its ranks do not share memory."""
        return self.psets.shared_memory

    def process_set_ranks(self, int pset_id):
        return self.psets.ranks(pset_id)

    def process_set_ids(self):
        return self.psets.ids()

    def enqueue(self, list specs):
        """Queue requests atomically; returns their handles.

        ``specs``: :class:`fuse.engine.request.RequestSpec` objects, one per tensor.  Each becomes
        its handle's record, holding the views of its buffers until :meth:`wait` returns."""
        cdef vector[Request] reqs
        cdef Request r
        cdef RequestSpec spec
        try:
            for spec in specs:
                spec.bind(r, self.rank, len(specs))
                reqs.push_back(r)
            return self._enqueue_bound(reqs, specs)
        except BaseException:
            for spec in specs:
                spec.release()
            raise

    cdef list _enqueue_bound(self, vector[Request]& reqs, list specs):
        """Check the bound requests against what is in flight, then queue them."""
        cdef vector[char] drivable
        cdef size_t i
        for i in range(reqs.size()):
            drivable.push_back(self.loop.drivable(reqs[i]))
        cdef bint sent = False
        handles = self.table.admit(reqs, drivable, self.psets.map, self.rank)
        for h, spec in zip(handles, specs):
            self._records[h] = spec
        # (never on the engine thread itself, which holds the loop submit_here may wait for)
        if (reqs.size() == 1 and drivable[0] and threading.get_ident() != self._engine_ident
                and self.loop.may_send_here(handles[0])):
            with nogil:
                self.loop.submit_here()
            sent = True
        if not sent:
            self.channel.wake()
        return handles

    def poll(self, int64_t handle):
        """True once the handle has completed (successfully or not)."""
        cdef int status
        with nogil:
            status = self.table.status_of(handle)
        if status < 0:
            raise ValueError(f"unknown handle {handle}")
        return status != H_PENDING

    def wait(self, int64_t handle):
        """Block until the handle completes; return ``(value, aux, spec)`` and forget it, or
        raise the error it completed with (``spec``: the RequestSpec it was enqueued with).  Ctrl-C interrupts the wait."""
        cdef int status = H_PENDING
        cdef HandleState hs
        cdef bint known = True
        cdef int drove = DRIVE_NOT_MINE
        if self.spin_s > 0:
            with nogil:
                drove = self.loop.drive(handle)
        while True:
            with nogil:                 # the lock is only ever waited for without the GIL
                status = self.table.wait_step(handle, 100.0, &hs)
            if status < 0:
                raise ValueError(f"unknown handle {handle} (already synchronized?)")
            if status != H_PENDING:
                break
            PyErr_CheckSignals()        # lets Ctrl-C through
        if drove != DRIVE_NOT_MINE:
            self.loop.adapt_spin(drove)
        record = self._records.pop(handle, None)
        if record is not None:
            (<RequestSpec>record).release()     # the engine is done with its memory
        if status == H_ERROR:
            raise _make_error(hs.error_kind, hs.error.decode(errors="replace"))
        return hs.value, list(hs.aux), record

    def abort(self, str message):
        """This rank is failing: tell the coordinator (and through it everyone) why."""
        cdef string msg = message.encode(errors="replace")
        cdef string frame
        cdef bint failed_now
        with nogil:
            failed_now = self.table.fail_if_running(
                _str("rank ") + _int_str(self.rank) + _str(" failed: ") + msg, ERR_INTERNAL,
                self.rank)
        if not failed_now:          # the engine had already stopped or failed
            return
        if self.rank == 0:
            frame_abort_all(frame, 0, ERR_INTERNAL, msg)    # who: this rank
            with nogil:
                self.channel.send_all(frame, -1, False)
        else:
            with nogil:
                self.loop.report_up(msg, False)
        self.channel.wake()

    def shutdown(self, double timeout=5.0):
        """Stop the background thread.  Pending collectives fail with ShutdownError."""
        with nogil:
            self.table.begin_stop()
        self.channel.wake()
        if self._thread is not None:
            self._thread.join(timeout)
        self._finish_shutdown()

    def _finish_shutdown(self):
        cdef string frame
        with nogil:
            self.table.end_stop()
        if self.rank == 0:
            frame_signal(frame, MSG_COORD_BYE)
            with nogil:
                self.channel.send_all(frame, -1, False)
        else:
            frame_signal(frame, MSG_BYE)
            with nogil:
                self.channel.send_up(frame, False)
        if self._thread is None or not self._thread.is_alive():
            self.loop.detach()      # (the thread never ran, or has ended: see _run)
        self.psets.close()

    @property
    def failed(self):
        cdef bint f
        with nogil:
            f = self.table.is_failed()
        return f

    @property
    def failure(self):
        cdef string text
        with nogil:
            self.table.current_state(&text)
        return text.decode(errors="replace")

    @property
    def lost_rank(self):
        """The rank whose silence failed this engine (rank 0's keep-alive found it unanswering:
        its host is down or cut off; every rank is told which), or None."""
        return self.table.lost_rank if self.table.lost_rank >= 0 else None

    @property
    def failed_by(self):
        """The rank whose failure failed this engine first (this rank's own abort, or another
        rank's report relayed by the coordinator), or None (not failed, or failed otherwise:
        a lost connection, a shutdown, bad input)."""
        return self.table.failed_by if self.table.failed_by >= 0 else None

    def stats(self):
        """Counters since start: allreduce responses executed (``allreduces``), how many of
        them were fused (``fused``) and how many fused ones needed no copy because their
        tensors lay back to back (``adjacent``), how many went as two concurrent halves
        (``split``), how many through shared memory (``shm``; ``shm_direct`` of them
        straight between the ranks' shared gradient buffers) and how many hierarchically
        across hosts (``hierarchical``; allgathers: ``hierarchical_allgathers``), allgathers
        and broadcasts through shared memory (``shm_gathers``), waits that
        completed while the waiting thread ran the loop itself (``driven``), requests that thread
        sent itself, leaving the engine thread asleep (``sent_by_caller``), coordinator cycles that
        emitted responses (``cycles``, rank 0 only), tensors and bytes they carried, tensors
        the coordinator computed inline, and seconds spent copying through the fusion buffer
        and in the backend."""
        cdef Executor x = self.loop.executor
        shm = self.shared_memory
        return {"allreduces": x.st_allreduces, "fused": x.st_fused, "adjacent": x.st_adjacent,
                "split": x.st_split, "shm": x.st_shm, "hierarchical": x.st_hier,
                "hierarchical_allgathers": x.st_hier_gather, "shm_gathers": x.st_shm_gather,
                "shm_direct": shm.direct if shm is not None else 0,
                "driven": self.loop.st_driven, "sent_by_caller": self.loop.st_sent_here,
                "cycles": self.loop.coord.st_cycles,
                "tensors": x.st_tensors, "inline": x.st_inline, "bytes": x.st_bytes,
                "copy_seconds": x.st_copy_s, "backend_seconds": x.st_backend_s}

    def goes_through_fusion_buffer(self, size_t nbytes, int pset_id):
        """Whether an allreduce of ``nbytes`` in process set ``pset_id`` is fused through the
        fusion buffer: not sent inline with the negotiation (small), not reduced where it lies
        (above the zero-copy threshold), and fusion is on.  Callers that lay such tensors out
        back to back in response order spare the engine both copies (see Executor)."""
        # (every rank reads the same knobs; autotune moves only the fusion threshold, whose
        # being non-zero is all that matters here)
        return (not self.loop.submitter.inlines(K_ALLREDUCE, pset_id, nbytes)
                and self.loop.coord.tuning.fusion_threshold > 0
                and nbytes <= self.loop.coord.zero_copy_bytes)

    @property
    def tuning(self):
        """The coordinator's autotuned knobs (:class:`fuse.engine.coordinator.Tuning`):
        ``tuning.values()`` gives (fusion threshold, cycle time ms, cache), ``tuning.set(...)``
        changes them from the coordinator's next step (autotune, rank 0)."""
        return self.loop.coord.tuning

    def timeline_start(self, bint mark_cycles, str backend):
        """Start recording timeline events (call on rank 0 only; see fuse.engine.timeline)."""
        cdef string b = backend.upper().encode()
        with nogil:
            tl_start(self.loop.tl, mark_cycles, b)

    def timeline_stop(self):
        with nogil:
            tl_stop(self.loop.tl)

    def timeline_drain(self):
        """The events recorded since the last call: JSON objects joined by ',\\n' (bytes)."""
        cdef string out
        with nogil:
            out = tl_drain(self.loop.tl)
        return out

    @property
    def thread_native_id(self):
        return self._thread.native_id

    @property
    def fusion_buffer_bytes(self):
        return self.loop.executor.fusion.size

def _make_error(int kind, str message):
    from fuse import exceptions as ex
    cls = {ERR_MISMATCH: ex.MismatchError, ERR_SHUTDOWN: ex.ShutdownError,
           ERR_STALL: ex.StallError, ERR_BACKEND: ex.BackendError}.get(kind, ex.FuseInternalError)
    return cls(message)
