# The handle table and the engine's failure state (see handles.pyx).
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector

from fuse.engine.csupport cimport Lock
from fuse.engine.protocol cimport Request, HandleState, PSet
from fuse.engine.channel cimport ControlChannel


cdef class HandleTable:
    # Every field is guarded by ``lock``: the loop takes it without the GIL, Python threads
    # take it with the GIL released, so neither waits for the other's GIL.
    cdef Lock* lock
    cdef unordered_map[int64_t, HandleState] handles
    cdef int64_t next_handle
    cdef int64_t npending               # handles not yet completed
    cdef unordered_set[string] names_in_flight  # _key(pset, name) of pending handles
    cdef vector[Request] queue          # enqueued, not yet taken by the loop
    cdef int state                      # S_RUNNING, S_STOPPING, S_STOPPED or S_FAILED
    cdef string failure                 # why, once not running
    cdef int failure_kind               # an ErrorKind
    cdef int lost_rank                  # the rank found unanswering that failed it, or -1
    cdef int failed_by                  # the rank whose failure failed it first, or -1
    cdef ControlChannel channel         # to wake the engine thread on failure

    cdef void complete_locked(self, int64_t handle, int status, const string& error,
                              int error_kind, bint notify=*) noexcept nogil
    cdef void note_lost(self, int who) noexcept nogil
    cdef void fail(self, const string& why, int kind) noexcept nogil
    cdef void fail_from(self, int who, const string& msg, int kind, bint lost=*) noexcept nogil
    cdef void fail_locked(self, const string& why, int kind) noexcept nogil
    cdef void amend_failure_locked(self, const string& detail, int kind) noexcept nogil
    cdef void fail_pending_locked(self) noexcept nogil
    cdef int current_state(self, string* failure=*) noexcept nogil
    cdef bint has_work(self) noexcept nogil
    cdef bint has_queued(self) noexcept nogil
    cdef object failure_text(self)
    cdef object refusal_locked(self, vector[Request]& reqs, unordered_map[int, PSet]& psets,
                               int rank)
    # the rules of the table, each taking the lock (the loop's and the Python threads' doors)
    cdef list admit(self, vector[Request]& reqs, vector[char]& drivable,
                    unordered_map[int, PSet]& psets, int rank)
    cdef int take_queue(self, vector[Request]& batch) noexcept nogil
    cdef int status_of(self, int64_t handle) noexcept nogil
    cdef int wait_step(self, int64_t handle, double ms, HandleState* out) noexcept nogil
    cdef bint driving_alone(self, int64_t handle) noexcept nogil
    cdef void set_value(self, int64_t handle, int64_t value) noexcept nogil
    cdef void set_aux(self, int64_t handle, vector[int64_t]& aux) noexcept nogil
    cdef void retire(self, const string& key, int64_t handle, int status, const string& error,
                     int error_kind) noexcept nogil
    cdef bint begin_stop(self) noexcept nogil
    cdef void end_stop(self) noexcept nogil
    cdef bint fail_if_running(self, const string& why, int kind, int who=*) noexcept nogil
    cdef bint is_failed(self) noexcept nogil
    cdef void fail_or_amend(self, const string& why, const string& detail, int kind) noexcept nogil
