// Allreduce through shared memory among the ranks of one host, whatever the backend: the
// algorithm is described in fuse/engine/shm.py, which maps the segments; the executor
// (fuse/engine/executor.pyx) calls this class without the GIL, in place of the backend's allreduce.
//
// Each rank's segment starts with a header page: its barrier counter, its pid, the futex
// word its waiters sleep on and where its buffer of the current call lies.  The data area after
// it holds two chunk-sized halves that alternate from chunk to chunk.
//
// Regions (add_region) are further shared mappings, one per rank, that hold tensors themselves
// (the torch optimizer's gradient buffer): a buffer that lies in one at the same offset on every
// rank is reduced straight from the ranks' regions into them, with no staging copies.
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

// The last step of a part's reduction for the common case (float32 sum, the gradients'), in
// one pass: out = (out + peer) * post, also stored into `pub` (this rank's segment, for the
// others to collect).  The generic path makes three passes of it (the reduce, scale_buffer,
// the memcpy that publishes); the arithmetic is the same, so are the results: the sum is
// rounded to float, then the product, as there.
inline void sum_scale_f32(float* __restrict out, const float* __restrict peer,
                          float* __restrict pub, size_t n, float post) {
  for (size_t i = 0; i < n; ++i) {
    const float v = (out[i] + peer[i]) * post;
    out[i] = v;
    pub[i] = v;
  }
}

// The same where the result also goes back where the peer's input was (its region, in the
// direct path): read, then overwritten, in the same pass.
inline void sum_scale_f32_both(float* __restrict out, float* __restrict theirs, size_t n,
                               float post) {
  for (size_t i = 0; i < n; ++i) {
    const float v = (out[i] + theirs[i]) * post;
    out[i] = v;
    theirs[i] = v;
  }
}

struct ShmHeader {
  std::atomic<uint64_t> arrived;   // the number of barriers this rank has reached
  int64_t pid;                     // for the liveness check while others wait on it
  std::atomic<uint32_t> wake;      // low bits of `arrived`: the word waiters sleep on (futex)
  std::atomic<uint32_t> sleepers;  // how many waiters may sleep on `wake` now
  // this rank's buffer in the current call: region index (-1: none), offset, bytes; written
  // before a barrier, read by the others after it
  int64_t region;
  int64_t offset;
  int64_t bytes;
};

constexpr size_t kShmHeaderBytes = 4096;
// What allreduce returns besides 0: an error, or a peer that did not arrive in time (err names
// it either way; a stall is reported as the engine's StallError).
constexpr int kShmFailed = 1;
constexpr int kShmStalled = 2;
// Called (from the waiting thread, without the GIL) when a peer is late by the warning time.
using ShmWarnFn = void (*)(const char* message);
constexpr size_t kShmPidOffset = offsetof(ShmHeader, pid);   // written by fuse/engine/shm.py
static_assert(sizeof(ShmHeader) <= kShmHeaderBytes, "header must fit its page");

class ShmAllreduce {
 public:
  // bases[k]: rank k's segment as mapped in this process (header page + 2 * chunk bytes).
  ShmAllreduce(std::vector<char*> bases, int rank, size_t chunk)
      : bases_(std::move(bases)), rank_(rank), chunk_(chunk) {
    epoch_ = header(rank_)->arrived.load(std::memory_order_acquire);
  }

  // Every rank's mapping of one more region (bases[k]: rank k's, bytes[k] long).  The engine
  // adds regions only while no allreduce runs; ranks may add them at different points of the
  // response stream, since every call checks that all ranks see its buffer the same way.
  void add_region(std::vector<char*> bases, std::vector<size_t> bytes) {
    regions_.push_back(Region{std::move(bases), std::move(bytes)});
  }

  uint64_t direct = 0;   // calls reduced straight between regions

  // How long a barrier waits for a late peer: warn after `warn_s` (through `warn`, once per
  // barrier), give up after `fail_s` with kShmStalled (0: wait as long as the peer lives).
  void set_patience(double warn_s, double fail_s, ShmWarnFn warn) {
    warn_s_ = warn_s;
    fail_s_ = fail_s;
    warn_ = warn;
  }

  // Afterwards buf holds the reduction times `post` (the engine's postscale, applied by each
  // part's owner while the part is in cache rather than in another pass over the buffer).
  int allreduce(void* buf, size_t count, int dtype, int op, double post, char* err,
                size_t errlen) {
    ReduceFn reduce = reduce_kernel(dtype, op);
    if (reduce == nullptr) {
      snprintf(err, errlen, "shared-memory allreduce: no kernel for %s %s", dtype_name(dtype),
               op_name(op));
      return kShmFailed;
    }
    const size_t n = bases_.size();
    const size_t esize = dtype_size(dtype);
    const size_t step = (chunk_ / (n * esize)) * n * esize;   // whole elements, n parts
    char* raw = static_cast<char*>(buf);
    const size_t total = count * esize;
    // float32 sums take the one-pass last step (sum_scale_f32); one rank alone has no peer
    const bool fused = dtype == FUSE_FLOAT32 && op == FUSE_OP_SUM && n > 1;
    int in_regions = direct_if_shared(raw, total, err, errlen);
    if (in_regions < 0) return -in_regions;
    if (in_regions)
      return reduce_in_regions(raw, count, esize, reduce, dtype, post, fused, err, errlen);
    const size_t last = last_peer();
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
      if (int rc = barrier(err, errlen)) return rc;
      // 2. reduce the part this rank owns from everyone's copy, then publish the result
      const size_t a = cut[rank_], z = cut[rank_ + 1];
      for (size_t k = 0; k < n; ++k)      // fused: the last peer is left to sum_scale_f32
        if (k != static_cast<size_t>(rank_) && !(fused && k == last) && z > a)
          reduce(raw + a, raw + a, data(k) + half + (a - lo), (z - a) / esize);
      if (fused) {
        sum_scale_f32(reinterpret_cast<float*>(raw + a),
                      reinterpret_cast<const float*>(data(last) + half + (a - lo)),
                      reinterpret_cast<float*>(mine + (a - lo)), (z - a) / esize,
                      static_cast<float>(post));
      } else {
        scale_buffer(raw + a, (z - a) / esize, dtype, post);
        memcpy(mine + (a - lo), raw + a, z - a);
      }
      if (int rc = barrier(err, errlen)) return rc;
      // 3. collect the other parts' results
      for (size_t k = 0; k < n; ++k)
        if (k != static_cast<size_t>(rank_))
          memcpy(raw + cut[k], data(k) + half + (cut[k] - lo), cut[k + 1] - cut[k]);
    }
    return 0;
  }

  // ---- the intra-host halves of the hierarchical allreduce (fuse/engine/hierarchy.py): the
  // buffer's elements are cut into one shard per rank, the same cut on every host, so that the
  // ranks with the same index on every host hold the same elements between the two calls.

  size_t index() const { return static_cast<size_t>(rank_); }   // this rank's, among bases

  // First element of rank k's shard of a buffer of `count` elements (k == n: the end).
  size_t shard_begin(size_t count, size_t k) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(count) * k) / bases_.size());
  }

  // Afterwards this rank's shard of buf holds the reduction of every rank's shard (the rest of
  // buf is left as it was).  Per step, every rank publishes one piece of each other rank's
  // shard in its own segment, in one slot per owner; barrier; each owner reduces its piece
  // from everyone's slot.  The halves alternate as in allreduce(): a rank publishing step s + 2
  // has passed the barrier of step s + 1, so everyone has finished reading step s.
  int reduce_scatter(void* buf, size_t count, int dtype, int op, char* err, size_t errlen) {
    ReduceFn reduce = reduce_kernel(dtype, op);
    if (reduce == nullptr) {
      snprintf(err, errlen, "shared-memory reduce-scatter: no kernel for %s %s",
               dtype_name(dtype), op_name(op));
      return 1;
    }
    const size_t n = bases_.size();
    const size_t esize = dtype_size(dtype);
    const size_t piece = chunk_ / n / esize;    // elements per slot
    const size_t me = static_cast<size_t>(rank_);
    char* raw = static_cast<char*>(buf);
    for (size_t done = 0; done < longest_shard(count); done += piece, ++chunks_) {
      const size_t half = (chunks_ % 2) * chunk_;
      for (size_t k = 0; k < n; ++k) {
        size_t a, z;
        if (k == me || !piece_of(count, k, done, piece, &a, &z)) continue;
        memcpy(data(me) + half + k * piece * esize, raw + a * esize, (z - a) * esize);
      }
      if (int rc = barrier(err, errlen)) return rc;
      size_t a, z;
      if (!piece_of(count, me, done, piece, &a, &z)) continue;
      for (size_t k = 0; k < n; ++k)
        if (k != me) reduce(raw + a * esize, raw + a * esize, data(k) + half + me * piece * esize,
                            z - a);
    }
    return 0;
  }

  // Afterwards buf holds every rank's shard, copied from its owner's buf.  `ok` false says
  // this rank's shard is not a result (its cross-host part failed): then every rank returns an
  // error instead of using it.  Each rank's status travels with its first piece, in the last 8
  // bytes of that step's half, which no piece reaches.
  int allgather(void* buf, size_t count, int dtype, bool ok, char* err, size_t errlen) {
    const size_t n = bases_.size();
    const size_t esize = dtype_size(dtype);
    const size_t piece = (chunk_ - kStatusBytes) / esize;
    const size_t me = static_cast<size_t>(rank_);
    const size_t longest = longest_shard(count);
    char* raw = static_cast<char*>(buf);
    for (size_t done = 0; done == 0 || done < longest; done += piece, ++chunks_) {
      const size_t half = (chunks_ % 2) * chunk_;
      size_t a, z;
      if (piece_of(count, me, done, piece, &a, &z))
        memcpy(data(me) + half, raw + a * esize, (z - a) * esize);
      if (done == 0) status(me, half)->store(ok ? 1 : 0, std::memory_order_relaxed);
      if (int rc = barrier(err, errlen)) return rc;
      if (done == 0) {
        for (size_t k = 0; k < n; ++k) {
          if (status(k, half)->load(std::memory_order_relaxed) != 1) {
            ++chunks_;   // every rank stops here, at the same step
            snprintf(err, errlen,
                     "hierarchical allreduce: local rank %zu could not reduce its shard across "
                     "hosts (its own error says why)", k);
            return 1;
          }
        }
      }
      for (size_t k = 0; k < n; ++k)
        if (k != me && piece_of(count, k, done, piece, &a, &z))
          memcpy(raw + a * esize, data(k) + half, (z - a) * esize);
    }
    return 0;
  }

  // The hierarchical allgather's intra-host part: range i of buf (`bytes[i]` bytes from
  // `offset[i]`) is filled on its owner, rank `owner[i]`; afterwards every rank has every range.
  // Each owner's ranges, in list order, form one stream that goes through its segment a chunk
  // at a time; the lists must be the same on every rank.  `ok` as in allgather().
  int allgather_ranges(char* buf, const std::vector<size_t>& offset,
                       const std::vector<size_t>& bytes, const std::vector<int>& owner, bool ok,
                       char* err, size_t errlen) {
    const size_t n = bases_.size();
    const size_t me = static_cast<size_t>(rank_);
    const size_t piece = chunk_ - kStatusBytes;
    std::vector<size_t> total(n, 0);
    for (size_t i = 0; i < offset.size(); ++i) total[owner[i]] += bytes[i];
    size_t longest = 0;
    for (size_t k = 0; k < n; ++k) longest = total[k] > longest ? total[k] : longest;
    for (size_t done = 0; done == 0 || done < longest; done += piece, ++chunks_) {
      const size_t half = (chunks_ % 2) * chunk_;
      stream_copy(buf, offset, bytes, owner, me, done, piece, data(me) + half, true);
      if (done == 0) status(me, half)->store(ok ? 1 : 0, std::memory_order_relaxed);
      if (int rc = barrier(err, errlen)) return rc;
      if (done == 0) {
        for (size_t k = 0; k < n; ++k) {
          if (status(k, half)->load(std::memory_order_relaxed) != 1) {
            ++chunks_;
            snprintf(err, errlen,
                     "hierarchical allgather: local rank %zu could not gather its part across "
                     "hosts (its own error says why)", k);
            return 1;
          }
        }
      }
      for (size_t k = 0; k < n; ++k)
        if (k != me) stream_copy(buf, offset, bytes, owner, k, done, piece, data(k) + half, false);
    }
    return 0;
  }

  // Alltoall: this rank's block for rank j (`send_bytes[j]` from `send_off[j]` of send) lands
  // in rank j's recv; what rank k sends here lands at `recv_off[k]` (`recv_bytes[k]` long).
  // Per step every rank publishes the next piece of each of its blocks in its own segment, one
  // slot per receiver; barrier; each receiver copies its pieces out of every sender's slot.
  // `longest`, the largest block any rank sends, must be the same on every rank: so is the
  // number of steps.  The halves alternate as in reduce_scatter().
  int alltoall(const char* send, const std::vector<size_t>& send_off,
               const std::vector<size_t>& send_bytes, char* recv,
               const std::vector<size_t>& recv_off, const std::vector<size_t>& recv_bytes,
               size_t longest, char* err, size_t errlen) {
    const size_t n = bases_.size();
    const size_t me = static_cast<size_t>(rank_);
    const size_t slot = chunk_ / n;
    if (send_bytes[me]) memcpy(recv + recv_off[me], send + send_off[me], send_bytes[me]);
    for (size_t done = 0; done < longest; done += slot, ++chunks_) {
      const size_t half = (chunks_ % 2) * chunk_;
      for (size_t j = 0; j < n; ++j)
        if (j != me && done < send_bytes[j])
          memcpy(data(me) + half + j * slot, send + send_off[j] + done,
                 send_bytes[j] - done < slot ? send_bytes[j] - done : slot);
      if (int rc = barrier(err, errlen)) return rc;
      for (size_t k = 0; k < n; ++k)
        if (k != me && done < recv_bytes[k])
          memcpy(recv + recv_off[k] + done, data(k) + half + me * slot,
                 recv_bytes[k] - done < slot ? recv_bytes[k] - done : slot);
    }
    return 0;
  }

 private:
  static constexpr size_t kStatusBytes = 8;

  // Copies bytes [done, done + piece) of rank k's stream (its ranges of buf in list order)
  // between buf and `seg` (which holds that window): into seg if `publish`, else out of it.
  static void stream_copy(char* buf, const std::vector<size_t>& offset,
                          const std::vector<size_t>& bytes, const std::vector<int>& owner,
                          size_t k, size_t done, size_t piece, char* seg, bool publish) {
    size_t pos = 0;
    for (size_t i = 0; i < offset.size() && pos < done + piece; ++i) {
      if (static_cast<size_t>(owner[i]) != k) continue;
      const size_t a = pos > done ? pos : done;
      const size_t z = pos + bytes[i] < done + piece ? pos + bytes[i] : done + piece;
      if (a < z) {
        char* in_buf = buf + offset[i] + (a - pos);
        char* in_seg = seg + (a - done);
        if (publish) memcpy(in_seg, in_buf, z - a);
        else memcpy(in_buf, in_seg, z - a);
      }
      pos += bytes[i];
    }
  }

  std::atomic<int64_t>* status(size_t k, size_t half) const {
    return reinterpret_cast<std::atomic<int64_t>*>(data(k) + half + chunk_ - kStatusBytes);
  }

  size_t longest_shard(size_t count) const {
    const size_t n = bases_.size();
    return (count + n - 1) / n;
  }

  // Elements [*a, *z) of rank k's shard that a step starting `done` elements into every shard
  // covers, at most `piece` of them; false when that shard has none left.
  bool piece_of(size_t count, size_t k, size_t done, size_t piece, size_t* a, size_t* z) const {
    const size_t lo = shard_begin(count, k), hi = shard_begin(count, k + 1);
    if (lo + done >= hi) return false;
    *a = lo + done;
    *z = hi - *a < piece ? hi : *a + piece;
    return true;
  }

  struct Region {
    std::vector<char*> bases;
    std::vector<size_t> bytes;
  };

  // Whether every rank's buffer of this call lies in the same region at the same offset (1),
  // or not (0; minus barrier()'s code on error).  Every rank publishes where its buffer lies, then one barrier, then
  // all compare the same descriptors, so all decide alike.  A rank reuses its descriptor only
  // after a later barrier, which the others pass only once they have read this one.
  int direct_if_shared(const char* raw, size_t total, char* err, size_t errlen) {
    ShmHeader* me = header(rank_);
    me->region = -1;
    me->offset = 0;
    me->bytes = static_cast<int64_t>(total);
    for (size_t r = 0; r < regions_.size(); ++r) {
      const char* base = regions_[r].bases[rank_];
      if (raw >= base && raw + total <= base + regions_[r].bytes[rank_]) {
        me->region = static_cast<int64_t>(r);
        me->offset = raw - base;
        break;
      }
    }
    if (int rc = barrier(err, errlen)) return -rc;
    if (me->region < 0) return 0;
    for (size_t k = 0; k < bases_.size(); ++k) {
      const ShmHeader* h = header(k);
      if (h->region != me->region || h->offset != me->offset || h->bytes != me->bytes) return 0;
      if (static_cast<size_t>(me->offset) + total > regions_[me->region].bytes[k]) return 0;
    }
    return 1;
  }

  // Each rank reduces its part straight from every rank's region into its own, applies the
  // postscale while the block is in cache and writes the result into the others' regions: every
  // byte read once per rank and written once per rank, one barrier at the end.  Only the owner
  // touches a part, in anyone's region, so the parts need no barrier between them.
  int reduce_in_regions(char* raw, size_t count, size_t esize, ReduceFn reduce, int dtype,
                        double post, bool fused, char* err, size_t errlen) {
    const ShmHeader* me = header(rank_);
    const Region& reg = regions_[me->region];
    const size_t n = bases_.size();
    const size_t a = (count * rank_ / n) * esize, z = (count * (rank_ + 1) / n) * esize;
    const size_t block = (kDirectBlockBytes / esize) * esize;
    const size_t last = last_peer();
    for (size_t lo = a; lo < z; lo += block) {
      const size_t len = lo + block < z ? block : z - lo;
      for (size_t k = 0; k < n; ++k)
        if (k != static_cast<size_t>(rank_) && !(fused && k == last))
          reduce(raw + lo, raw + lo, reg.bases[k] + me->offset + lo, len / esize);
      if (fused) {
        // the last peer's copy is read and then overwritten with the result in the same pass
        char* theirs = reg.bases[last] + me->offset + lo;
        sum_scale_f32_both(reinterpret_cast<float*>(raw + lo), reinterpret_cast<float*>(theirs),
                           len / esize, static_cast<float>(post));
      } else {
        scale_buffer(raw + lo, len / esize, dtype, post);
      }
      for (size_t k = 0; k < n; ++k)
        if (k != static_cast<size_t>(rank_) && !(fused && k == last))
          memcpy(reg.bases[k] + me->offset + lo, raw + lo, len);
    }
    ++direct;
    return barrier(err, errlen);
  }

  // the unit of the direct reduction: small enough that the result is still in cache when it
  // is copied to the other ranks
  static constexpr size_t kDirectBlockBytes = 256 * 1024;

  // the highest rank other than this one: whose copy the one-pass last step reads (only when
  // `fused`, which needs a peer: with one rank this value means nothing)
  size_t last_peer() const {
    const size_t n = bases_.size();
    return static_cast<size_t>(rank_) == n - 1 ? n - 2 : n - 1;
  }

  ShmHeader* header(size_t k) const { return reinterpret_cast<ShmHeader*>(bases_[k]); }
  char* data(size_t k) const { return bases_[k] + kShmHeaderBytes; }

  // Every rank arrives, then waits for the others: a short spin (the peer is usually a few
  // microseconds behind), then sleeping on the peer's futex word, which the peer's arrival
  // wakes.  Sleeping matters: on a machine with as many ranks as cores, a waiter that spins or
  // yields takes the core from this rank's own training thread.  A peer that died is noticed
  // by its pid every 100 ms instead of being waited for forever, and one that is alive but
  // stopped or hung (SIGSTOP, a debugger, a deadlock in its own code) by the clock: a warning
  // after warn_s_, kShmStalled after fail_s_ (set_patience).
  int barrier(char* err, size_t errlen) {
    ++epoch_;
    ShmHeader* me = header(rank_);
    me->arrived.store(epoch_, std::memory_order_release);
    // Wake only if someone sleeps: a FUTEX_WAKE is a system call, and a peer that is on time
    // catches the arrival while spinning (three barriers per small allreduce).  The store of
    // `wake` and the load of `sleepers` here, against the increment of `sleepers` and the
    // load of `wake` in the waiter, are all sequentially consistent: either this sees the
    // sleeper, or the sleeper sees the new word (and FUTEX_WAIT returns at once).
    me->wake.store(static_cast<uint32_t>(epoch_), std::memory_order_seq_cst);
    if (me->sleepers.load(std::memory_order_seq_cst) != 0)
      // not FUTEX_PRIVATE: the word lives in memory shared between processes
      syscall(SYS_futex, &me->wake, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
    double waiting_since = 0;     // set once spinning is over: the clock is only read while asleep
    bool warned = false;
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
        h->sleepers.fetch_add(1, std::memory_order_seq_cst);
        uint32_t seen = h->wake.load(std::memory_order_seq_cst);
        if (h->arrived.load(std::memory_order_acquire) >= epoch_) {
          h->sleepers.fetch_sub(1, std::memory_order_relaxed);
          break;
        }
        struct timespec slice = {0, 100 * 1000 * 1000};
        // returns at once if the word moved on since `seen` (no lost wake-up)
        long rc = syscall(SYS_futex, &h->wake, FUTEX_WAIT, seen, &slice, nullptr, 0);
        const bool slept_out = rc != 0 && errno == ETIMEDOUT;
        h->sleepers.fetch_sub(1, std::memory_order_relaxed);
        if (slept_out && kill(static_cast<pid_t>(h->pid), 0) != 0 && errno == ESRCH) {
          snprintf(err, errlen,
                   "shared-memory allreduce: rank %zu (pid %lld) exited while rank %d "
                   "waited for it",
                   k, static_cast<long long>(h->pid), rank_);
          return kShmFailed;
        }
        if (slept_out) {
          const double now = monotonic_seconds();
          if (waiting_since == 0) waiting_since = now - 0.1;
          const double late = now - waiting_since;
          if (fail_s_ > 0 && late >= fail_s_) {
            snprintf(err, errlen,
                     "stall: shared-memory allreduce: rank %zu (pid %lld) has not arrived for "
                     "%.0f seconds while rank %d waited for it; it is stopped or hung",
                     k, static_cast<long long>(h->pid), late, rank_);
            return kShmStalled;
          }
          if (!warned && warn_s_ > 0 && late >= warn_s_ && warn_ != nullptr) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "shared-memory allreduce: rank %zu (pid %lld) has not arrived for %.0f "
                     "seconds while rank %d waits for it (stopped or hung?)",
                     k, static_cast<long long>(h->pid), late, rank_);
            warn_(msg);
            warned = true;
          }
        }
      }
    }
    return 0;
  }

  static double monotonic_seconds() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }

  std::vector<char*> bases_;
  std::vector<Region> regions_;
  double warn_s_ = 0;
  double fail_s_ = 0;
  ShmWarnFn warn_ = nullptr;
  int rank_;
  size_t chunk_;
  uint64_t epoch_;
  // Chunks reduced so far, over all calls: the halves alternate across calls too, since a
  // rank may start its next allreduce while a peer still reads the previous one's last chunk.
  uint64_t chunks_ = 0;
};

}  // namespace fuse
