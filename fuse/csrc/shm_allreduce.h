// Allreduce through shared memory among the ranks of one host, whatever the backend: the
// algorithm is described in fuse/common/shm.py, which maps the segments; the executor
// (fuse/_executor.pyx) calls this class without the GIL, in place of the backend's allreduce.
//
// Each rank's segment starts with a header page: its barrier counter, its pid and the futex
// word its waiters sleep on.  The data
// area after it holds two chunk-sized halves that alternate from chunk to chunk.
#pragma once

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuse_dtypes.h"

namespace fuse {

struct ShmHeader {
  std::atomic<uint64_t> arrived;   // the number of barriers this rank has reached
  int64_t pid;                     // for the liveness check while others wait on it
  std::atomic<uint32_t> wake;      // low bits of `arrived`: the word waiters sleep on (futex)
};

constexpr size_t kShmHeaderBytes = 4096;
constexpr size_t kShmPidOffset = offsetof(ShmHeader, pid);   // written by fuse/common/shm.py
static_assert(sizeof(ShmHeader) <= kShmHeaderBytes, "header must fit its page");

class ShmAllreduce {
 public:
  // bases[k]: rank k's segment as mapped in this process (header page + 2 * chunk bytes).
  ShmAllreduce(std::vector<char*> bases, int rank, size_t chunk)
      : bases_(std::move(bases)), rank_(rank), chunk_(chunk) {
    epoch_ = header(rank_)->arrived.load(std::memory_order_acquire);
  }

  // Afterwards buf holds the reduction times `post` (the engine's postscale, applied by each
  // part's owner while the part is in cache rather than in another pass over the buffer).
  int allreduce(void* buf, size_t count, int dtype, int op, double post, char* err,
                size_t errlen) {
    ReduceFn reduce = reduce_kernel(dtype, op);
    if (reduce == nullptr) {
      snprintf(err, errlen, "shared-memory allreduce: no kernel for %s %s", dtype_name(dtype),
               op_name(op));
      return 1;
    }
    const size_t n = bases_.size();
    const size_t esize = dtype_size(dtype);
    const size_t step = (chunk_ / (n * esize)) * n * esize;   // whole elements, n parts
    char* raw = static_cast<char*>(buf);
    const size_t total = count * esize;
    std::vector<size_t> cut(n + 1);
    for (size_t lo = 0; lo < total; lo += step, ++chunks_) {
      const size_t hi = lo + step < total ? lo + step : total;
      const size_t elems = (hi - lo) / esize;
      for (size_t k = 0; k <= n; ++k) cut[k] = lo + (elems * k / n) * esize;
      const size_t half = (chunks_ % 2) * chunk_;
      // 1. publish the parts the others own
      char* mine = data(rank_) + half;
      for (size_t k = 0; k < n; ++k)
        if (k != static_cast<size_t>(rank_))
          memcpy(mine + (cut[k] - lo), raw + cut[k], cut[k + 1] - cut[k]);
      if (barrier(err, errlen) != 0) return 1;
      // 2. reduce the part this rank owns from everyone's copy, then publish the result
      const size_t a = cut[rank_], z = cut[rank_ + 1];
      for (size_t k = 0; k < n; ++k)
        if (k != static_cast<size_t>(rank_) && z > a)
          reduce(raw + a, raw + a, data(k) + half + (a - lo), (z - a) / esize);
      scale_buffer(raw + a, (z - a) / esize, dtype, post);
      memcpy(mine + (a - lo), raw + a, z - a);
      if (barrier(err, errlen) != 0) return 1;
      // 3. collect the other parts' results
      for (size_t k = 0; k < n; ++k)
        if (k != static_cast<size_t>(rank_))
          memcpy(raw + cut[k], data(k) + half + (cut[k] - lo), cut[k + 1] - cut[k]);
    }
    return 0;
  }

 private:
  ShmHeader* header(size_t k) const { return reinterpret_cast<ShmHeader*>(bases_[k]); }
  char* data(size_t k) const { return bases_[k] + kShmHeaderBytes; }

  // Every rank arrives, then waits for the others: a short spin (the peer is usually a few
  // microseconds behind), then sleeping on the peer's futex word, which the peer's arrival
  // wakes.  Sleeping matters: on a machine with as many ranks as cores, a waiter that spins or
  // yields takes the core from this rank's own training thread.  A peer that died is noticed
  // by its pid every 100 ms instead of being waited for forever.
  int barrier(char* err, size_t errlen) {
    ++epoch_;
    ShmHeader* me = header(rank_);
    me->arrived.store(epoch_, std::memory_order_release);
    me->wake.store(static_cast<uint32_t>(epoch_), std::memory_order_release);
    // not FUTEX_PRIVATE: the word lives in memory shared between processes
    syscall(SYS_futex, &me->wake, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
    for (size_t k = 0; k < bases_.size(); ++k) {
      ShmHeader* h = header(k);
      unsigned spins = 0;
      while (h->arrived.load(std::memory_order_acquire) < epoch_) {
        if (++spins < 512) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
          continue;
        }
        uint32_t seen = h->wake.load(std::memory_order_acquire);
        if (h->arrived.load(std::memory_order_acquire) >= epoch_) break;
        struct timespec slice = {0, 100 * 1000 * 1000};
        // returns at once if the word moved on since `seen` (no lost wake-up)
        long rc = syscall(SYS_futex, &h->wake, FUTEX_WAIT, seen, &slice, nullptr, 0);
        if (rc != 0 && errno == ETIMEDOUT &&
            kill(static_cast<pid_t>(h->pid), 0) != 0 && errno == ESRCH) {
          snprintf(err, errlen,
                   "shared-memory allreduce: rank %zu (pid %lld) exited while rank %d "
                   "waited for it",
                   k, static_cast<long long>(h->pid), rank_);
          return 1;
        }
      }
    }
    return 0;
  }

  std::vector<char*> bases_;
  int rank_;
  size_t chunk_;
  uint64_t epoch_;
  // Chunks reduced so far, over all calls: the halves alternate across calls too, since a
  // rank may start its next allreduce while a peer still reads the previous one's last chunk.
  uint64_t chunks_ = 0;
};

}  // namespace fuse
