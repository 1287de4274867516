# The engine's C++ helpers, declared for its Cython modules: locks, framing, the eventfd and
# message (de)serialization (csrc/core_support.h), the same-host shared-memory allreduce
# (csrc/shm_allreduce.h), the split's second thread (csrc/lane.h) and the timeline's event
# buffer (csrc/timeline.h); plus, re-exported, the backend contract (backends/libfusebackend.pxd).
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp cimport bool as cbool

from fuse.backends.libfusebackend cimport *

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
    uint32_t kMaxFrameBytes
    int pop_frame(string& inbox, string& out)
    uint32_t frame_length(const string& inbox)
    int wake_fd_new()
    void wake_fd_signal(int)
    int reduce_into(void*, const void*, size_t, int, int)
    void advise_huge_pages(void*, size_t)
    void put[T](string&, T)
    void put_str(string&, const string&)
    cppclass Reader:
        cbool bad
    Reader reader_new(const string&)
    T get[T](Reader&)
    string get_str(Reader&)
    cbool reader_done(const Reader&)
    void copy_signature[To, From](To&, const From&)
    void put_signature[T](string&, const T&)
    void get_signature[T](Reader&, T&)

cdef extern from "shm_allreduce.h" namespace "fuse" nogil:
    size_t kShmHeaderBytes
    size_t kShmPidOffset
    int kShmStalled
    ctypedef void (*ShmWarnFn)(const char*) noexcept
    cppclass ShmAllreduce:
        ShmAllreduce(vector[char*] bases, int rank, size_t chunk)
        void set_patience(double warn_s, double fail_s, ShmWarnFn warn)
        int allreduce(void* buf, size_t count, int dtype, int op, double post, char* err,
                      size_t errlen)
        void add_region(vector[char*] bases, vector[size_t] bytes)
        uint64_t direct
        # the intra-host halves of the hierarchical allreduce
        size_t index()
        size_t shard_begin(size_t count, size_t k)
        int reduce_scatter(void* buf, size_t count, int dtype, int op, char* err, size_t errlen)
        int allgather(void* buf, size_t count, int dtype, cbool ok, char* err, size_t errlen)
        int allgather_ranges(char* buf, const vector[size_t]& offset,
                             const vector[size_t]& bytes, const vector[int]& owner, cbool ok,
                             char* err, size_t errlen)
        int alltoall(const char* send, const vector[size_t]& send_off,
                     const vector[size_t]& send_bytes, char* recv,
                     const vector[size_t]& recv_off, const vector[size_t]& recv_bytes,
                     size_t longest, char* err, size_t errlen)

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
        TLW_SHM, TLW_HIER
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
    void tl_counter(Timeline*, const string&, const vector[string]&, const vector[double]&)
    string tl_drain(Timeline*)
