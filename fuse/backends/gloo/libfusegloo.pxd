# Declarations of the C++ layer over Gloo (csrc/); the backend contract is
# fuse/backends/libfusebackend.pxd.
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.backends.libfusebackend cimport *


# Store callbacks (defined in _gloo.pyx; they take the GIL themselves).
ctypedef int (*store_set_fn)(void*, const string&, const char*, size_t, string*) noexcept nogil
ctypedef int (*store_get_fn)(void*, const string&, double, string*, string*) noexcept nogil
ctypedef int (*store_wait_fn)(void*, const vector[string]&, double, string*) noexcept nogil


cdef extern from "fuse_gloo.h" nogil:
    struct fuse_gloo_store_cb:
        void* handle
        store_set_fn set
        store_get_fn get
        store_wait_fn wait

    struct fuse_gloo_device:
        pass
    struct fuse_gloo_group:
        pass

    enum fuse_gloo_algorithm:
        FUSE_GLOO_RING
        FUSE_GLOO_BCUBE

    int fuse_gloo_device_new(const char* hostname, const char* iface, fuse_gloo_device** out,
                             char* err, size_t errlen)
    void fuse_gloo_device_free(fuse_gloo_device* dev)
    string fuse_gloo_device_str(const fuse_gloo_device* dev)

    int fuse_gloo_group_new(fuse_gloo_device* dev, int rank, int size, double timeout_ms,
                            const fuse_gloo_store_cb* store, const char* prefix,
                            fuse_gloo_group** out, char* err, size_t errlen)
    void fuse_gloo_group_close(fuse_gloo_group* group)
    void fuse_gloo_group_free(fuse_gloo_group* group)
    int fuse_gloo_group_set_algorithm(fuse_gloo_group* group, int algorithm)
    int fuse_gloo_group_set_timeout(fuse_gloo_group* group, double timeout_ms)
    void fuse_gloo_group_fill_ops(fuse_gloo_group* group, fuse_group_ops* ops)

    int fuse_gloo_allreduce(void* self, void* buf, size_t count, int dtype, int op, char* err,
                            size_t errlen)
    int fuse_gloo_allgatherv(void* self, const void* sendbuf, size_t sendbytes, void* recvbuf,
                             const size_t* recvbytes, char* err, size_t errlen)
    int fuse_gloo_broadcast(void* self, void* buf, size_t nbytes, int root, char* err,
                            size_t errlen)
    int fuse_gloo_alltoallv(void* self, const void* sendbuf, const size_t* sendbytes,
                            void* recvbuf, const size_t* recvbytes, char* err, size_t errlen)
    int fuse_gloo_reducescatter(void* self, void* buf, const size_t* recvcounts, int dtype,
                                int op, char* err, size_t errlen)
    int fuse_gloo_barrier(void* self, char* err, size_t errlen)
    int fuse_gloo_reduce_local(void* out, const void* a, const void* b, size_t n, int dtype,
                               int op, char* err, size_t errlen)
