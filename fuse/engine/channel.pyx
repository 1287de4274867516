# cython: language_level=3
# distutils: language = c++
"""The control channel's transport: the sockets between rank 0 and every worker.

Rank 0 holds a socket per worker; a worker holds one, to rank 0.  Frames are length-prefixed
(csrc/core_support.h): requests, goodbyes and failure notices go up, the coordinator's
response stream and its notices come down.  This module moves frames and knows which peers are
still there; what a frame means is the loop's business (engine/loop.pyx).

It also holds what the idle engine thread sleeps on: an epoll set of the sockets plus an
eventfd that any thread signals when there is work (csrc/idle_wait.h).

When every rank is on one host, frames travel through a mailbox per worker instead: a pair of
rings in a segment rank 0 and that worker both map (csrc/mailbox.h, fuse/engine/mailbox.py).
The socket then carries only doorbells for a sleeping reader and frames too large for a ring;
it still wakes the idle engine thread, and its closing is still how a peer's exit is seen.
"""

from posix.unistd cimport close as c_close
from libc.stdint cimport uintptr_t

from libc.stdint cimport uint32_t
from libc.errno cimport errno, ETIMEDOUT

from fuse.engine.protocol cimport _int_str
from fuse.engine.csupport cimport (send_frame, recv_some, pop_frame, frame_length, kMaxFrameBytes,
                             wake_fd_new, wake_fd_signal)

cdef extern from "idle_wait.h" namespace "fuse" nogil:
    IdleWait* idle_new(int wake_fd)
    void idle_free(IdleWait*)
    bint idle_add_socket(IdleWait*, int fd)
    void idle_wait(IdleWait*, int timeout_ms)
    void idle_mute_sockets(IdleWait*, bint mute)

cdef extern from "mailbox.h" namespace "fuse" nogil:
    Mailbox* mail_new(void* base, bint worker)
    void mail_free(Mailbox*)
    ctypedef cbool (*PeerRead)(void* ctx)
    int mail_send(Mailbox*, int fd, const string& payload, PeerRead read, void* ctx)
    int send_frame_reading "fuse::send_frame"(int fd, const string& payload, PeerRead read,
                                              void* ctx)
    cppclass PeerIntake:
        int fd
        Mailbox* m
        string* inbox
        cbool took
        cbool timed_out
    cbool peer_intake(void* ctx)
    int mail_drain(Mailbox*, string& inbox)
    bint mail_check_socket(Mailbox*)
    bint mail_prepare_sleep(Mailbox*)
    void mail_polling(Mailbox*)
    void mail_after_sleep(Mailbox*)
    bint mail_pending(Mailbox*)
    bint mail_is_corrupt "fuse::mail_corrupt"(Mailbox*)
    MailMute* mail_mute_new()
    void mail_mute_free(MailMute*)
    bint mail_mute_set(MailMute*, bint mute)
    bint mail_mute_before_sleep(MailMute*)
    bint mail_mute_epoll(MailMute*, bint mute)
    void mail_mute_after_sleep(MailMute*)
    const unsigned long long kMailSegmentBytes
    const unsigned int kMailInlineMax
    const unsigned long long kMailRingStride
    const unsigned long long kMailHeadOffset

MAILBOX_SEGMENT_BYTES = kMailSegmentBytes
# where, in a worker's segment, rank 0's ring to it starts, and its head in a ring's header
MAILBOX_RING_STRIDE = kMailRingStride
MAILBOX_HEAD_OFFSET = kMailHeadOffset


cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int c_poll "poll"(pollfd*, unsigned long, int)
    enum: POLLIN


cdef class ControlChannel:
    """The sockets of one rank's end of the control channel.

    Args:
        rank: this rank.
        coordinator_fd: a worker's connected socket to rank 0; -1 on rank 0.
        worker_fds: rank 0 only: a socket per rank (index 0 unused: -1).
    """

    def __cinit__(self):
        self.wake_fd = -1
        self.idle = NULL
        self.mail_mute = mail_mute_new()

    def __init__(self, int rank, int coordinator_fd, worker_fds):
        cdef int fd
        cdef int live
        self.rank = rank
        for fd in ([coordinator_fd] if rank != 0 else list(worker_fds)):
            # (a typed local: Cython passes a conditional expression to push_back by a
            # reference to a temporary that is already gone)
            live = PEER_LIVE if fd >= 0 else PEER_GONE
            self.fds.push_back(fd)
            self.inbox.push_back(string(b""))
            self.state.push_back(live)
            self.unanswered.push_back(False)
            self.mail.push_back(NULL)
        self.wake_fd = wake_fd_new()
        self.idle = idle_new(self.wake_fd)
        if self.idle == NULL:
            raise OSError("fuse: cannot create the engine's epoll descriptors")
        for fd in self.fds:
            if fd >= 0 and not idle_add_socket(self.idle, fd):
                raise OSError(f"fuse: cannot watch control socket {fd}")

    def __dealloc__(self):
        cdef size_t i
        for i in range(self.mail.size()):
            mail_free(self.mail[i])
        mail_mute_free(self.mail_mute)
        idle_free(self.idle)
        if self.wake_fd >= 0:
            c_close(self.wake_fd)
        for i in range(self.fds.size()):
            if self.fds[i] >= 0:
                c_close(self.fds[i])

    def use_mailboxes(self, segments):
        """Send and receive through same-host mailboxes (fuse.engine.mailbox.connect): rank 0
        passes a segment per rank (index 0 unused: None), a worker its own segment.  Called
        once, before the loop runs."""
        cdef unsigned char[::1] view
        cdef size_t peer
        views = []
        for peer, segment in enumerate(segments if self.rank == 0 else [segments]):
            if segment is None or peer >= self.mail.size() or self.fds[peer] < 0:
                continue
            view = segment
            if <size_t>view.shape[0] < kMailSegmentBytes:
                raise ValueError(f"fuse: a mailbox segment of {view.shape[0]} bytes "
                                 f"(needs {kMailSegmentBytes})")
            views.append(view)
            self.mail[peer] = mail_new(<void*>&view[0], self.rank != 0)
        self.mail_views = views
        self.all_mail = all(self.mail[i] != NULL or self.fds[i] < 0
                            for i in range(self.mail.size())) and len(views) > 0

    @property
    def mailboxes(self):
        """How many peers this rank reaches through a mailbox."""
        return sum(1 for i in range(self.mail.size()) if self.mail[i] != NULL)

    @property
    def mailbox_segments(self):
        """The mapped mailbox segments (writable views), in peer order."""
        return list(self.mail_views or [])

    def set_hosts(self, names):
        """Every rank's host name, by rank: what messages about a peer name it with (who)."""
        self.hosts.clear()
        for name in names:
            self.hosts.push_back(str(name).encode(errors="replace"))

    cdef string who(self, int rank) noexcept nogil:
        """``rank R (host H)``, or ``rank R`` when the host is not known."""
        cdef string out = string(b"rank ") + _int_str(rank)
        if 0 <= rank < <int>self.hosts.size() and self.hosts[rank].size():
            out.append(b" (host ")
            out.append(self.hosts[rank])
            out.append(b")")
        return out

    # ---- reading (whoever holds the loop)

    cdef bint readable(self, int peer) noexcept nogil:
        """Whether ``peer``'s connection is open (it may have nothing to read)."""
        return self.fds[peer] >= 0 and self.state[peer] != PEER_GONE

    cdef bint receive(self, int peer) noexcept nogil:
        """Read what ``peer`` sent, without blocking, into its inbox (see next_frame).  False
        when its connection closed or failed: call close() once its frames are handled."""
        cdef Mailbox* m = self.mail[peer]
        cdef ssize_t n
        if m != NULL:
            # the ring first, the socket (doorbells, spilled frames, the peer's exit) now and
            # then, and the ring again after it: frames published before the peer exited are
            # all read before its connection counts as closed
            if mail_drain(m, self.inbox[peer]) != 0 or not mail_check_socket(m):
                return True
            n = recv_some(self.fds[peer], m.sock_inbox)
            mail_drain(m, self.inbox[peer])
        else:
            n = recv_some(self.fds[peer], self.inbox[peer])
        if n == -1 and errno == ETIMEDOUT:
            self.unanswered[peer] = True
        return not (n == 0 or n == -1)

    cdef bint stopped_answering(self, int peer) noexcept nogil:
        """Whether ``peer``'s connection failed because the peer stopped answering (its host
        is unreachable or down: see fuse.worker.control_handshake.watch_peer), rather than
        closing or resetting it."""
        return self.unanswered[peer]

    cdef int next_frame(self, int peer, string& frame) noexcept nogil:
        """Take the next whole frame ``peer`` sent: 1, or 0 when there is none, or -1 when
        what it sent is not fuse's framing (a frame longer than the limit, or a mailbox holding
        what no fuse process writes; see bad_framing)."""
        cdef int got = pop_frame(self.inbox[peer], frame)
        if got == 0 and self.mail_corrupt(peer):
            return -1
        return got

    cdef bint mail_corrupt(self, int peer) noexcept nogil:
        """Whether ``peer``'s mailbox held a value no fuse process writes there."""
        return self.mail[peer] != NULL and mail_is_corrupt(self.mail[peer])

    cdef string bad_framing(self, int peer) noexcept nogil:
        """Why ``peer``'s bytes are refused, after next_frame returned -1."""
        if self.mail_corrupt(peer):
            return (string(b"shares a shared-memory mailbox (the same-host control channel) "
                           b"with rank ") + _int_str(self.rank) +
                    string(b" that holds a length or position no fuse process writes there: "
                           b"another process wrote into it, or a bug (FUSE_MAILBOX=0 keeps the "
                           b"control channel on its sockets)"))
        return (string(b"sent a control frame announcing ") + _int_str(frame_length(self.inbox[peer])) +
                string(b" bytes, more than the limit of ") + _int_str(kMaxFrameBytes) +
                string(b": its bytes are not fuse's framing (a bug, or not a fuse process)"))

    cdef int close(self, int peer) noexcept nogil:
        """Close ``peer``'s connection; returns the PeerState it had."""
        cdef int was = self.state[peer]
        if self.fds[peer] >= 0:
            c_close(self.fds[peer])
        self.fds[peer] = -1
        self.state[peer] = PEER_GONE
        return was

    cdef void mark_leaving(self, int peer) noexcept nogil:
        self.state[peer] = PEER_LEAVING

    cdef bint rank_gone(self, int rank) noexcept nogil:
        """Whether worker ``rank`` said goodbye, exited or died (rank 0)."""
        return self.state[rank] != PEER_LIVE

    cdef bint next_local(self, string& frame) noexcept nogil:
        """Rank 0: take the next frame its coordinator sent to rank 0 itself."""
        if self.local_frames.size() == 0:
            return False
        frame = self.local_frames.front()
        self.local_frames.pop_front()
        return True

    cdef bint poll_open(self, int timeout_ms) noexcept nogil:
        """Wait up to ``timeout_ms`` for any open connection to be readable (or to close).
        False at once when no connection is open."""
        cdef vector[pollfd] fds
        cdef pollfd p
        cdef size_t i
        p.events = POLLIN
        p.revents = 0
        for i in range(self.mail.size()):
            if self.mail[i] != NULL and self.readable(<int>i) and mail_pending(self.mail[i]):
                return True
        for i in range(self.fds.size()):
            if self.readable(<int>i):
                p.fd = self.fds[i]
                fds.push_back(p)
        if fds.size() == 0:
            return False
        c_poll(fds.data(), fds.size(), timeout_ms)
        return True

    # ---- sending (a failed send shows up as EOF on the next read)

    # ``holder``: the calling thread holds the loop, so while the peer's socket (or ring) is
    # full it reads what the peer sent into its inbox (see send_all in csrc/core_support.h);
    # other threads (a failure, a shutdown) send without reading.

    cdef void send_to(self, int rank, const string& frame, bint holder=True) noexcept nogil:
        """Rank 0: a frame to ``rank`` if it is still there (to rank 0 itself: next_local)."""
        if rank == 0:
            self.local_frames.push_back(frame)
        elif self.fds[rank] >= 0 and self.state[rank] == PEER_LIVE:
            self._send(rank, frame, holder)

    cdef void send_all(self, const string& frame, int skip, bint holder=True) noexcept nogil:
        """Rank 0: a frame to every worker still there but ``skip`` (-1: none)."""
        cdef size_t i
        for i in range(1, self.fds.size()):
            if self.fds[i] >= 0 and self.state[i] == PEER_LIVE and <int>i != skip:
                self._send(<int>i, frame, holder)

    cdef int send_up(self, const string& frame, bint holder=True) noexcept nogil:
        """A worker: a frame to rank 0.  Non-zero when it could not be sent."""
        if self.rank == 0 or self.fds[0] < 0:
            return -1
        return self._send(0, frame, holder)

    cdef int _send(self, int peer, const string& frame, bint holder) noexcept nogil:
        cdef int failed
        cdef PeerIntake intake
        cdef PeerRead read = NULL
        if holder:
            read = peer_intake
        intake.fd = self.fds[peer]
        intake.m = self.mail[peer]
        intake.inbox = &self.inbox[peer]
        if self.mail[peer] != NULL:
            failed = mail_send(self.mail[peer], self.fds[peer], frame, read, &intake)
            if failed and mail_is_corrupt(self.mail[peer]):
                self.wake()     # the loop's next read of this peer fails the job (next_frame)
        else:
            failed = send_frame_reading(self.fds[peer], frame, read, &intake)
        if intake.timed_out:
            self.unanswered[peer] = True
        if intake.took:
            self.wake()         # frames read meanwhile: the loop looks before it sleeps
        return failed

    # ---- sleeping and waking

    cdef void sleep(self, int timeout_ms) noexcept nogil:
        """Sleep until a socket is readable, wake() is called or ``timeout_ms`` passes (-1:
        no limit).  Muted sockets do not wake it.  Unless muted, it first asks every mailbox's
        writer for a doorbell, and does not sleep if a frame is already there."""
        cdef size_t i
        cdef bint waiting = False
        cdef bint watched = not self.muted
        cdef bint mute
        if self.all_mail:
            mute = mail_mute_before_sleep(self.mail_mute)
            if mail_mute_epoll(self.mail_mute, mute):
                idle_mute_sockets(self.idle, mute)
            watched = not mute
        if watched:
            for i in range(self.mail.size()):
                if self.mail[i] != NULL and mail_prepare_sleep(self.mail[i]):
                    waiting = True
        if not waiting:
            idle_wait(self.idle, timeout_ms)
        # whatever woke it (a doorbell, a peer's exit), the next receive reads the sockets
        for i in range(self.mail.size()):
            if self.mail[i] != NULL:
                mail_after_sleep(self.mail[i])
        if self.all_mail:
            mail_mute_after_sleep(self.mail_mute)

    cdef void mute(self, bint mute) noexcept nogil:
        """Whether readable sockets wake the sleeper: muted while another thread drives the
        loop (see csrc/idle_wait.h).  The mailboxes follow: a driving thread polls them, so
        their writers ring no doorbells; once unmuted, a frame that came meanwhile wakes the
        engine thread, and later ones ring.  When every peer has a mailbox, no system call
        mutes the sockets: see MailMute in csrc/mailbox.h."""
        cdef size_t i
        cdef bint waiting = False
        self.muted = mute
        if self.all_mail:       # the sleeper mutes itself (csrc/mailbox.h: MailMute)
            waiting = mail_mute_set(self.mail_mute, mute)
        else:
            idle_mute_sockets(self.idle, mute)
        for i in range(self.mail.size()):
            if self.mail[i] == NULL:
                continue
            if mute:
                mail_polling(self.mail[i])
            elif mail_prepare_sleep(self.mail[i]):
                waiting = True
        if waiting:
            wake_fd_signal(self.wake_fd)

    cdef void wake(self) noexcept nogil:
        """Wake the sleeper (any thread)."""
        wake_fd_signal(self.wake_fd)


def split_frames(bytes data):
    """The frames in ``data`` as the control channel reads them: (frames, the unfinished rest).
    Raises ValueError for bytes that are not fuse's framing.  For tests of the decoder."""
    cdef string inbox = data
    cdef string frame
    cdef int got
    frames = []
    while True:
        got = pop_frame(inbox, frame)
        if got == 0:
            return frames, bytes(inbox)
        if got < 0:
            raise ValueError(f"a frame announcing {frame_length(inbox)} bytes "
                             f"(limit {kMaxFrameBytes})")
        frames.append(bytes(frame))
