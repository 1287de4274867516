# The handle table and the engine's failure state (see _handles.pyx).
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
    # take it with the GIL released (_core._acquire), so neither waits for the other's GIL.
    cdef Lock* lock
    cdef unordered_map[int64_t, HandleState] handles
    cdef int64_t next_handle
    cdef int64_t npending               # handles not yet completed
    cdef unordered_set[string] names_in_flight  # _key(pset, name) of pending handles
    cdef vector[Request] queue          # enqueued, not yet taken by the loop
    cdef int state                      # S_RUNNING, S_STOPPING, S_STOPPED or S_FAILED
    cdef string failure                 # why, once not running
    cdef int failure_kind               # an ErrorKind
    cdef ControlChannel channel         # to wake the engine thread on failure

    cdef void complete_locked(self, int64_t handle, int status, const string& error,
                              int error_kind) noexcept nogil
    cdef void fail(self, const string& why, int kind) noexcept nogil
    cdef void fail_from(self, int who, const string& msg, int kind) noexcept nogil
    cdef void fail_locked(self, const string& why, int kind) noexcept nogil
    cdef void amend_failure_locked(self, const string& detail, int kind) noexcept nogil
    cdef void fail_pending_locked(self) noexcept nogil
    cdef int current_state(self) noexcept nogil
    cdef bint has_work(self) noexcept nogil
    cdef object failure_text(self)
    cdef object refusal_locked(self, vector[Request]& reqs, unordered_map[int, PSet]& psets,
                               int rank)
