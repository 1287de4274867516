# The executor (see executor.pyx): runs a response's data movement on this rank.
from libc.stdint cimport int64_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.engine.csupport cimport *
from fuse.engine.protocol cimport Request, Response, PSet, Hierarchy

# What Executor's collectives return; the engine completes the handles accordingly.
cdef enum:
    EX_OK = 0           # done: complete the handles
    EX_BACKEND = 1      # the backend collective failed (err): the job fails
    EX_LOCAL = 2        # this rank could not take part in the result (err): only its handles fail
    EX_STALL = 3        # a peer did not arrive in time (err names it): the job fails (StallError)


cdef class FusionBufferManager:
    cdef void* _ptr
    cdef size_t _size
    cdef void* get(self, size_t nbytes) noexcept nogil


cdef class Executor:
    cdef FusionBufferManager fusion
    cdef size_t shm_bytes       # allreduces of at least this size go through shared memory
    cdef size_t inline_bytes    # FUSE_INLINE_THRESHOLD: what travels inline (bytes x set size)
    cdef size_t split_bytes     # allreduces of at least this size run as two concurrent halves
    cdef Lane* lane             # runs the second half (created on first use)
    cdef Timeline* tl           # the engine's; spans around copies and the backend call
    cdef object records         # the engine's handle -> RequestSpec dict (for its allocator)
    # counters for diagnostics and benchmarks (engine thread only; read approximately)
    cdef double st_copy_s
    cdef double st_backend_s
    cdef uint64_t st_allreduces
    cdef uint64_t st_fused
    cdef uint64_t st_adjacent     # fused responses whose tensors already lay back to back
    cdef uint64_t st_split        # allreduces reduced as two concurrent halves
    cdef uint64_t st_shm          # allreduces reduced through shared memory
    cdef uint64_t st_hier         # allreduces reduced hierarchically (across hosts)
    cdef uint64_t st_hier_gather  # allgathers gathered hierarchically
    cdef uint64_t st_shm_gather   # allgathers, broadcasts, alltoalls through shared memory
    cdef uint64_t st_tensors
    cdef uint64_t st_inline
    cdef uint64_t st_bytes

    cdef void _allreduce_inline(self, Response& resp, vector[Request*]& reqs) noexcept nogil
    cdef int allreduce(self, Response& resp, PSet* ps, vector[Request*]& reqs,
                       string& err) noexcept nogil
    cdef bint _via_shm(self, PSet* ps, size_t nbytes) noexcept nogil
    cdef bint _via_hier(self, PSet* ps, size_t nbytes) noexcept nogil
    cdef int _reduce_hier(self, PSet* ps, char* buf, size_t count, int dtype, int op,
                          double post, string& err) noexcept nogil
    cdef int _hier_piece(self, Hierarchy* h, char* buf, size_t count, int dtype, int op,
                         double post, string& err) noexcept nogil
    cdef int _reduce(self, PSet* ps, char* buf, size_t count, int dtype, int op, double post,
                     string& err) noexcept nogil
    cdef int broadcast(self, Response& resp, PSet* ps, Request* r, string& err) noexcept nogil
    cdef int allgather(self, Response& resp, PSet* ps, Request* r, string& err) noexcept nogil
    cdef int _allgather_hier(self, PSet* ps, const void* inp, char* out,
                             vector[size_t]& recvbytes, string& err) noexcept nogil
    cdef bint gathers_via_shm(self, PSet* ps) noexcept nogil
    cdef int _allgather_shm(self, PSet* ps, const void* inp, char* out,
                            vector[size_t]& recvbytes, string& err) noexcept nogil
    cdef int _gather_shm(self, PSet* ps, char* buf, vector[size_t]& offsets,
                         vector[size_t]& nbytes, vector[int]& owners, string& err) noexcept nogil
    cdef int _alltoall_shm(self, PSet* ps, Response& resp, const char* send,
                           vector[size_t]& sendbytes, char* out, vector[size_t]& recvbytes,
                           size_t row, string& err) noexcept nogil
    cdef int alltoall(self, Response& resp, PSet* ps, Request* r, vector[int64_t]& recv_splits,
                      string& err) noexcept nogil
    cdef int reducescatter(self, Response& resp, PSet* ps, Request* r, string& err) noexcept nogil
    cdef int _reduce_shm(self, PSet* ps, char* buf, size_t count, int dtype, int op,
                         double post, string& err) noexcept nogil
    cdef int _reducescatter_shm(self, PSet* ps, char* buf, size_t count, vector[size_t]& counts,
                                int dtype, int op, double post, string& err) noexcept nogil
    cdef void* _allocate(self, int64_t handle, vector[int64_t]& shape, size_t nbytes,
                         string& err) noexcept with gil
