// Implementation of fuse_gloo.h.  See that file for the contract.
#include "fuse_gloo.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "reduce.h"

struct fuse_gloo_device {
  std::shared_ptr<gloo::transport::Device> dev;
};

struct fuse_gloo_group {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{30000};
  int algorithm = FUSE_GLOO_RING;
  std::shared_ptr<gloo::rendezvous::Context> ctx;  // null when size == 1 or closed
  std::mutex mu;        // one collective at a time per group
  bool closed = false;
  std::string broken;   // the first communication failure; the group is unusable after it
};

namespace {

// A mistake in the arguments, found before any byte is sent: the group stays usable.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

void write_err(char* err, size_t errlen, const std::string& msg) {
  if (err == nullptr || errlen == 0) {
    return;
  }
  const size_t n = std::min(msg.size(), errlen - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Gloo prefixes its messages with "[/path/to/file.cc:123] "; keep the reason only.
std::string strip_location(const std::string& what) {
  if (!what.empty() && what[0] == '[') {
    const auto end = what.find("] ");
    if (end != std::string::npos) {
      return what.substr(end + 2);
    }
  }
  return what;
}

std::chrono::milliseconds to_ms(double ms) {
  return std::chrono::milliseconds(static_cast<int64_t>(ms > 1.0 ? ms : 1.0));
}

// The Gloo store interface over fuse_gloo_store_cb, with every key prefixed.
class CallbackStore : public gloo::rendezvous::Store {
 public:
  CallbackStore(const fuse_gloo_store_cb& cb, std::string prefix,
                std::chrono::milliseconds timeout)
      : cb_(cb), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    std::string err;
    if (cb_.set(cb_.handle, prefix_ + key, data.data(), data.size(), &err) != 0) {
      throw gloo::IoException("rendezvous store: cannot set '" + prefix_ + key + "': " + err);
    }
  }

  std::vector<char> get(const std::string& key) override {
    std::string value, err;
    if (cb_.get(cb_.handle, prefix_ + key, static_cast<double>(timeout_.count()), &value,
                &err) != 0) {
      throw gloo::IoException("rendezvous store: cannot get '" + prefix_ + key + "': " + err);
    }
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) {
      full.push_back(prefix_ + k);
    }
    std::string err;
    if (cb_.wait(cb_.handle, full, static_cast<double>(timeout.count()), &err) != 0) {
      throw gloo::IoException("rendezvous store: " + err);
    }
  }

 private:
  fuse_gloo_store_cb cb_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// Runs one collective under the group's lock and turns every exception into a message
// "gloo <what> failed on group rank R of N: <reason>".
template <typename Body>
int run(void* self, const char* what, char* err, size_t errlen, Body&& body) {
  auto* g = static_cast<fuse_gloo_group*>(self);
  if (g == nullptr) {
    write_err(err, errlen, std::string("gloo ") + what + " failed: no group (NULL self)");
    return 1;
  }
  std::string reason;
  try {
    std::lock_guard<std::mutex> lock(g->mu);
    if (g->closed) {
      reason = "the group is closed";
    } else if (!g->broken.empty()) {
      reason = "the group is unusable after an earlier failure: " + g->broken;
    } else {
      bool usage = false;
      try {
        body(*g);
        return 0;
      } catch (const UsageError& e) {
        reason = e.what();
        usage = true;
      } catch (const std::exception& e) {
        reason = strip_location(e.what());
      } catch (...) {
        reason = "unknown C++ exception";
      }
      if (!usage) {
        // A failed exchange leaves the connections in an unknown state: close them, so that
        // peers blocked on this member fail now instead of at their timeout.
        g->broken = reason;
        g->ctx.reset();
      }
    }
  } catch (const std::exception& e) {  // the lock itself failed
    reason = e.what();
  } catch (...) {
    reason = "unknown C++ exception";
  }
  char head[160];
  std::snprintf(head, sizeof head, "gloo %s failed on group rank %d of %d: ", what, g->rank,
                g->size);
  write_err(err, errlen, head + reason);
  return 1;
}

// Gloo's typed setters fix the element size from T; pick T by width.
template <typename Fn>
void with_element_type(size_t esize, Fn&& fn) {
  switch (esize) {
    case 1: fn(static_cast<uint8_t*>(nullptr)); break;
    case 2: fn(static_cast<uint16_t*>(nullptr)); break;
    case 4: fn(static_cast<uint32_t*>(nullptr)); break;
    case 8: fn(static_cast<uint64_t*>(nullptr)); break;
    default: throw UsageError("unsupported element size " + std::to_string(esize));
  }
}

// Gloo wants a real pointer even for empty buffers.
unsigned char g_empty[8];

void* nonnull(const void* p) {
  return p != nullptr ? const_cast<void*>(p) : static_cast<void*>(g_empty);
}

void allreduce_locked(fuse_gloo_group& g, void* buf, size_t count, int dtype, int op) {
  const size_t esize = fuse_gloo::dtype_size(dtype);
  if (esize == 0) {
    throw UsageError("unknown dtype code " + std::to_string(dtype));
  }
  const fuse_gloo::ReduceFn fn = fuse_gloo::reduce_function(dtype, op);
  if (fn == nullptr) {
    throw UsageError(std::string("unsupported reduction ") + fuse_gloo::op_name(op) + " on " +
                     fuse_gloo::dtype_name(dtype));
  }
  if (g.size == 1 || count == 0) {
    return;
  }
  gloo::AllreduceOptions opts(g.ctx);
  with_element_type(esize, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    opts.setOutput(static_cast<T*>(buf), count);
  });
  opts.setReduceFunction(fn);
  opts.setAlgorithm(g.algorithm == FUSE_GLOO_BCUBE ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                   : gloo::AllreduceOptions::Algorithm::RING);
  opts.setTimeout(g.timeout);
  gloo::allreduce(opts);
}

}  // namespace

int fuse_gloo_device_new(const char* hostname, const char* iface, fuse_gloo_device** out,
                         char* err, size_t errlen) {
  try {
    gloo::transport::tcp::attr attr;
    if (iface != nullptr && *iface != '\0') {
      attr.iface = iface;
    } else {
      attr.hostname = (hostname != nullptr && *hostname != '\0') ? hostname : "127.0.0.1";
    }
    auto dev = std::make_unique<fuse_gloo_device>();
    dev->dev = gloo::transport::tcp::CreateDevice(attr);
    *out = dev.release();
    return 0;
  } catch (const std::exception& e) {
    write_err(err, errlen,
              std::string("gloo: cannot open a TCP device on ") +
                  ((iface != nullptr && *iface != '\0') ? "interface '" + std::string(iface)
                                                        : "address '" + std::string(hostname ? hostname : "")) +
                  "': " + strip_location(e.what()));
  } catch (...) {
    write_err(err, errlen, "gloo: cannot open a TCP device: unknown C++ exception");
  }
  return 1;
}

void fuse_gloo_device_free(fuse_gloo_device* dev) {
  delete dev;
}

std::string fuse_gloo_device_str(const fuse_gloo_device* dev) {
  try {
    return (dev != nullptr && dev->dev) ? dev->dev->str() : std::string("none");
  } catch (...) {
    return "unknown";
  }
}

int fuse_gloo_group_new(fuse_gloo_device* dev, int rank, int size, double timeout_ms,
                        const fuse_gloo_store_cb* store, const char* prefix,
                        fuse_gloo_group** out, char* err, size_t errlen) {
  const std::string pfx = prefix != nullptr ? prefix : "";
  try {
    if (size < 1 || rank < 0 || rank >= size) {
      throw UsageError("invalid rank " + std::to_string(rank) + " of size " +
                       std::to_string(size));
    }
    auto g = std::make_unique<fuse_gloo_group>();
    g->rank = rank;
    g->size = size;
    g->timeout = to_ms(timeout_ms);
    if (size > 1) {
      if (dev == nullptr || store == nullptr) {
        throw UsageError("a group of more than one process needs a device and a store");
      }
      CallbackStore cb_store(*store, pfx, g->timeout);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
      ctx->setTimeout(g->timeout);
      ctx->connectFullMesh(cb_store, dev->dev);
      g->ctx = std::move(ctx);
    }
    *out = g.release();
    return 0;
  } catch (const std::exception& e) {
    write_err(err, errlen,
              "gloo: cannot connect group rank " + std::to_string(rank) + " of " +
                  std::to_string(size) + " (rendezvous keys '" + pfx + "*'): " +
                  strip_location(e.what()));
  } catch (...) {
    write_err(err, errlen, "gloo: cannot connect a group: unknown C++ exception");
  }
  return 1;
}

void fuse_gloo_group_close(fuse_gloo_group* group) {
  if (group == nullptr) {
    return;
  }
  try {
    std::lock_guard<std::mutex> lock(group->mu);
    group->closed = true;
    group->ctx.reset();
  } catch (...) {
  }
}

void fuse_gloo_group_free(fuse_gloo_group* group) {
  fuse_gloo_group_close(group);
  delete group;
}

int fuse_gloo_group_set_algorithm(fuse_gloo_group* group, int algorithm) {
  if (group == nullptr || (algorithm != FUSE_GLOO_RING && algorithm != FUSE_GLOO_BCUBE)) {
    return 1;
  }
  std::lock_guard<std::mutex> lock(group->mu);
  group->algorithm = algorithm;
  return 0;
}

int fuse_gloo_group_set_timeout(fuse_gloo_group* group, double timeout_ms) {
  if (group == nullptr || !(timeout_ms > 0)) {
    return 1;
  }
  std::lock_guard<std::mutex> lock(group->mu);
  group->timeout = to_ms(timeout_ms);
  return 0;
}

void fuse_gloo_group_fill_ops(fuse_gloo_group* group, fuse_group_ops* ops) {
  ops->api_version = FUSE_BACKEND_API_VERSION;
  ops->self = group;
  ops->allreduce = &fuse_gloo_allreduce;
  ops->allgatherv = &fuse_gloo_allgatherv;
  ops->broadcast = &fuse_gloo_broadcast;
  ops->alltoallv = &fuse_gloo_alltoallv;
  ops->reducescatter = &fuse_gloo_reducescatter;
  ops->barrier = &fuse_gloo_barrier;
}

int fuse_gloo_allreduce(void* self, void* buf, size_t count, int dtype, int op, char* err,
                        size_t errlen) {
  return run(self, "allreduce", err, errlen, [&](fuse_gloo_group& g) {
    allreduce_locked(g, buf, count, dtype, op);
  });
}

int fuse_gloo_allgatherv(void* self, const void* sendbuf, size_t sendbytes, void* recvbuf,
                         const size_t* recvbytes, char* err, size_t errlen) {
  return run(self, "allgatherv", err, errlen, [&](fuse_gloo_group& g) {
    if (recvbytes[g.rank] != sendbytes) {
      throw UsageError("this member sends " + std::to_string(sendbytes) +
                       " bytes but recvbytes[" + std::to_string(g.rank) + "] is " +
                       std::to_string(recvbytes[g.rank]));
    }
    size_t total = 0;
    for (int i = 0; i < g.size; ++i) {
      total += recvbytes[i];
    }
    if (g.size == 1) {
      if (sendbytes != 0 && recvbuf != sendbuf) {
        std::memmove(recvbuf, sendbuf, sendbytes);
      }
      return;
    }
    if (total == 0) {
      return;
    }
    gloo::AllgathervOptions opts(g.ctx);
    opts.setInput(static_cast<uint8_t*>(nonnull(sendbuf)), sendbytes);
    opts.setOutput(static_cast<uint8_t*>(nonnull(recvbuf)),
                   std::vector<size_t>(recvbytes, recvbytes + g.size));
    opts.setTimeout(g.timeout);
    gloo::allgatherv(opts);
  });
}

int fuse_gloo_broadcast(void* self, void* buf, size_t nbytes, int root, char* err,
                        size_t errlen) {
  return run(self, "broadcast", err, errlen, [&](fuse_gloo_group& g) {
    if (root < 0 || root >= g.size) {
      throw UsageError("root " + std::to_string(root) + " is not a member (group size " +
                       std::to_string(g.size) + ")");
    }
    if (g.size == 1 || nbytes == 0) {
      return;
    }
    gloo::BroadcastOptions opts(g.ctx);
    opts.setOutput(static_cast<uint8_t*>(buf), nbytes);
    opts.setRoot(root);
    opts.setTimeout(g.timeout);
    gloo::broadcast(opts);
  });
}

int fuse_gloo_alltoallv(void* self, const void* sendbuf, const size_t* sendbytes, void* recvbuf,
                        const size_t* recvbytes, char* err, size_t errlen) {
  return run(self, "alltoallv", err, errlen, [&](fuse_gloo_group& g) {
    if (g.size == 1) {
      if (sendbytes[0] != recvbytes[0]) {
        throw UsageError("a single member sends " + std::to_string(sendbytes[0]) +
                         " bytes to itself but expects " + std::to_string(recvbytes[0]));
      }
      if (sendbytes[0] != 0 && recvbuf != sendbuf) {
        std::memmove(recvbuf, sendbuf, sendbytes[0]);
      }
      return;
    }
    std::vector<int64_t> in(sendbytes, sendbytes + g.size);
    std::vector<int64_t> out(recvbytes, recvbytes + g.size);
    gloo::AlltoallvOptions opts(g.ctx);
    opts.setInput(static_cast<uint8_t*>(nonnull(sendbuf)), std::move(in));
    opts.setOutput(static_cast<uint8_t*>(nonnull(recvbuf)), std::move(out));
    opts.setTimeout(g.timeout);
    gloo::alltoallv(opts);
  });
}

int fuse_gloo_reducescatter(void* self, void* buf, const size_t* recvcounts, int dtype, int op,
                            char* err, size_t errlen) {
  return run(self, "reducescatter", err, errlen, [&](fuse_gloo_group& g) {
    // Gloo 0.5 has no reduce-scatter in its options API: reduce everything, keep our block.
    size_t total = 0, start = 0;
    for (int i = 0; i < g.size; ++i) {
      if (i == g.rank) {
        start = total;
      }
      total += recvcounts[i];
    }
    allreduce_locked(g, buf, total, dtype, op);
    const size_t esize = fuse_gloo::dtype_size(dtype);
    if (start != 0 && recvcounts[g.rank] != 0) {
      auto* bytes = static_cast<unsigned char*>(buf);
      std::memmove(bytes, bytes + start * esize, recvcounts[g.rank] * esize);
    }
  });
}

int fuse_gloo_barrier(void* self, char* err, size_t errlen) {
  return run(self, "barrier", err, errlen, [&](fuse_gloo_group& g) {
    if (g.size == 1) {
      return;
    }
    gloo::BarrierOptions opts(g.ctx);
    opts.setTimeout(g.timeout);
    gloo::barrier(opts);
  });
}

int fuse_gloo_reduce_local(void* out, const void* a, const void* b, size_t n, int dtype, int op,
                           char* err, size_t errlen) {
  const fuse_gloo::ReduceFn fn = fuse_gloo::reduce_function(dtype, op);
  if (fn == nullptr) {
    write_err(err, errlen, std::string("unsupported reduction ") + fuse_gloo::op_name(op) +
                               " on " + fuse_gloo::dtype_name(dtype));
    return 1;
  }
  fn(out, a, b, n);
  return 0;
}
