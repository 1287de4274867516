# Running responses and completing this rank's handles (see results.pyx).
from libc.stdint cimport int64_t, uint8_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.engine.csupport cimport Lock, Timeline
from fuse.engine.protocol cimport Request, Response, PSet
from fuse.engine.executor cimport Executor
from fuse.engine.handles cimport HandleTable
from fuse.engine.psets cimport ProcessSets
from fuse.engine.submitter cimport Submitter


cdef class ResponseRunner:
    # Everything here belongs to whoever holds the engine's loop; the handle table is shared
    # (its methods take its lock), the rest are the engine's own parts.
    cdef HandleTable table
    cdef Submitter submitter
    cdef ProcessSets psets
    cdef Executor executor
    cdef Timeline* tl
    cdef vector[Request*] exec_reqs     # scratch: this rank's request per tensor of a response
    cdef public object device_executor  # runs device (GPU) responses (fuse/engine/device.py), or
                                        # None until this rank's first device request

    cdef int run(self, Response& resp, string& err) noexcept nogil
    cdef void close_spans(self, Response& resp) noexcept nogil
    cdef int _run(self, Response& resp, string& err) noexcept nogil
    cdef int _allreduce(self, Response& resp, PSet* ps, string& err) noexcept nogil
    cdef int _single(self, Response& resp, PSet* ps, string& err) noexcept nogil
    cdef int _device(self, Response& resp, PSet* ps, string& err) noexcept nogil
    cdef int _settle(self, Response& resp, int rc, const string& err) noexcept nogil
    cdef void _add_set(self, Response& resp) noexcept nogil
    cdef void _remove_set(self, Response& resp) noexcept nogil
    cdef void finish(self, const string& key, int status, const string& error,
                     int error_kind) noexcept nogil
    cdef void _finish_ok(self, const string& key, int64_t value) noexcept nogil
    cdef void _finish_all(self, Response& resp, int status, const string& error,
                          int kind) noexcept nogil
    cdef void _tl_all(self, Response& resp, char ph, uint8_t what) noexcept nogil
    cdef void _tl_close(self, const string& name, int dtype,
                        const vector[int64_t]& shape) noexcept nogil
