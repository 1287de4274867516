# The engine's loop and the parts it drives (see loop.pyx).
from libc.stdint cimport int64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.engine.csupport cimport Lock, Timeline
from fuse.engine.protocol cimport Request, Response
from fuse.engine.executor cimport Executor
from fuse.engine.coordinator cimport Coordinator, CoordinatorLink
from fuse.engine.channel cimport ControlChannel
from fuse.engine.psets cimport ProcessSets
from fuse.engine.submitter cimport Submitter
from fuse.engine.handles cimport HandleTable
from fuse.engine.results cimport ResponseRunner
from fuse.engine.liveness cimport CoordinatorWatch

# how a waiting thread's drive went (Loop.drive, for Loop.adapt_spin)
cdef enum:
    DRIVE_NOT_MINE = 0      # not the caller's to drive (or the engine stopped)
    DRIVE_DONE = 1          # completed while the caller drove
    DRIVE_SPUN_OUT = 2      # the spin ran out idle first
    DRIVE_SKIPPED = 3       # a spin budget of 0: the engine thread had it


cdef class Loop(CoordinatorLink):
    # Ownership: a field marked "lock" is guarded by ``lock`` (the handle table's), one marked
    # "loop" belongs to whoever holds ``loop_lock``; unmarked ones are set in __init__ only.
    cdef int rank, size
    cdef HandleTable table              # lock: handles, the queue, the failure state
    cdef Lock* lock                     # table.lock; also guards psets
    # Whoever holds ``loop_lock`` owns the loop (iterate) and every field marked "loop" below:
    # the engine thread, a thread waiting for a lone collective while the engine thread sleeps
    # (drive), or one adding a shared region (Engine.add_shared_region).  Taken before
    # ``lock``, never after; other threads take it through take_loop and hand_back_loop.
    cdef Lock* loop_lock
    cdef double spin_s
    cdef double spin_budget             # how long drive spins now (see adapt_spin)
    cdef int spin_skipped               # waits since the budget fell to 0 (see adapt_spin)
    # callers' threads, with the GIL (see may_send_here): the request a caller last sent
    # itself, and how many lone requests from now on go to the engine thread instead
    cdef int64_t sent_here_handle
    cdef int send_here_pause
    cdef cbool backend_in_caller        # Backend.collectives_in_caller_thread
    cdef int64_t st_driven              # loop: waits that completed while their thread drove
    cdef int64_t st_sent_here           # loop: requests their caller sent (submit_here)
    cdef ControlChannel channel         # loop (its send_* and wake: any thread); the idle sleep
    cdef Submitter submitter            # loop: this rank's requests in flight, its cache slots
    cdef ProcessSets psets              # id -> process set; see engine/psets.pyx for who writes it
    cdef Coordinator coord              # loop: negotiation (only rank 0's gets requests)
    cdef Executor executor              # loop: executing responses
    cdef ResponseRunner runner          # loop: runs responses, completes this rank's handles
    cdef CoordinatorWatch watch         # loop (workers): rank 0's silence while requests wait
    cdef double peer_timeout_s          # FUSE_PEER_TIMEOUT_SECONDS (see _unanswered_text)
    cdef object log
    cdef Timeline* tl                   # the timeline's event buffer (recording on rank 0 only)
    cdef string stragglers              # lock: the coordinator's latest straggler report (body)

    cdef string straggler_frame(self) noexcept nogil
    # a caller's thread
    cdef void submit_here(self) noexcept nogil
    cdef bint may_send_here(self, int64_t handle)
    cdef int drive(self, int64_t handle) noexcept nogil
    cdef void adapt_spin(self, int drove) noexcept nogil
    cdef bint drivable(self, Request& r) noexcept nogil
    cdef bint _coordinator_only(self, Request& r) noexcept nogil
    cdef bint take_loop(self, bint block) noexcept nogil
    cdef void hand_back_loop(self, bint wake) noexcept nogil
    cdef void report_up(self, const string& msg, bint holder=*) noexcept nogil
    # the loop
    cdef void run(self) noexcept nogil
    cdef int iterate(self) noexcept nogil
    cdef int _idle_timeout_ms(self) noexcept nogil
    cdef void _submit(self, vector[Request]& batch) noexcept nogil
    cdef void _send_requests(self, const string& msg, const string& when) noexcept nogil
    cdef void _watch_coordinator(self) noexcept nogil
    cdef bint _read_control(self, bint notices_only) noexcept nogil
    cdef void _handle_coordinator_frame(self, const string& frame) noexcept nogil
    cdef bint _coordinator_step(self) noexcept nogil
    cdef void _worker_gone(self, int r) noexcept nogil
    cdef void _abort_lost(self, int who, const string& msg) noexcept nogil
    cdef str _rank0_name(self)
    cdef string _unanswered_text(self) noexcept nogil
    cdef void _ingest(self, int rank, const string& msg) noexcept nogil
    cdef void _execute(self, Response& resp) noexcept nogil
    cdef void _peer_stalled(self, const string& err) noexcept nogil
    cdef void _backend_failed(self, Response& resp, const string& err) noexcept nogil
    cdef void _await_cause(self, double seconds) noexcept nogil
