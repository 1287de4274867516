# Declarations of the backend contract (fuse_backend.h) and of the dtype helpers every side of
# it shares (fuse_dtypes.h): cimported by the engine (fuse/engine/csupport.pxd) and by native backends.
cdef extern from "fuse_backend.h" nogil:
    enum:
        FUSE_BACKEND_API_VERSION
    const char* FUSE_GROUP_OPS_CAPSULE
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

cdef extern from "fuse_dtypes.h" namespace "fuse" nogil:
    size_t dtype_size(int)
    const char* dtype_name(int)
    void scale_buffer(void*, size_t, int, double)
