// The control channel's same-host mailbox: frames between rank 0 and one worker through a
// pair of single-producer/single-consumer rings in a shared segment, instead of the socket.
//
// Why: over loopback TCP a negotiation round trip costs about 9 us of system calls and
// wake-ups before the engine does anything; through memory both processes map it costs well
// under 1 us (bench/results/studies/mpi_small.md).  The socket stays open and keeps its other
// jobs: the idle engine thread still sleeps in epoll on it, and a peer that dies still closes
// it.  Only three kinds of bytes travel on it once a mailbox is in use:
//   * doorbells (empty frames): a consumer about to sleep sets `sleeping` in its ring, and the
//     producer that then publishes a frame also writes a doorbell, which wakes it;
//   * frames too large for the ring (over kMailInlineMax): the ring gets a spill record in
//     the frame's place, and the consumer takes the socket's next non-empty frame there, so
//     the order of frames is the order they were sent in;
//   * nothing else: the stream closing is, as before, the peer's exit.
//
// The rings' indices count bytes from the start and are never reset.  The producer keeps its
// own copy of the tail and the consumer its own copy of the head, so neither trusts a value it
// reads back from shared memory for its own side; what it reads of the other side (the
// consumer's head, the producer's tail and every record's length) is bounds-checked, and a
// value that cannot be true marks the mailbox corrupt: the job fails with a message saying so
// instead of reading or writing outside the ring.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <string>

#include "core_support.h"

namespace fuse {

constexpr uint64_t kMailRingBytes = 256 * 1024;          // data bytes per direction
constexpr uint32_t kMailInlineMax = kMailRingBytes / 4;  // larger frames go over the socket
constexpr uint32_t kMailSpill = 0xFFFFFFFFu;             // record: "this frame is on the socket"

// One direction's ring header, in shared memory (each field its own cache line).
struct MailRingHeader {
  alignas(64) uint64_t tail;      // written by the producer: bytes published so far
  alignas(64) uint64_t head;      // written by the consumer: bytes consumed so far
  alignas(64) uint32_t sleeping;  // set by a consumer that may sleep: doorbell wanted
};
static_assert(sizeof(MailRingHeader) == 192, "ring header layout");
constexpr uint64_t kMailHeadOffset = offsetof(MailRingHeader, head);

constexpr uint64_t kMailRingStride = sizeof(MailRingHeader) + kMailRingBytes;
// A worker's segment: its ring to rank 0, then rank 0's ring to it.
constexpr uint64_t kMailSegmentBytes = 2 * kMailRingStride;

struct MailRing {
  MailRingHeader* h = nullptr;
  unsigned char* data = nullptr;
};

// One peer's pair of rings as this process sees them (process-local state).
struct Mailbox {
  MailRing out, in;
  std::mutex send_lock;              // the engine's send_* may be called from several threads
  uint64_t out_tail = 0;             // our copy of out.h->tail (under send_lock)
  uint64_t in_head = 0;              // our copy of in.h->head (whoever holds the loop)
  uint64_t in_seen = 0;              // in_head for the sleeping thread (atomic access)
  bool awaiting_spill = false;       // a spill record was taken: the next frame is the socket's
  std::atomic<bool> woke{true};      // read the socket at the next receive (set by the sleeper)
  unsigned polls = 0;                // receives since the socket was last read
  std::atomic<bool> corrupt_out{false};  // the ring we write held an impossible value
  std::atomic<bool> corrupt_in{false};   // the ring we read held an impossible value
  std::string sock_inbox;            // socket bytes not handled yet
};

// `base`: the worker's segment (kMailSegmentBytes, zeroed when made); `worker`: whether this
// process is the worker (else rank 0).
inline Mailbox* mail_new(void* base, bool worker) {
  Mailbox* m = new Mailbox();
  unsigned char* up = static_cast<unsigned char*>(base);
  unsigned char* down = up + kMailRingStride;
  MailRing r_up{reinterpret_cast<MailRingHeader*>(up), up + sizeof(MailRingHeader)};
  MailRing r_down{reinterpret_cast<MailRingHeader*>(down), down + sizeof(MailRingHeader)};
  m->out = worker ? r_up : r_down;
  m->in = worker ? r_down : r_up;
  return m;
}

inline void mail_free(Mailbox* m) { delete m; }

inline void mail_ring_write(const MailRing& r, uint64_t pos, const void* src, size_t n) {
  size_t off = (size_t)(pos % kMailRingBytes);
  size_t first = n < kMailRingBytes - off ? n : (size_t)(kMailRingBytes - off);
  memcpy(r.data + off, src, first);
  memcpy(r.data, static_cast<const char*>(src) + first, n - first);
}

inline void mail_ring_read(const MailRing& r, uint64_t pos, void* dst, size_t n) {
  size_t off = (size_t)(pos % kMailRingBytes);
  size_t first = n < kMailRingBytes - off ? n : (size_t)(kMailRingBytes - off);
  memcpy(dst, r.data + off, first);
  memcpy(static_cast<char*>(dst) + first, r.data, n - first);
}

inline int mail_doorbell(int fd, PeerRead read = nullptr, void* ctx = nullptr) {
  return send_frame(fd, std::string(), read, ctx);
}

// Send one frame to the peer (`fd`: its socket).  0, or -1 when it could not be sent (the
// socket failed: the peer is gone; or the mailbox is corrupt).  Waits only while the ring is
// full, ringing the doorbell so that the consumer drains it; a dead consumer fails the socket.
// `read` (see send_all): what the peer sent is read meanwhile, so that two sides filling their
// rings (or sockets) towards each other at once do not wait for each other forever.
inline int mail_send(Mailbox* m, int fd, const std::string& payload, PeerRead read = nullptr,
                     void* ctx = nullptr) {
  std::lock_guard<std::mutex> hold(m->send_lock);
  if (m->corrupt_out.load(std::memory_order_relaxed)) return -1;
  uint32_t n = (uint32_t)payload.size();
  bool spill = payload.size() > kMailInlineMax;
  uint64_t need = spill ? 4 : 4 + (uint64_t)n;
  for (unsigned waited = 0;; ++waited) {
    uint64_t head = __atomic_load_n(&m->out.h->head, __ATOMIC_ACQUIRE);
    uint64_t used = m->out_tail - head;
    // the consumer's head past our tail or far behind it, or our tail not as we left it
    if (used > kMailRingBytes ||
        __atomic_load_n(&m->out.h->tail, __ATOMIC_RELAXED) != m->out_tail) {
      m->corrupt_out.store(true);
      return -1;
    }
    if (kMailRingBytes - used >= need) break;
    if (waited % 64 == 0 && mail_doorbell(fd, read, ctx) != 0) return -1;
    if (read) read(ctx);
    struct timespec pause = {0, 20000};
    nanosleep(&pause, nullptr);
  }
  uint32_t word = spill ? kMailSpill : n;
  mail_ring_write(m->out, m->out_tail, &word, 4);
  if (!spill && n) mail_ring_write(m->out, m->out_tail + 4, payload.data(), n);
  m->out_tail += need;
  __atomic_store_n(&m->out.h->tail, m->out_tail, __ATOMIC_RELEASE);
  if (spill && send_frame(fd, payload, read, ctx) != 0) return -1;
  // Pairs with mail_prepare_sleep: either the consumer sees this frame before it sleeps, or
  // this sees its flag and rings.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&m->out.h->sleeping, __ATOMIC_RELAXED) &&
      __atomic_exchange_n(&m->out.h->sleeping, 0u, __ATOMIC_SEQ_CST))
    return mail_doorbell(fd, read, ctx);
  return 0;
}

// Move every whole frame the peer published into `inbox`, length-prefixed as on the socket
// (pop_frame takes them from there), taking spilled frames from `sock_inbox` in their place.
// 0, or -1 when the ring holds what no fuse producer writes (see mail_corrupt).
inline int mail_drain(Mailbox* m, std::string& inbox) {
  if (m->corrupt_in.load(std::memory_order_relaxed)) return -1;
  if (__atomic_load_n(&m->in.h->head, __ATOMIC_RELAXED) != m->in_head) {  // not as we left it
    m->corrupt_in.store(true);
    return -1;
  }
  uint64_t start = m->in_head;
  std::string frame;
  for (;;) {
    if (m->awaiting_spill) {
      int got;
      while ((got = pop_frame(m->sock_inbox, frame)) == 1 && frame.empty()) {
      }
      if (got < 0) {
        m->corrupt_in.store(true);
        return -1;
      }
      if (got == 0) break;  // not here yet
      uint32_t n = (uint32_t)frame.size();
      inbox.append(reinterpret_cast<const char*>(&n), 4);
      inbox.append(frame);
      m->awaiting_spill = false;
      continue;
    }
    uint64_t tail = __atomic_load_n(&m->in.h->tail, __ATOMIC_ACQUIRE);
    uint64_t avail = tail - m->in_head;
    if (avail == 0) break;
    uint32_t n = 0;
    if (avail > kMailRingBytes || avail < 4) {
      m->corrupt_in.store(true);
      return -1;
    }
    mail_ring_read(m->in, m->in_head, &n, 4);
    if (n == kMailSpill) {
      m->in_head += 4;
      m->awaiting_spill = true;
      continue;
    }
    if (n > kMailInlineMax || 4 + (uint64_t)n > avail) {
      m->corrupt_in.store(true);
      return -1;
    }
    size_t at = inbox.size();
    inbox.resize(at + 4 + n);
    memcpy(&inbox[at], &n, 4);
    if (n) mail_ring_read(m->in, m->in_head + 4, &inbox[at + 4], n);
    m->in_head += 4 + (uint64_t)n;
  }
  if (m->in_head != start) {
    __atomic_store_n(&m->in.h->head, m->in_head, __ATOMIC_RELEASE);
    __atomic_store_n(&m->in_seen, m->in_head, __ATOMIC_RELEASE);
  }
  if (!m->awaiting_spill) {  // doorbells: nothing to deliver
    while (m->sock_inbox.size() >= 4 && frame_length(m->sock_inbox) == 0) m->sock_inbox.erase(0, 4);
  }
  return 0;
}

// What a thread that holds the engine's loop reads from a peer while it waits to send to it
// (PeerRead for send_all and mail_send): the socket into the peer's inbox, or with a mailbox
// the socket into sock_inbox and the ring into the inbox.  `took`: the inbox may hold new
// frames, so the loop must look before it sleeps (nothing wakes it for bytes already read).
struct PeerIntake {
  int fd = -1;
  Mailbox* m = nullptr;
  std::string* inbox = nullptr;
  bool took = false;
  bool timed_out = false;  // the socket failed for want of answers (ETIMEDOUT)
  bool closed = false;     // the socket's end or error was read: read it no more
};

inline bool peer_intake(void* ctx) {
  PeerIntake* in = static_cast<PeerIntake*>(ctx);
  if (!in->closed) {
    ssize_t got = recv_some(in->fd, in->m ? in->m->sock_inbox : *in->inbox);
    if (got == 0 || got == -1) {
      in->timed_out = got == -1 && errno == ETIMEDOUT;
      in->closed = true;
    } else if (got > 0) {
      in->took = true;
    }
  }
  if (in->m) {
    size_t before = in->inbox->size();
    mail_drain(in->m, *in->inbox);
    in->took = in->took || in->inbox->size() != before;
  }
  return !in->closed;
}

// Whether the socket is to be read at this receive: always while a spilled frame is awaited
// or after the thread slept (a doorbell, or the peer's exit, woke it), otherwise one receive
// in 128, so that a thread polling the rings notices a closed socket without a system call per
// poll.
inline bool mail_check_socket(Mailbox* m) {
  if (m->awaiting_spill || m->woke.load(std::memory_order_relaxed) || (++m->polls & 127u) == 0) {
    m->woke.store(false, std::memory_order_relaxed);
    return true;
  }
  return false;
}

// The consumer may sleep: ask for a doorbell.  Returns whether a frame is already waiting (then
// it must not sleep; the flag is cleared again).
inline bool mail_prepare_sleep(Mailbox* m) {
  __atomic_store_n(&m->in.h->sleeping, 1u, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&m->in.h->tail, __ATOMIC_SEQ_CST) != __atomic_load_n(&m->in_seen, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&m->in.h->sleeping, 0u, __ATOMIC_RELAXED);
    return true;
  }
  return false;
}

// A thread is polling the rings again: no doorbells wanted.
inline void mail_polling(Mailbox* m) { __atomic_store_n(&m->in.h->sleeping, 0u, __ATOMIC_RELAXED); }

inline void mail_after_sleep(Mailbox* m) {
  mail_polling(m);
  m->woke.store(true, std::memory_order_relaxed);
}

inline bool mail_pending(Mailbox* m) {
  return __atomic_load_n(&m->in.h->tail, __ATOMIC_ACQUIRE) != __atomic_load_n(&m->in_seen, __ATOMIC_ACQUIRE);
}

inline bool mail_corrupt(Mailbox* m) {
  return m->corrupt_in.load(std::memory_order_relaxed) ||
         m->corrupt_out.load(std::memory_order_relaxed);
}

// How the engine thread's sleep is muted while another thread drives the loop, when every
// peer is reached through a mailbox (ControlChannel.mute, .sleep).  With sockets, the driving
// thread mutes them in the sleeper's epoll set itself (an epoll_ctl on the way in and one on
// the way out of every driven call).  With mailboxes the sockets carry next to nothing while a
// thread drives (no doorbells are asked for), so the epoll set is left as it is and only the
// engine thread changes it: it mutes it before sleeping again if a driver holds the loop, and
// says so (sleeping_muted), so that the driver handing the loop back wakes it.
struct MailMute {
  std::atomic<bool> muted{false};           // a thread other than the engine thread drives
  std::atomic<bool> sleeping_muted{false};  // the engine thread sleeps with its sockets muted
  bool epoll_muted = false;                 // the engine thread's epoll set is muted (its own)
};

inline MailMute* mail_mute_new() { return new MailMute(); }
inline void mail_mute_free(MailMute* q) { delete q; }

// A driver takes (true) or hands back (false) the loop.  Returns whether the engine thread
// sleeps muted and must be woken (on handing back).
inline bool mail_mute_set(MailMute* q, bool mute) {
  q->muted.store(mute, std::memory_order_seq_cst);
  return !mute && q->sleeping_muted.load(std::memory_order_seq_cst);
}

// The engine thread, about to sleep: whether its sockets are to be muted for this sleep.
// Pairs with mail_mute_set: a driver handing back either sees sleeping_muted or is seen here.
inline bool mail_mute_before_sleep(MailMute* q) {
  if (!q->muted.load(std::memory_order_seq_cst)) return false;
  q->sleeping_muted.store(true, std::memory_order_seq_cst);
  if (q->muted.load(std::memory_order_seq_cst)) return true;
  q->sleeping_muted.store(false, std::memory_order_seq_cst);
  return false;
}

// Whether the engine thread's epoll set must change to `mute` (it records the change).
inline bool mail_mute_epoll(MailMute* q, bool mute) {
  if (q->epoll_muted == mute) return false;
  q->epoll_muted = mute;
  return true;
}

inline void mail_mute_after_sleep(MailMute* q) {
  q->sleeping_muted.store(false, std::memory_order_seq_cst);
}

}  // namespace fuse
