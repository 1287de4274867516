# Declarations shared by the engine's Cython modules: the C++ helpers in csrc/core_support.h and
# the backend ops table from backends/fuse_backend.h, and the timeline's event buffer in
# csrc/timeline.h.
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp cimport bool as cbool

cdef extern from "fuse_backend.h" nogil:
    enum:
        FUSE_BACKEND_API_VERSION
    enum fuse_dtype:
        FUSE_UINT8, FUSE_INT8, FUSE_UINT16, FUSE_INT16, FUSE_INT32, FUSE_INT64,
        FUSE_FLOAT16, FUSE_FLOAT32, FUSE_FLOAT64, FUSE_BOOL, FUSE_BFLOAT16
    enum fuse_reduce_op:
        FUSE_OP_SUM, FUSE_OP_MIN, FUSE_OP_MAX, FUSE_OP_PRODUCT
    ctypedef struct fuse_group_ops:
        int api_version
        void *self
        int (*allreduce)(void*, void*, size_t, int, int, char*, size_t) noexcept nogil
        int (*allgatherv)(void*, const void*, size_t, void*, const size_t*, char*, size_t) noexcept nogil
        int (*broadcast)(void*, void*, size_t, int, char*, size_t) noexcept nogil
        int (*alltoallv)(void*, const void*, const size_t*, void*, const size_t*, char*, size_t) noexcept nogil
        int (*reducescatter)(void*, void*, const size_t*, int, int, char*, size_t) noexcept nogil
        int (*barrier)(void*, char*, size_t) noexcept nogil

cdef extern from "core_support.h" namespace "fuse" nogil:
    cppclass Lock:
        pass
    Lock* lock_new()
    void lock_free(Lock*)
    void lock_acquire(Lock*)
    void lock_release(Lock*)
    bint lock_try(Lock*)
    void lock_wait_ms(Lock*, double)
    void lock_notify_all(Lock*)
    double now_seconds()
    int send_frame(int fd, const string& payload)
    ssize_t recv_some(int fd, string& inbox)
    cbool pop_frame(string& inbox, string& out)
    int wake_fd_new()
    void wake_fd_signal(int)
    size_t dtype_size(int)
    const char* dtype_name(int)
    void scale_buffer(void*, size_t, int, double)
    int reduce_into(void*, const void*, size_t, int, int)
    void put[T](string&, T)
    void put_str(string&, const string&)
    cppclass Reader:
        cbool bad
    Reader reader_new(const string&)
    T get[T](Reader&)
    string get_str(Reader&)
    cbool reader_done(const Reader&)

cdef extern from "shm_allreduce.h" namespace "fuse" nogil:
    size_t kShmHeaderBytes
    size_t kShmPidOffset
    cppclass ShmAllreduce:
        ShmAllreduce(vector[char*] bases, int rank, size_t chunk)
        int allreduce(void* buf, size_t count, int dtype, int op, double post, char* err,
                      size_t errlen)
        void add_region(vector[char*] bases, vector[size_t] bytes)
        uint64_t direct

cdef extern from "lane.h" namespace "fuse" nogil:
    cppclass Lane:
        void start(int (*job)(void*) noexcept nogil, void* arg)
        int wait()
    Lane* lane_new()
    void lane_free(Lane*)

cdef extern from "timeline.h" namespace "fuse" nogil:
    cppclass Timeline:
        pass
    enum TlWhat:
        TLW_NEGOTIATE, TLW_TOP, TLW_QUEUE, TLW_MEMCPY_IN, TLW_BACKEND, TLW_MEMCPY_OUT, TLW_INLINE,
        TLW_SHM
    Timeline* tl_new()
    void tl_free(Timeline*)
    cbool tl_on(Timeline*)
    cbool tl_cycles_on(Timeline*)
    void tl_start(Timeline*, cbool, const string&)
    void tl_stop(Timeline*)
    void tl_span(Timeline*, const string&, char, uint8_t, int, const string&)
    void tl_span(Timeline*, const string&, char, uint8_t, int)
    void tl_span_all(Timeline*, const vector[string]&, char, uint8_t, int)
    void tl_close(Timeline*, const string&, const string&)
    void tl_tick(Timeline*, const string&, int)
    int64_t tl_clock(Timeline*)
    void tl_cycle(Timeline*, int64_t)
    string tl_drain(Timeline*)
