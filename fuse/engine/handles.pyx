# cython: language_level=3
# distutils: language = c++
"""The engine's handle table and failure state: what Python threads wait on.

A handle is pending until the loop completes it (done, or an error with its ErrorKind).  Once
the engine fails (a rank raised or died, the backend failed, the job stalled) or shuts down,
every pending handle and every later call carries the failure's message.
"""

from fuse.engine.protocol cimport *


cdef inline void _acquire_released(Lock* lock):
    """Take ``lock`` from code that holds the GIL, releasing the GIL while waiting: the engine
    thread and Python threads only ever wait for the lock without the GIL, so a thread that
    holds the lock and wants the GIL can never meet one that holds the GIL and wants the
    lock."""
    if not lock_try(lock):
        with nogil:
            lock_acquire(lock)


cdef class HandleTable:
    """Args:
        channel: the engine's control channel (woken when the engine fails).
    """

    def __cinit__(self):
        self.lock = lock_new()

    def __dealloc__(self):
        lock_free(self.lock)

    def __init__(self, ControlChannel channel):
        self.channel = channel
        self.state = S_RUNNING
        self.next_handle = 1
        self.lost_rank = -1
        self.failed_by = -1

    cdef void complete_locked(self, int64_t handle, int status, const string& error,
                              int error_kind, bint notify=True) noexcept nogil:
        """(under the lock) With ``notify`` False the caller wakes the waiters itself, after
        releasing the lock (see retire)."""
        cdef unordered_map[int64_t, HandleState].iterator it = self.handles.find(handle)
        if it == self.handles.end():
            return
        if deref_hs(it).status == H_PENDING:
            self.npending -= 1
        deref_hs(it).status = status
        deref_hs(it).error = error
        deref_hs(it).error_kind = error_kind
        if notify:
            lock_notify_all(self.lock)

    cdef void fail_from(self, int who, const string& msg, int kind, bint lost=False) noexcept nogil:
        """Fail because rank ``who`` failed with ``msg`` (``who`` < 0: the job as a whole);
        ``lost``: ``who`` stopped answering (see note_lost)."""
        if lost:
            self.note_lost(who)
        if who >= 0:
            self.fail_if_running(_str("rank ") + _int_str(who) + _str(" failed: ") + msg, kind, who)
        else:
            self.fail(msg, kind)

    cdef void note_lost(self, int who) noexcept nogil:
        """Rank ``who`` stopped answering (its host is down or cut off), which is about to fail
        the table: kept in ``lost_rank`` unless the table failed already (for another
        reason)."""
        lock_acquire(self.lock)
        if who >= 0 and self.state != S_FAILED:
            self.lost_rank = who
        lock_release(self.lock)

    cdef void fail(self, const string& why, int kind) noexcept nogil:
        lock_acquire(self.lock)
        self.fail_locked(why, kind)
        lock_release(self.lock)

    cdef void fail_locked(self, const string& why, int kind) noexcept nogil:
        """Enter the failed state: every pending and future call raises ``why``."""
        if self.state == S_FAILED:
            return
        self.state = S_FAILED
        self.failure = why
        self.failure_kind = kind
        self.fail_pending_locked()
        self.channel.wake()

    cdef void amend_failure_locked(self, const string& detail, int kind) noexcept nogil:
        """Already failed: append ``detail`` to the failure message and make ``kind`` its
        ErrorKind, for future calls and for handles still pending."""
        self.failure.append(detail)
        self.failure_kind = kind
        self.fail_pending_locked()
        self.channel.wake()

    cdef void fail_pending_locked(self) noexcept nogil:
        """Complete every pending handle with the failure (or the shutdown)."""
        cdef unordered_map[int64_t, HandleState].iterator it = self.handles.begin()
        cdef string why = self.failure
        if why.size() == 0:
            why = _str("fuse has been shut down on this rank")
        while it != self.handles.end():
            if deref_hs(it).status == H_PENDING:
                deref_hs(it).status = H_ERROR
                deref_hs(it).error = why
                deref_hs(it).error_kind = self.failure_kind if self.failure_kind else ERR_SHUTDOWN
            inc_hs(it)
        self.npending = 0
        self.names_in_flight.clear()
        lock_notify_all(self.lock)

    cdef int current_state(self, string* failure=NULL) noexcept nogil:
        """The engine's state; with ``failure``, also why it stopped (empty while running)."""
        cdef int s
        lock_acquire(self.lock)
        s = self.state
        if failure != NULL:
            failure[0] = self.failure
        lock_release(self.lock)
        return s

    cdef bint has_work(self) noexcept nogil:
        """Whether anything is queued or in flight, or the engine is stopping: what the engine
        thread must pick up after another thread held the loop."""
        cdef bint busy
        lock_acquire(self.lock)
        busy = self.queue.size() != 0 or self.npending != 0 or self.state != S_RUNNING
        lock_release(self.lock)
        return busy

    cdef bint has_queued(self) noexcept nogil:
        """Whether anything waits to be submitted, or the engine is stopping: has_work without
        what is in flight, which the engine thread hears of through its sockets."""
        cdef bint busy
        lock_acquire(self.lock)
        busy = self.queue.size() != 0 or self.state != S_RUNNING
        lock_release(self.lock)
        return busy

    cdef object failure_text(self):
        """(under the lock)"""
        if self.failure.size():
            return self.failure.decode(errors="replace")
        return "fuse has been shut down on this rank"

    cdef object refusal_locked(self, vector[Request]& reqs, unordered_map[int, PSet]& psets,
                               int rank):
        """Why these requests of one call cannot be queued (a message), or None: a name still
        in flight or given twice, a process set that does not exist or lacks this ``rank``."""
        cdef string key
        cdef int i, j
        for i in range(<int>reqs.size()):
            key = _key(reqs[i].pset, reqs[i].name)
            if self.names_in_flight.count(key):
                return (f"tensor name {reqs[i].name.decode()!r} was submitted again while a "
                        "collective of that name is still in flight on this rank; give each "
                        "concurrent collective its own name (or wait for the first one)")
            for j in range(i):
                if _key(reqs[j].pset, reqs[j].name) == key:
                    return (f"tensor name {reqs[i].name.decode()!r} appears twice in one "
                            "grouped call")
        if reqs.size() and reqs[0].pset != 0 and psets.count(reqs[0].pset) == 0:
            return f"process set {reqs[0].pset} does not exist (or was removed)"
        for i in range(<int>reqs.size()):
            if psets.count(reqs[i].pset) and psets[reqs[i].pset].index < 0:
                return f"this rank ({rank}) is not a member of process set {reqs[i].pset}"
        return None

    # ---- the rules of the table: each method takes the lock itself

    cdef list admit(self, vector[Request]& reqs, vector[char]& drivable,
                    unordered_map[int, PSet]& psets, int rank):
        """Queue one call's bound requests atomically and return their handles: raises
        ShutdownError once the engine has stopped or failed, ValueError with refusal_locked's
        reason."""
        cdef list handles = []
        cdef size_t i
        _acquire_released(self.lock)
        if self.state != S_RUNNING:
            msg = self.failure_text()
            lock_release(self.lock)
            from fuse.exceptions import ShutdownError
            raise ShutdownError(msg)
        refusal = self.refusal_locked(reqs, psets, rank)
        if refusal is not None:
            lock_release(self.lock)
            raise ValueError(refusal)
        for i in range(reqs.size()):
            reqs[i].handle = self.next_handle
            self.next_handle += 1
            self.names_in_flight.insert(_key(reqs[i].pset, reqs[i].name))
            self.handles[reqs[i].handle].status = H_PENDING
            self.handles[reqs[i].handle].drivable = drivable[i] != 0
            self.npending += 1
            self.queue.push_back(reqs[i])
            handles.append(reqs[i].handle)
        lock_release(self.lock)
        return handles

    cdef int take_queue(self, vector[Request]& batch) noexcept nogil:
        """The loop takes what was queued (into ``batch``) and learns the state; once not
        running, what was queued fails with the failure instead and ``batch`` stays empty."""
        cdef int state
        cdef Request r
        lock_acquire(self.lock)
        state = self.state
        batch.swap(self.queue)
        if state != S_RUNNING:
            for r in batch:
                self.complete_locked(r.handle, H_ERROR, self.failure, self.failure_kind)
            batch.clear()
        lock_release(self.lock)
        return state

    cdef int status_of(self, int64_t handle) noexcept nogil:
        """H_PENDING, H_DONE or H_ERROR; -1 for a handle the table does not know."""
        cdef int status = -1
        lock_acquire(self.lock)
        if self.handles.count(handle):
            status = self.handles[handle].status
        lock_release(self.lock)
        return status

    cdef int wait_step(self, int64_t handle, double ms, HandleState* out) noexcept nogil:
        """Wait up to ``ms`` for ``handle`` to complete; once it has, copy its state to
        ``out`` and forget it.  Returns its status, -1 if unknown."""
        cdef int status = -1
        lock_acquire(self.lock)
        if self.handles.count(handle):
            status = self.handles[handle].status
            if status == H_PENDING:
                lock_wait_ms(self.lock, ms)
                status = self.handles[handle].status
            if status != H_PENDING:
                out[0] = self.handles[handle]
                self.handles.erase(handle)
        lock_release(self.lock)
        return status

    cdef bint driving_alone(self, int64_t handle) noexcept nogil:
        """Whether a waiting thread may run the loop for ``handle`` (Engine._drive): it is the
        only collective pending, it is drivable, and the engine runs."""
        cdef bint ok
        lock_acquire(self.lock)
        ok = (self.npending == 1 and self.state == S_RUNNING and self.handles.count(handle) != 0
              and self.handles[handle].status == H_PENDING and self.handles[handle].drivable)
        lock_release(self.lock)
        return ok

    cdef void set_value(self, int64_t handle, int64_t value) noexcept nogil:
        """What wait() returns as the handle's value (join's last rank, a new set's id)."""
        lock_acquire(self.lock)
        if self.handles.count(handle):
            self.handles[handle].value = value
        lock_release(self.lock)

    cdef void set_aux(self, int64_t handle, vector[int64_t]& aux) noexcept nogil:
        """What wait() returns beside the value (alltoall's received splits); takes ``aux``."""
        lock_acquire(self.lock)
        if self.handles.count(handle):
            self.handles[handle].aux.swap(aux)
        lock_release(self.lock)

    cdef void retire(self, const string& key, int64_t handle, int status, const string& error,
                     int error_kind) noexcept nogil:
        """The request ``key`` is over on this rank: its name may be used again, and its
        handle completes."""
        lock_acquire(self.lock)
        self.names_in_flight.erase(key)
        self.complete_locked(handle, status, error, error_kind, False)
        lock_release(self.lock)
        # Woken after the unlock: a waiter woken while the engine thread still holds the lock
        # blocks on it at once, two context switches per completion instead of one (perf
        # sched_switch on synchronize()'s thread).  No wake-up is lost: the waiter
        # reads the status under the lock before it waits (wait_step).
        lock_notify_all(self.lock)

    cdef bint begin_stop(self) noexcept nogil:
        """shutdown(): a running engine starts stopping.  Whether it was running."""
        cdef bint was = False
        lock_acquire(self.lock)
        if self.state == S_RUNNING:
            self.state = S_STOPPING
            was = True
        lock_release(self.lock)
        return was

    cdef void end_stop(self) noexcept nogil:
        """After shutdown: the engine has stopped (unless it failed meanwhile) and whatever is
        still pending fails with the reason."""
        lock_acquire(self.lock)
        if self.state == S_STOPPING:
            self.state = S_STOPPED
            self.failure = _str("fuse has been shut down on this rank (fuse.shutdown() was called)")
            self.failure_kind = ERR_SHUTDOWN
        self.fail_pending_locked()
        lock_release(self.lock)

    cdef bint fail_if_running(self, const string& why, int kind, int who=-1) noexcept nogil:
        """Fail with ``why`` unless the engine already stopped or failed (a later, lesser
        reason must not replace the first); ``who``: the rank whose failure it is, kept in
        ``failed_by``.  Whether this call failed it."""
        cdef bint failed_now = False
        lock_acquire(self.lock)
        if self.state == S_RUNNING:
            self.failed_by = who
            self.fail_locked(why, kind)
            failed_now = True
        lock_release(self.lock)
        return failed_now

    cdef bint is_failed(self) noexcept nogil:
        return self.current_state() == S_FAILED

    cdef void fail_or_amend(self, const string& why, const string& detail, int kind) noexcept nogil:
        """Fail with ``why``; if the engine failed already (the cause arrived first), add
        ``detail`` to that failure instead and make ``kind`` its ErrorKind."""
        lock_acquire(self.lock)
        if self.state == S_FAILED:
            self.amend_failure_locked(detail, kind)
        else:
            self.fail_locked(why, kind)
        lock_release(self.lock)
