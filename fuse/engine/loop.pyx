# cython: language_level=3
# distutils: language = c++
"""The engine's loop: what one pass does, and which thread runs it.

One pass (:meth:`Loop.iterate`) runs with the GIL released, by whoever holds ``loop_lock``: the
engine's background thread (:meth:`Loop.run`), or a thread waiting for a lone collective while
the background thread sleeps (:meth:`Loop.drive`):

* it sends each new request to the coordinator (rank 0) over the control channel: the full
  description the first time a name is seen, its cache slot (8 bytes: slot and generation)
  afterwards;
* on rank 0 it also runs the coordinator (engine/coordinator.pyx): it counts, per tensor,
  which ranks are ready, checks that they agree, and once every member of the process set is
  ready appends a response to one ordered stream that it sends to every member;
* every rank executes the responses in stream order (engine/results.pyx), so every rank
  issues the same collectives in the same order.

An idle engine thread sleeps in ``epoll_wait`` on its sockets and an eventfd: no cycle runs
without work.  A rank that raises, exits or dies is seen at once by the coordinator (an ABORT
message, or the socket closing), which tells every other rank; their pending and future calls
raise with the failing rank and its message.  The loop builds and owns the engine's parts;
:class:`fuse._core.Engine` is the Python API over it.
"""

from fuse.engine.protocol cimport *
from fuse.engine.executor cimport Executor, EX_BACKEND, EX_STALL
from fuse.engine.coordinator cimport Coordinator, CoordinatorLink
from fuse.engine.channel cimport ControlChannel, PEER_LEAVING
from fuse.engine.psets cimport ProcessSets
from fuse.engine.submitter cimport Submitter
from fuse.engine.handles cimport HandleTable
from fuse.engine.results cimport ResponseRunner
from fuse.engine.liveness cimport CoordinatorWatch, WATCH_WARN, WATCH_FAIL

# lone requests that go to the engine thread after a caller's burst (Loop.may_send_here)
cdef enum:
    SEND_HERE_PAUSE = 16

# what one pass of the loop did (Loop.iterate)
cdef enum:
    STEP_PROGRESS = 0
    STEP_IDLE = 1
    STEP_STOP = 2


cdef class Loop(CoordinatorLink):
    """The loop and the parts it drives; built by :class:`fuse._core.Engine`.  It implements
    :class:`fuse.engine.coordinator.CoordinatorLink` for its coordinator: a job-wide failure
    ends here."""

    def __cinit__(self):
        self.loop_lock = lock_new()
        self.tl = tl_new()

    def __dealloc__(self):
        lock_free(self.loop_lock)
        tl_free(self.tl)

    def __init__(self, config, backend, int ctl_fd, worker_fds, log, create_group, records):
        """``ctl_fd``: connected socket to rank 0 (workers) or -1 (rank 0).
        ``worker_fds``: rank 0 only, a socket per rank (index 0 unused: -1).
        ``records``: handle -> RequestSpec, the engine's (the executor finds buffers there)."""
        self.rank = config.rank
        self.size = config.size
        self.spin_s = config.spin_time_us / 1e6
        self.spin_budget = self.spin_s
        self.sent_here_handle = -1
        self.backend_in_caller = bool(getattr(backend, "collectives_in_caller_thread", False))
        self.channel = ControlChannel(self.rank, ctl_fd, worker_fds)
        self.table = HandleTable(self.channel)
        self.lock = self.table.lock
        self.psets = ProcessSets(self.rank, create_group)
        self.psets.lock = self.lock
        self.submitter = Submitter(self.rank, self.psets, config)
        self.coord = Coordinator(self, self.channel, config, log)
        self.coord.psets = self.psets
        self.coord.tl = self.tl
        self.executor = Executor(records)
        self.executor.split_bytes = config.split_threshold
        self.executor.shm_bytes = config.shm_threshold
        self.executor.inline_bytes = config.inline_threshold
        self.executor.tl = self.tl
        self.runner = ResponseRunner(self.table, self.submitter, self.psets, self.executor)
        self.runner.tl = self.tl
        self.watch = CoordinatorWatch(config)
        self.peer_timeout_s = config.peer_timeout_seconds
        self.log = log

    def detach(self):
        """Drop the coordinator's reference back to the loop once its thread has ended (or
        never ran): no reference cycle is left."""
        self.coord.link = None

    cdef string straggler_frame(self) noexcept nogil:
        """The body of the latest straggler report the coordinator sent; empty before the
        first."""
        cdef string body
        lock_acquire(self.lock)
        body = self.stragglers
        lock_release(self.lock)
        return body

    # ------------------------------------------------------------------ callers' threads

    cdef bint may_send_here(self, int64_t handle):
        """Whether the calling thread is to send its lone drivable request ``handle`` itself
        (submit_here) rather than wake the engine thread; called with the GIL, once per
        single-request call, so that the callers' threads take turns with the fields below.

        Sending it here pays when the caller then waits for it: the engine thread sleeps
        through the whole collective.  It costs in a burst, a caller starting many small
        asynchronous collectives back to back: its first request goes out alone, so the
        coordinator answers it alone, and the rest follow in other messages and other
        responses, where the engine thread, woken once, would have sent several in one
        message and the coordinator fused them into one response (16 asynchronous 1 KiB
        allreduces on 2 ranks of a 2-core machine: 1.25x the time per burst; see
        bench/results/studies/burst.md).  A burst shows itself when the caller queues
        another request while the one it sent is still pending: the next SEND_HERE_PAUSE
        lone requests then go to the engine thread, and the one after that is sent here
        again, to see whether the bursts have ended."""
        cdef int64_t last = self.sent_here_handle
        cdef bint burst = False
        cdef bint alone
        with nogil:
            if last >= 0:
                burst = self.table.status_of(last) == H_PENDING
            alone = self.spin_budget > 0 and self.table.driving_alone(handle)
        if burst:
            self.send_here_pause = SEND_HERE_PAUSE
        self.sent_here_handle = -1
        if not alone:
            return False
        if self.send_here_pause > 0:
            self.send_here_pause -= 1
            return False
        self.sent_here_handle = handle
        return True

    cdef void submit_here(self) noexcept nogil:
        """Send a lone drivable request to the coordinator from the calling thread, once
        may_send_here said so, leaving the engine thread asleep (waiting, if need be, for the
        engine thread to finish a pass of the loop).

        Waking the engine thread for a request whose caller then waits for it (drive) made
        the two race for the loop: when the engine thread won, the caller slept on its handle
        and the call cost three thread wake-ups instead of none, and which of them won varied
        from call to call (bench/suite/allreduce.py: the scatter of the small sizes).
        Only the sending happens here, never the collective, so an asynchronous caller still
        overlaps it with its own work: the answer wakes the engine thread through its
        sockets, unmuted again below, unless the caller is by then waiting and reads it
        itself.  The engine thread's timers (the coordinator's stall check, a worker's watch
        on rank 0) start when the caller waits and hands the loop back, or at the next
        message.

        On rank 0 the request may be the last one a response waited for, which the
        coordinator must emit even if this caller does not wait for it now.  When the whole
        collective is the coordinator's (a barrier, a join, an allreduce or broadcast that
        travels inline), emitting and completing it here costs less than waking the engine
        thread to do it (one system call here, and a thread that then races the caller for
        the loop); any other collective is left to the engine thread, woken for it."""
        cdef vector[Request] batch
        cdef bint wake
        cdef bint settle = False
        cdef string frame
        if not self.take_loop(False):
            self.take_loop(True)
        if self.table.take_queue(batch) == S_RUNNING and batch.size():
            settle = self.rank == 0 and batch.size() == 1 and self._coordinator_only(batch[0])
            self._submit(batch)
            self.st_sent_here += 1
        wake = self.rank == 0 and self.coord.ready.size() != 0
        if wake and settle:
            self._coordinator_step()
            while self.channel.next_local(frame):
                self._handle_coordinator_frame(frame)
            wake = self.coord.ready.size() != 0
        self.channel.mute(False)
        lock_release(self.loop_lock)
        if wake or self.table.has_queued():
            self.channel.wake()

    # ------------------------------------------------------------------ background thread

    cdef void run(self) noexcept nogil:
        cdef int step
        cdef int timeout_ms = -1
        while True:
            if not lock_try(self.loop_lock):
                # Another thread holds the loop (with the sockets muted): sleep until it
                # hands the loop back or new work is signalled, rather than on the lock, which
                # would wake this thread once more only to find nothing left to do.
                self.channel.sleep(-1)
                continue
            step = self.iterate()
            if step == STEP_IDLE:
                timeout_ms = self._idle_timeout_ms()
            lock_release(self.loop_lock)
            if step == STEP_STOP:
                return
            if step == STEP_IDLE:
                self.channel.sleep(timeout_ms)

    cdef int iterate(self) noexcept nogil:
        """One pass of the loop (the caller holds ``loop_lock``): submit what was queued, read
        the control channel, negotiate (rank 0) and execute what is ready.  Waits for the
        network only inside the backend collectives it runs; returns STEP_PROGRESS, STEP_IDLE (nothing to do) or STEP_STOP (shut down)."""
        cdef vector[Request] batch
        cdef string frame
        cdef int state
        cdef bint progressed = False
        cdef Request r
        cdef int64_t cycle_ts
        state = self.table.take_queue(batch)
        if state != S_RUNNING:
            return STEP_STOP
        cycle_ts = tl_clock(self.tl) if tl_cycles_on(self.tl) else -1
        if batch.size():
            self._submit(batch)
            progressed = True
        if self.rank == 0:
            if self._coordinator_step():
                progressed = True
            while self.channel.next_local(frame):
                self._handle_coordinator_frame(frame)
                progressed = True
        elif self._read_control(False):
            progressed = True
        else:
            self._watch_coordinator()
        if progressed and cycle_ts >= 0:
            tl_cycle(self.tl, cycle_ts)
        return STEP_PROGRESS if progressed else STEP_IDLE

    cdef void adapt_spin(self, int drove) noexcept nogil:
        """After a wait the caller could drive: spin longer next time (by an eighth of
        FUSE_SPIN_TIME_US, up to all of it) if the collective completed while this thread
        drove, half as long if the spin ran out idle first, down to none: then the engine
        thread does the work and the caller sleeps at once; every 16th such wait tries an
        eighth of the spin again.  On a machine with more runnable threads than cores a peer
        is often descheduled for longer than any spin; a caller that spins through it takes
        the core that peer needs and then sleeps anyway (on a 2-core machine with 17
        runnable processes, a fixed spin with the caller sending its own request: 1.1x the
        time and up to 1.8x the CPU per small call of the engine thread sending it).  Only idleness counts: the time a driven
        collective spends reducing (a shared-memory allreduce of 1 MiB takes longer than the
        whole spin) is work this thread would otherwise hand to the engine thread and wait
        for, two wake-ups later (judged by the whole wait, the quiet suite run's 1 MiB took
        300.6 us against 134.0 us before).  Called with the GIL, so the waiting threads take
        turns."""
        if drove == DRIVE_DONE:
            self.spin_budget = min(self.spin_s, self.spin_budget + self.spin_s / 8)
        elif drove == DRIVE_SPUN_OUT:
            self.spin_budget = self.spin_budget / 2 if self.spin_budget > self.spin_s / 16 else 0
        elif drove == DRIVE_SKIPPED:
            self.spin_skipped += 1
            if self.spin_skipped >= 16:
                self.spin_skipped = 0
                self.spin_budget = self.spin_s / 8

    cdef int drive(self, int64_t handle) noexcept nogil:
        """Wait for ``handle`` by running the loop on this thread, polling without sleeping,
        for up to ``spin_budget`` of idleness (``spin_s``, or less after long waits: see
        adapt_spin).  Returns how it went, for adapt_spin: DRIVE_DONE (completed while
        driving), DRIVE_SPUN_OUT (idle longer than the budget), DRIVE_SKIPPED (a budget of 0)
        or DRIVE_NOT_MINE (not the caller's to drive, or the engine thread was at work).

        Handing a small collective to the engine thread and back costs two thread wake-ups
        (tens of microseconds each on a busy or virtual machine), more than the rest of the
        collective.  So a thread that waits for the only collective in flight, while the engine
        thread sleeps, runs the loop itself: its request goes out, the answer is read as soon
        as it lands, and the engine thread stays asleep.  Only then, and only for collectives
        no other thread takes part in (``drivable``): with other collectives in flight the
        engine thread is busy with them, and some backends have threads of their own (Gloo's
        I/O loop); a thread spinning beside them, here or on a peer rank, takes the core they
        need (a 128 KiB Gloo allreduce took 3x as long).
        Whatever is left when this returns is the engine thread's again."""
        cdef double idle_since
        cdef int step
        cdef bint done = False
        cdef bint timed
        if not self.table.driving_alone(handle):
            return DRIVE_NOT_MINE
        if self.spin_budget <= 0:
            return DRIVE_SKIPPED        # the engine thread has it (see submit_here)
        if not self.take_loop(False):
            return DRIVE_NOT_MINE       # the engine thread is at work
        idle_since = now_seconds()
        while True:
            step = self.iterate()
            if step == STEP_STOP:
                break
            done = self.table.status_of(handle) != H_PENDING
            if done:
                self.st_driven += 1
                break
            if step == STEP_PROGRESS:
                idle_since = now_seconds()
            elif now_seconds() - idle_since > self.spin_budget:
                break
        timed = self._idle_timeout_ms() >= 0     # (coordinator state: read under loop_lock)
        self.hand_back_loop(not done or timed)
        if done:
            return DRIVE_DONE
        return DRIVE_SPUN_OUT if step != STEP_STOP else DRIVE_NOT_MINE

    cdef bint take_loop(self, bint block) noexcept nogil:
        """A thread other than the engine thread takes the loop (waiting for it if ``block``,
        else only if it is free) and mutes the sockets, so that what it reads does not wake the
        sleeping engine thread.  Returns whether it has the loop; see hand_back_loop."""
        if block:
            lock_acquire(self.loop_lock)
        elif not lock_try(self.loop_lock):
            return False
        self.channel.mute(True)
        return True

    cdef void hand_back_loop(self, bint wake) noexcept nogil:
        """Give the loop back to the engine thread after take_loop; wake it if ``wake`` or if
        it has work."""
        self.channel.mute(False)
        lock_release(self.loop_lock)
        # Checked after the loop is released: a request queued, or a failure, while this thread
        # held it may have woken the engine thread only to find the loop taken (run), and it
        # sleeps again unless told.  Anything queued before this check is seen here; anything
        # later signals the engine thread itself, which then finds the loop free.
        if wake or self.table.has_work():
            self.channel.wake()

    cdef int _idle_timeout_ms(self) noexcept nogil:
        """How long the thread may sleep: forever when nothing is pending anywhere."""
        if self.rank != 0:
            return self.watch.sleep_ms(self.submitter.inflight.size() != 0)
        return self.coord.idle_timeout_ms()

    # ---- submitting this rank's requests

    cdef void _submit(self, vector[Request]& batch) noexcept nogil:
        """Ask the coordinator for this rank's queued requests."""
        cdef string msg
        self.submitter.pack(batch, msg)
        self._send_requests(msg, _str(" while sending requests: rank 0 exited or crashed"))

    cdef void _send_requests(self, const string& msg, const string& when) noexcept nogil:
        if self.rank == 0:
            self._ingest(0, msg)
        elif self.channel.send_up(msg) != 0:
            if self.channel.mail_corrupt(0):
                self.table.fail(_str("rank 0 ") + self.channel.bad_framing(0), ERR_INTERNAL)
            else:
                self.table.fail(_str("lost the connection to the coordinator (rank 0)") + when,
                                ERR_SHUTDOWN)

    cdef bint drivable(self, Request& r) noexcept nogil:
        """Whether a thread waiting for ``r`` alone may run the loop itself (drive): when
        no thread but the caller's takes part.  The coordinator's answer settles barriers,
        joins and allreduces or broadcasts small enough to travel inline; same-host shared
        memory reduces (gathers, broadcasts, alltoalls) on the calling thread; so do backends
        that say so (MPI)."""
        cdef size_t nbytes = <size_t>_numel(r.shape) * dtype_size(r.dtype)
        if r.kind == K_BARRIER or r.kind == K_JOIN or self.backend_in_caller:
            return True
        if self.psets.map.count(r.pset) == 0:
            return False
        if (r.kind == K_ALLREDUCE or r.kind == K_BROADCAST) and self.submitter.inlines(
                r.kind, r.pset, nbytes):
            return True
        if ((r.kind == K_ALLGATHER or r.kind == K_BROADCAST or r.kind == K_ALLTOALL)
                and self.executor.gathers_via_shm(&self.psets.map[r.pset])):
            return True
        return r.kind == K_ALLREDUCE and self.executor._via_shm(&self.psets.map[r.pset], nbytes)

    cdef bint _coordinator_only(self, Request& r) noexcept nogil:
        """Whether the coordinator's answer alone settles ``r`` on every rank (see drivable):
        a barrier, a join, or an allreduce or broadcast that travels inline."""
        cdef size_t nbytes = <size_t>_numel(r.shape) * dtype_size(r.dtype)
        if r.kind == K_BARRIER or r.kind == K_JOIN:
            return True
        return ((r.kind == K_ALLREDUCE or r.kind == K_BROADCAST) and
                self.psets.map.count(r.pset) != 0 and
                self.submitter.inlines(r.kind, r.pset, nbytes))

    # ---- worker side: reading the response stream

    cdef void _watch_coordinator(self) noexcept nogil:
        """A worker with nothing to read: warn, then fail, if rank 0 has been silent too long
        while this rank's requests wait for their responses (see engine/liveness.pyx)."""
        cdef size_t waiting = self.submitter.inflight.size()
        cdef int verdict = self.watch.check(now_seconds(), waiting != 0)
        cdef string why
        if verdict == WATCH_WARN:
            with gil:
                self.log.warning(self.watch.warning_text(self.rank, waiting,
                                                          self._rank0_name()))
        elif verdict == WATCH_FAIL:
            with gil:
                why = self.watch.failure_text(self.rank, waiting, self._rank0_name()).encode()
            self.table.fail(why, ERR_STALL)

    cdef bint _read_control(self, bint notices_only) noexcept nogil:
        """Read the control channel and handle what arrived: rank 0 the workers' messages, a
        worker the coordinator's.  ``notices_only``: handle only failure notices and drop the
        rest (_await_cause: a collective has failed, nothing else will run).  Returns whether
        anything was handled."""
        cdef string frame
        cdef bint got = False
        cdef bint still_open
        cdef int framed = 0
        cdef bint heard = False
        cdef int r
        cdef uint8_t t
        if self.rank == 0:
            for r in range(1, <int>self.channel.fds.size()):
                if not self.channel.readable(r):
                    continue
                still_open = self.channel.receive(r)
                while True:
                    framed = self.channel.next_frame(r, frame)
                    if framed <= 0:
                        break
                    if notices_only and _frame_type(frame) != MSG_ABORT:
                        continue
                    self._ingest(r, frame)
                    got = True
                if framed < 0:
                    self.abort_job(r, self.channel.bad_framing(r), ERR_INTERNAL)
                    self.channel.close(r)
                    return True
                if not still_open:
                    self._worker_gone(r)
                    got = True
                if self.table.current_state() != S_RUNNING:
                    return True
            return got
        if not self.channel.readable(0):
            return False
        still_open = self.channel.receive(0)
        while True:
            framed = self.channel.next_frame(0, frame)
            if framed <= 0:
                break
            heard = True
            t = _frame_type(frame)
            if notices_only and t != MSG_ABORT_ALL and t != MSG_COORD_BYE:
                continue
            self._handle_coordinator_frame(frame)
            got = True
        if heard:
            # after the frames' collectives ran: rank 0 ran them too, sending nothing meanwhile
            self.watch.heard(now_seconds())
        if framed < 0:
            self.table.fail(_str("rank 0 ") + self.channel.bad_framing(0), ERR_INTERNAL)
            if self.channel.mail_corrupt(0):
                # the socket is sound: rank 0 (and through it everyone) hears why
                self.report_up(_str("rank 0 ") + self.channel.bad_framing(0))
            self.channel.close(0)
            return True
        if not still_open:
            if self.channel.stopped_answering(0):
                self.table.note_lost(0)
                self.table.fail(_str("lost the connection to the coordinator: ") +
                                self.channel.who(0) + self._unanswered_text(), ERR_SHUTDOWN)
            self.channel.close(0)
            self.table.fail_if_running(_str("lost the connection to the coordinator (rank 0): rank 0 "
                                           "exited or crashed") if notices_only else
                                       _str("lost the connection to the coordinator (rank 0): rank 0 "
                                           "exited or crashed without reporting an error"),
                                       ERR_SHUTDOWN)
            return True
        return got

    cdef void _handle_coordinator_frame(self, const string& frame) noexcept nogil:
        cdef Reader rd = reader_new(frame)
        cdef uint8_t t = read_type(rd)
        cdef uint32_t n, i, slot, gen
        cdef int who
        cdef string msg
        cdef Response resp
        cdef int kind
        cdef bint lost = False
        if t == MSG_RESPONSES:
            n = read_count(rd)
            for i in range(n):
                resp = _read_response(rd)
                if rd.bad:
                    self.table.fail(_str("corrupt response from the coordinator"), ERR_INTERNAL)
                    return
                self._execute(resp)
                if self.table.is_failed():
                    return
        elif t == MSG_STRAGGLERS:
            lock_acquire(self.lock)
            self.stragglers = frame.substr(1)
            lock_release(self.lock)
        elif t == MSG_STALE:
            read_stale(rd, &slot, &gen)
            if self.submitter.repack(slot, gen, msg):
                self._send_requests(msg, string(b""))
        elif t == MSG_ABORT_ALL:      # who < 0: the job itself
            read_abort_all(rd, &who, &kind, &msg, &lost)
            self.table.fail_from(who, msg, kind, lost)
        elif t == MSG_COORD_BYE:
            self.table.fail_if_running(_str("rank 0 has shut down (it called fuse.shutdown() or "
                                           "exited); no further collectives are possible"),
                                       ERR_SHUTDOWN)

    # ------------------------------------------------------------------ rank 0: the workers' side

    cdef bint _coordinator_step(self) noexcept nogil:
        """Read what the workers sent, then let the coordinator check for stalls and emit ready
        responses."""
        cdef bint progressed
        self.coord.apply_tuning()
        progressed = self._read_control(False)
        if self.table.current_state() != S_RUNNING:
            return True
        if self.coord.step():
            progressed = True
        return progressed

    cdef void _worker_gone(self, int r) noexcept nogil:
        """Rank 0: worker ``r``'s connection closed."""
        cdef bint unanswered = self.channel.stopped_answering(r)
        if self.channel.close(r) == PEER_LEAVING and not unanswered:   # a clean exit
            self.coord.rank_left(r)
            return
        if unanswered:
            self._abort_lost(r, self.channel.who(r) + self._unanswered_text())
            return
        self.abort_job(r, _str("the process exited without calling fuse.shutdown() (it "
                              "crashed, was killed, or called os._exit); its connection "
                              "to rank 0 closed"), ERR_INTERNAL)

    cdef str _rank0_name(self):
        return self.channel.who(0).decode(errors="replace")

    cdef string _unanswered_text(self) noexcept nogil:
        return (_str(" stopped answering: its end of the control connection acknowledged "
                     "nothing for ") + _int_str(<int64_t>self.peer_timeout_s) +
                _str(" s (FUSE_PEER_TIMEOUT_SECONDS); its host is down or cut off by the "
                     "network"))

    cdef void _abort_lost(self, int who, const string& msg) noexcept nogil:
        """abort_job for a rank that stopped answering: every rank keeps which one it was
        (HandleTable.lost_rank), as data beside the message."""
        cdef string frame
        frame_abort_all(frame, who, ERR_INTERNAL, msg, True)
        self.channel.send_all(frame, who)
        self.table.fail_from(who, msg, ERR_INTERNAL, True)

    cdef void abort_job(self, int who, const string& msg, int kind) noexcept nogil:
        """Tell every rank the job failed, then fail here too (CoordinatorLink)."""
        cdef string frame
        frame_abort_all(frame, who, kind, msg)
        self.channel.send_all(frame, who)
        self.table.fail_from(who, msg, kind)

    cdef void _ingest(self, int rank, const string& msg) noexcept nogil:
        """A message from ``rank`` (rank 0's own requests too)."""
        cdef Reader rd = reader_new(msg)
        cdef uint8_t t = read_type(rd)
        if t == MSG_REQUESTS:
            self.coord.ingest_requests(rank, rd)
        elif t == MSG_ABORT:
            self.abort_job(rank, read_abort(rd), ERR_INTERNAL)
        elif t == MSG_BYE:
            self.channel.mark_leaving(rank)
            self.coord.rank_left(rank)

    # ------------------------------------------------------------------ execution

    cdef void _execute(self, Response& resp) noexcept nogil:
        """Run one response (see ResponseRunner); a backend failure fails the engine."""
        cdef string err
        cdef int rc = self.runner.run(resp, err)
        if rc == EX_BACKEND:
            self._backend_failed(resp, err)
        elif rc == EX_STALL:
            self._peer_stalled(err)
        self.runner.close_spans(resp)

    cdef void _peer_stalled(self, const string& err) noexcept nogil:
        """A member of a collective did not arrive in time (it is stopped or hung): fail
        with a StallError naming it, and tell everyone (rank 0 directly; a worker through rank
        0, if it still listens)."""
        if self.rank == 0:
            self.abort_job(-1, err, ERR_STALL)
            return
        self.table.fail(err, ERR_STALL)
        self.report_up(err)

    cdef void report_up(self, const string& msg, bint holder=True) noexcept nogil:
        """A worker tells rank 0 (and through it everyone) why it is failing (``holder``: the
        calling thread holds the loop; see ControlChannel.send_to)."""
        cdef string frame
        frame_abort(frame, msg)
        self.channel.send_up(frame, holder)

    cdef void _backend_failed(self, Response& resp, const string& err) noexcept nogil:
        """A collective failed in the backend (usually: a peer died).  Wait briefly for the
        coordinator's word on the cause, then fail the engine with the best message we have."""
        cdef string why = _str("collective ") + _str(_kind_name(resp.kind)) + _str(" of tensor '") + \
            resp.names[0] + _str("' failed in the backend: ") + err
        self._await_cause(3.0)
        # if the cause arrived meanwhile, its message gains the collective it broke
        self.table.fail_or_amend(why, _str(" (while running ") + _str(_kind_name(resp.kind)) +
                                 _str(" of tensor '") + resp.names[0] + _str("': ") + err +
                                 _str(")"), ERR_BACKEND)

    cdef void _await_cause(self, double seconds) noexcept nogil:
        """Read only failure notices from the control channel for up to ``seconds``."""
        cdef double deadline = now_seconds() + seconds
        while now_seconds() < deadline and self.table.current_state() == S_RUNNING:
            self._read_control(True)
            if self.table.current_state() != S_RUNNING or not self.channel.poll_open(50):
                return
