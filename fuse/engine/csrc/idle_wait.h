// How an idle engine thread sleeps, and how a thread that drives the engine loop in its place
// (Loop.drive in fuse/engine/loop.pyx) keeps it asleep.
//
// The engine thread sleeps in epoll_wait on two things: its wake-up eventfd (work queued,
// shutdown, failure) and a second epoll set holding the control channel's sockets.  While
// another thread drives, it mutes that inner set in the outer one: the messages it is about to
// read itself no longer wake the engine thread, which would only wait for the loop and then
// find nothing to do (two wake-ups per message, on a core the ranks need).  Unmuting reports
// whatever arrived meanwhile and was not read, so nothing is missed.  Sockets leave the inner
// set when closed.
#pragma once

#include <stdint.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core_support.h"

namespace fuse {

struct IdleWait {
  int outer = -1;    // wake eventfd, `sockets`
  int sockets = -1;  // the control channel's sockets
  int wake = -1;     // owned by the engine
};

inline bool idle_watch(int ep, int fd, uint32_t events) {
  struct epoll_event ev = {};
  ev.events = events;
  ev.data.fd = fd;
  return ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0;
}

// nullptr if the kernel refuses an epoll descriptor
inline IdleWait* idle_new(int wake_fd) {
  IdleWait* w = new IdleWait();
  w->wake = wake_fd;
  w->outer = ::epoll_create1(EPOLL_CLOEXEC);
  w->sockets = ::epoll_create1(EPOLL_CLOEXEC);
  if (w->outer < 0 || w->sockets < 0 || !idle_watch(w->outer, wake_fd, EPOLLIN) ||
      !idle_watch(w->outer, w->sockets, EPOLLIN)) {
    for (int fd : {w->outer, w->sockets})
      if (fd >= 0) ::close(fd);
    delete w;
    return nullptr;
  }
  return w;
}

inline void idle_free(IdleWait* w) {
  if (w == nullptr) return;
  ::close(w->outer);
  ::close(w->sockets);
  delete w;
}

inline bool idle_add_socket(IdleWait* w, int fd) { return idle_watch(w->sockets, fd, EPOLLIN); }

// Sleep until something is ready or `timeout_ms` passes (-1: no limit); clears the eventfd
// if it was signalled.
inline void idle_wait(IdleWait* w, int timeout_ms) {
  struct epoll_event evs[2];
  int n = ::epoll_wait(w->outer, evs, 2, timeout_ms);
  for (int i = 0; i < n; ++i)
    if (evs[i].data.fd == w->wake) wake_fd_drain(w->wake);
}

inline void idle_mute_sockets(IdleWait* w, bool mute) {
  struct epoll_event ev = {};
  ev.events = mute ? 0 : EPOLLIN;
  ev.data.fd = w->sockets;
  ::epoll_ctl(w->outer, EPOLL_CTL_MOD, w->sockets, &ev);
}

}  // namespace fuse
