// Small C++ helpers for the engine modules (fuse/_core.pyx and the modules it cimports): a lock
// with a condition variable, a monotonic clock, framing on blocking sockets, and the arithmetic
// the engine does on buffers (scaling, and the reference reductions offered to pure-Python
// backends).  No Python API here: everything is callable without the GIL.
#pragma once

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuse_dtypes.h"

namespace fuse {

struct Lock {
  std::mutex m;
  std::condition_variable cv;
};

inline Lock* lock_new() { return new Lock(); }
inline void lock_free(Lock* l) { delete l; }
inline void lock_acquire(Lock* l) { l->m.lock(); }
inline void lock_release(Lock* l) { l->m.unlock(); }
inline bool lock_try(Lock* l) { return l->m.try_lock(); }
// Caller holds the lock; it is held again on return.
inline void lock_wait_ms(Lock* l, double ms) {
  std::unique_lock<std::mutex> g(l->m, std::adopt_lock);
  l->cv.wait_for(g, std::chrono::duration<double, std::milli>(ms));
  g.release();
}
inline void lock_notify_all(Lock* l) { l->cv.notify_all(); }

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// ---- sockets: every control message is a 4-byte little-endian length, then the payload ----

// Reads what the peer sent while a sender waits for its socket to take more (see send_all);
// returns whether to go on reading (false once the peer's end or an error was read).
typedef bool (*PeerRead)(void* ctx);

// Send all of `data`.  Without `read`, a plain blocking send.  With it, the sender never waits
// for the peer to read while the peer's own bytes wait unread: two ranks that send each other
// more than the sockets hold at the same moment (a flood of requests up, of responses down)
// would otherwise both wait forever, until the keep-alive timeout called the peer lost.
inline int send_all(int fd, const char* data, size_t n, PeerRead read = nullptr,
                    void* ctx = nullptr) {
  bool reading = read != nullptr;
  while (n > 0) {
    ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL | (read ? MSG_DONTWAIT : 0));
    if (k >= 0) {
      data += k;
      n -= (size_t)k;
      continue;
    }
    if (errno == EINTR) continue;
    if (!read || (errno != EAGAIN && errno != EWOULDBLOCK)) return -1;
    // full: wait until it takes more, reading the peer's bytes meanwhile (an error or the
    // peer's exit shows up as the next send failing)
    struct pollfd p;
    p.fd = fd;
    p.events = (short)(POLLOUT | (reading ? POLLIN : 0));
    p.revents = 0;
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
    if (reading && (p.revents & POLLIN)) reading = read(ctx);
  }
  return 0;
}

inline int send_frame(int fd, const std::string& payload, PeerRead read = nullptr,
                      void* ctx = nullptr) {
  uint32_t n = (uint32_t)payload.size();
  std::string buf;
  buf.resize(4 + payload.size());
  std::memcpy(&buf[0], &n, 4);
  if (!payload.empty()) std::memcpy(&buf[4], payload.data(), payload.size());
  return send_all(fd, buf.data(), buf.size(), read, ctx);
}

// Append whatever is readable now to `inbox`.  Returns bytes read, 0 on orderly close, -1 on error.
inline ssize_t recv_some(int fd, std::string& inbox) {
  char tmp[65536];
  for (;;) {
    ssize_t k = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (k > 0) {
      inbox.append(tmp, (size_t)k);
      return k;
    }
    if (k == 0) return 0;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -2;
    return -1;
  }
}

// The largest control frame a peer may announce.  Legitimate frames are far smaller (requests
// carry at most the inline threshold of data each); a larger length means bytes that are not
// fuse's framing, and waiting for them to complete would wait for up to 4 GiB forever.
constexpr uint32_t kMaxFrameBytes = 1u << 30;

// Pop one complete frame from `inbox` into `out`: 1, or 0 if none is complete yet, or -1 if
// the next frame announces more than kMaxFrameBytes (its length is left in `out`'s place:
// see frame_length).
inline int pop_frame(std::string& inbox, std::string& out) {
  if (inbox.size() < 4) return 0;
  uint32_t n;
  std::memcpy(&n, inbox.data(), 4);
  if (n > kMaxFrameBytes) return -1;
  if (inbox.size() < 4 + (size_t)n) return 0;
  out.assign(inbox, 4, n);
  inbox.erase(0, 4 + (size_t)n);
  return 1;
}

// The length the next frame in `inbox` announces (at least 4 bytes there).
inline uint32_t frame_length(const std::string& inbox) {
  uint32_t n;
  std::memcpy(&n, inbox.data(), 4);
  return n;
}

inline int wake_fd_new() { return ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
inline void wake_fd_signal(int fd) {
  uint64_t one = 1;
  ssize_t r = ::write(fd, &one, sizeof one);
  (void)r;
}
inline void wake_fd_drain(int fd) {
  uint64_t v;
  ssize_t r = ::read(fd, &v, sizeof v);
  (void)r;
}

// ---- arithmetic on buffers (conversions, kernels and scale_buffer live in fuse_dtypes.h) ----
// dst = dst (op) src, elementwise.  Returns 0, or -1 for an unknown dtype or op.
inline int reduce_into(void* dst, const void* src, size_t count, int dtype, int op) {
  ReduceFn fn = reduce_kernel(dtype, op);
  if (fn == nullptr) return -1;
  fn(dst, dst, src, count);
  return 0;
}

// A large output that is about to be written for the first time (a fresh allocation of
// allgather, alltoall or reduce-scatter): ask for transparent huge pages where the kernel grants
// them on request only (transparent_hugepage=madvise).  Its pages are otherwise faulted in 4 KiB
// at a time as the collective writes them: writing a fresh 64 MiB took 50-69 ms, with huge
// pages 18 ms (2-core VM).  Only whole 2 MiB pages inside the buffer; a no-op elsewhere.
inline void advise_huge_pages(void* p, size_t nbytes) {
#ifdef MADV_HUGEPAGE
  const uintptr_t huge = uintptr_t(2) << 20;
  if (p == nullptr || nbytes < 4 * huge) return;
  uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
  uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + nbytes) & ~(huge - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#endif
}

// ---- the wire: little-endian scalars and length-prefixed strings appended to a std::string ----
template <typename T>
inline void put(std::string& out, T v) { out.append((const char*)&v, sizeof v); }
inline void put_str(std::string& out, const std::string& s) {
  put<uint32_t>(out, (uint32_t)s.size());
  out.append(s);
}

struct Reader {
  const std::string* s;
  size_t pos;
  bool bad;
};
inline Reader reader_new(const std::string& s) { return Reader{&s, 0, false}; }
template <typename T>
inline T get(Reader& r) {
  T v{};
  if (r.bad || r.pos + sizeof v > r.s->size()) { r.bad = true; return v; }
  std::memcpy(&v, r.s->data() + r.pos, sizeof v);
  r.pos += sizeof v;
  return v;
}
inline std::string get_str(Reader& r) {
  uint32_t n = get<uint32_t>(r);
  if (r.bad || r.pos + n > r.s->size()) { r.bad = true; return std::string(); }
  std::string v = r.s->substr(r.pos, n);
  r.pos += n;
  return v;
}
inline bool reader_done(const Reader& r) { return r.pos >= r.s->size(); }

// ---- a collective's signature: the fields a Request and a Response share (protocol.pxd) ----
// copied between them, and written and read at the head of each on the wire
template <typename To, typename From>
inline void copy_signature(To& to, const From& from) {
  to.kind = from.kind;
  to.dtype = from.dtype;
  to.op = from.op;
  to.pset = from.pset;
  to.root = from.root;
  to.prescale = from.prescale;
  to.postscale = from.postscale;
  to.on_device = from.on_device;
}
template <typename T>
inline void put_signature(std::string& out, const T& r) {
  put<uint8_t>(out, (uint8_t)r.kind);
  put<uint8_t>(out, (uint8_t)r.dtype);
  put<uint8_t>(out, (uint8_t)r.op);
  put<int>(out, r.pset);
  put<int>(out, r.root);
  put<double>(out, r.prescale);
  put<double>(out, r.postscale);
}
template <typename T>
inline void get_signature(Reader& rd, T& r) {
  r.kind = get<uint8_t>(rd);
  r.dtype = get<uint8_t>(rd);
  r.op = get<uint8_t>(rd);
  r.pset = get<int>(rd);
  r.root = get<int>(rd);
  r.prescale = get<double>(rd);
  r.postscale = get<double>(rd);
}

}  // namespace fuse
