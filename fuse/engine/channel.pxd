# The control channel's transport (see channel.pyx).
from libcpp.deque cimport deque
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp cimport bool as cbool

cdef extern from "idle_wait.h" namespace "fuse" nogil:
    cppclass IdleWait:
        pass

cdef extern from "mailbox.h" namespace "fuse" nogil:
    cppclass Mailbox:
        string sock_inbox               # the socket's bytes (doorbells, spilled frames)
    cppclass MailMute:
        pass

# A peer's connection, as this rank sees it (ControlChannel.state)
cdef enum PeerState:
    PEER_LIVE = 0       # connected and taking part
    PEER_LEAVING = 1    # said goodbye (MSG_BYE): its connection closing next is a clean exit
    PEER_GONE = 2       # its connection is closed


cdef class ControlChannel:
    # Peers are indexed by rank: rank 0 has a socket per worker (index 0 unused, -1); a worker
    # has one socket, to rank 0, at index 0.
    # Read, closed and (apart from the send_* methods) used only by whoever holds the engine's
    # loop (Engine.loop_lock).  The send_* methods are also called by Python threads failing or
    # shutting down (Engine.abort, Engine._finish_shutdown) while the loop may be running: they
    # pass holder=False, so that they do not read into the inboxes.
    cdef int rank
    cdef vector[int] fds                # per peer: its socket, -1 once closed
    cdef vector[string] inbox           # per peer: bytes received that are not a whole frame yet
    cdef vector[int] state              # per peer: a PeerState
    cdef vector[cbool] unanswered       # per peer: its connection failed for want of answers
                                        # (the keep-alive probes or sent data went unacknowledged)
    cdef vector[string] hosts           # per rank: its host name (set_hosts; empty: unknown)
    cdef deque[string] local_frames     # rank 0: frames from its coordinator to itself
    cdef int wake_fd                    # eventfd: any thread signals work (wake)
    cdef IdleWait* idle                 # what the idle engine thread sleeps on (sleep)
    cdef vector[Mailbox*] mail          # per peer: its same-host mailbox, or NULL (the socket)
    cdef object mail_views              # the mapped segments the mailboxes point into
    cdef bint muted                     # another thread drives the loop (mute)
    cdef bint all_mail                  # every peer is reached through a mailbox
    cdef MailMute* mail_mute            # the sleeper's muting then (csrc/mailbox.h)

    cdef bint readable(self, int peer) noexcept nogil
    cdef bint receive(self, int peer) noexcept nogil
    cdef int next_frame(self, int peer, string& frame) noexcept nogil
    cdef string bad_framing(self, int peer) noexcept nogil
    cdef int close(self, int peer) noexcept nogil
    cdef void mark_leaving(self, int peer) noexcept nogil
    cdef bint rank_gone(self, int rank) noexcept nogil
    cdef bint stopped_answering(self, int peer) noexcept nogil
    cdef string who(self, int rank) noexcept nogil
    cdef void send_to(self, int rank, const string& frame, bint holder=*) noexcept nogil
    cdef void send_all(self, const string& frame, int skip, bint holder=*) noexcept nogil
    cdef int send_up(self, const string& frame, bint holder=*) noexcept nogil
    cdef int _send(self, int peer, const string& frame, bint holder) noexcept nogil
    cdef bint mail_corrupt(self, int peer) noexcept nogil
    cdef bint next_local(self, string& frame) noexcept nogil
    cdef bint poll_open(self, int timeout_ms) noexcept nogil
    cdef void sleep(self, int timeout_ms) noexcept nogil
    cdef void mute(self, bint mute) noexcept nogil
    cdef void wake(self) noexcept nogil
