/* The C contract between the fuse engine and a communication backend.
 *
 * A backend group (one per process set) may hand the engine a `fuse_group_ops` table in a
 * PyCapsule named FUSE_GROUP_OPS_CAPSULE.  The engine's background thread then calls these
 * functions WITHOUT the GIL, so they must not touch Python objects.  A backend that offers no
 * table is driven through its Python methods instead (slower, GIL taken per call).
 *
 * Every function returns 0 on success.  On failure it returns non-zero and writes a
 * NUL-terminated, human-readable reason into `err` (at most `errlen` bytes).
 * Buffers are host memory; counts are element counts, `*bytes` arrays are byte counts, one entry
 * per member of the group, indexed by the rank inside the group.
 */
#ifndef FUSE_BACKEND_H
#define FUSE_BACKEND_H

#include <stddef.h>

#define FUSE_BACKEND_API_VERSION 1
#define FUSE_GROUP_OPS_CAPSULE "fuse.group_ops.v1"

/* Wire data types; values are part of the contract. */
enum fuse_dtype {
    FUSE_UINT8 = 0,
    FUSE_INT8 = 1,
    FUSE_UINT16 = 2,
    FUSE_INT16 = 3,
    FUSE_INT32 = 4,
    FUSE_INT64 = 5,
    FUSE_FLOAT16 = 6,
    FUSE_FLOAT32 = 7,
    FUSE_FLOAT64 = 8,
    FUSE_BOOL = 9,
    FUSE_BFLOAT16 = 10
};

/* Reductions a backend performs.  Average is not here: the engine reduces with SUM and scales. */
enum fuse_reduce_op {
    FUSE_OP_SUM = 0,
    FUSE_OP_MIN = 1,
    FUSE_OP_MAX = 2,
    FUSE_OP_PRODUCT = 3
};

typedef struct fuse_group_ops {
    int api_version;  /* FUSE_BACKEND_API_VERSION */
    void *self;       /* passed back as the first argument of every call */

    /* In place: buf holds `count` elements of `dtype`; afterwards every member holds the reduction. */
    int (*allreduce)(void *self, void *buf, size_t count, int dtype, int op, char *err, size_t errlen);

    /* recvbuf receives the members' blocks back to back; recvbytes[i] is member i's block size. */
    int (*allgatherv)(void *self, const void *sendbuf, size_t sendbytes, void *recvbuf,
                      const size_t *recvbytes, char *err, size_t errlen);

    /* root is the rank inside the group. */
    int (*broadcast)(void *self, void *buf, size_t nbytes, int root, char *err, size_t errlen);

    /* sendbytes[i]: bytes this member sends to member i (blocks back to back in sendbuf);
     * recvbytes[i]: bytes this member receives from member i (back to back in recvbuf). */
    int (*alltoallv)(void *self, const void *sendbuf, const size_t *sendbytes, void *recvbuf,
                     const size_t *recvbytes, char *err, size_t errlen);

    /* Optional (may be NULL: the engine then calls the Group's Python reducescatter).  buf
     * holds sum(recvcounts) elements; on return the first recvcounts[rank] elements of buf
     * hold this member's block of the reduction. */
    int (*reducescatter)(void *self, void *buf, const size_t *recvcounts, int dtype, int op,
                         char *err, size_t errlen);

    int (*barrier)(void *self, char *err, size_t errlen);
} fuse_group_ops;

#endif
