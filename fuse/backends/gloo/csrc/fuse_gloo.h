// A thin C++ layer over Gloo for fuse: a TCP device, a rendezvous store that calls back into
// Python, and one group (Gloo context) per process set whose collectives have exactly the
// signatures of the fuse_group_ops table in fuse_backend.h.
//
// Nothing here throws: every entry point catches all exceptions and returns non-zero with a
// message in `err` (NUL-terminated, truncated to `errlen`).  Nothing here touches Python; the
// store callbacks are expected to take the GIL themselves.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fuse_backend.h"

// Rendezvous store, implemented by the caller (the Cython binding calls a Python Store).
// Each callback returns 0 on success, or non-zero with a reason in *err.
struct fuse_gloo_store_cb {
  void* handle;
  int (*set)(void* handle, const std::string& key, const char* data, size_t len,
             std::string* err);
  // Wait up to timeout_ms for `key`, then store its value in *out.
  int (*get)(void* handle, const std::string& key, double timeout_ms, std::string* out,
             std::string* err);
  int (*wait)(void* handle, const std::vector<std::string>& keys, double timeout_ms,
              std::string* err);
};

struct fuse_gloo_device;  // one TCP endpoint per process, shared by all its groups
struct fuse_gloo_group;   // one Gloo context (full mesh of connections) per process set

enum fuse_gloo_algorithm { FUSE_GLOO_RING = 1, FUSE_GLOO_BCUBE = 2 };

// hostname: address to bind (may be empty when iface is given); iface: network interface name.
int fuse_gloo_device_new(const char* hostname, const char* iface, fuse_gloo_device** out,
                         char* err, size_t errlen);
void fuse_gloo_device_free(fuse_gloo_device* dev);
// A description of the device such as "[127.0.0.1]:0" (for diagnostics).
std::string fuse_gloo_device_str(const fuse_gloo_device* dev);

// Connect `size` processes; this one is `rank`.  Keys are "<prefix><peer rank>".  size == 1
// needs neither a device nor a store (dev and store may be NULL).  Blocks for up to timeout_ms.
int fuse_gloo_group_new(fuse_gloo_device* dev, int rank, int size, double timeout_ms,
                        const fuse_gloo_store_cb* store, const char* prefix,
                        fuse_gloo_group** out, char* err, size_t errlen);
// Drop the connections; later calls fail with "group is closed".  Safe to call twice.
void fuse_gloo_group_close(fuse_gloo_group* group);
void fuse_gloo_group_free(fuse_gloo_group* group);
int fuse_gloo_group_set_algorithm(fuse_gloo_group* group, int algorithm);
// How long each later collective waits for a peer's data (the connect used the timeout given
// to fuse_gloo_group_new).  Nonzero when timeout_ms is not positive.
int fuse_gloo_group_set_timeout(fuse_gloo_group* group, double timeout_ms);

// Fill `ops` with this group's functions (ops->self = group).
void fuse_gloo_group_fill_ops(fuse_gloo_group* group, fuse_group_ops* ops);

// The collectives, as in fuse_group_ops (`self` is a fuse_gloo_group*).
int fuse_gloo_allreduce(void* self, void* buf, size_t count, int dtype, int op, char* err,
                        size_t errlen);
int fuse_gloo_allgatherv(void* self, const void* sendbuf, size_t sendbytes, void* recvbuf,
                         const size_t* recvbytes, char* err, size_t errlen);
int fuse_gloo_broadcast(void* self, void* buf, size_t nbytes, int root, char* err,
                        size_t errlen);
int fuse_gloo_alltoallv(void* self, const void* sendbuf, const size_t* sendbytes, void* recvbuf,
                        const size_t* recvbytes, char* err, size_t errlen);
int fuse_gloo_reducescatter(void* self, void* buf, const size_t* recvcounts, int dtype, int op,
                            char* err, size_t errlen);
int fuse_gloo_barrier(void* self, char* err, size_t errlen);

// The kernels, for tests: out[i] = op(a[i], b[i]) on n elements of dtype.
int fuse_gloo_reduce_local(void* out, const void* a, const void* b, size_t n, int dtype, int op,
                           char* err, size_t errlen);
