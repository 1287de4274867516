# cython: language_level=3
# distutils: language = c++
"""The engine's handle table and failure state: what Python threads wait on.

A handle is pending until the loop completes it (done, or an error with its ErrorKind).  Once
the engine fails (a rank raised or died, the backend failed, the job stalled) or shuts down,
every pending handle and every later call carries the failure's message.
"""

from fuse.engine.csupport cimport *
from fuse.engine.protocol cimport *


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

    cdef void complete_locked(self, int64_t handle, int status, const string& error,
                              int error_kind) noexcept nogil:
        cdef unordered_map[int64_t, HandleState].iterator it = self.handles.find(handle)
        if it == self.handles.end():
            return
        if deref_hs(it).status == H_PENDING:
            self.npending -= 1
        deref_hs(it).status = status
        deref_hs(it).error = error
        deref_hs(it).error_kind = error_kind
        lock_notify_all(self.lock)

    cdef void fail_from(self, int who, const string& msg, int kind) noexcept nogil:
        """Fail because rank ``who`` failed with ``msg`` (``who`` < 0: the job as a whole)."""
        if who >= 0:
            self.fail(_str("rank ") + _int_str(who) + _str(" failed: ") + msg, kind)
        else:
            self.fail(msg, kind)

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

    cdef int current_state(self) noexcept nogil:
        cdef int s
        lock_acquire(self.lock)
        s = self.state
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
