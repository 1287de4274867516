# A worker's watch on the coordinator's silence (see liveness.pyx).
from libcpp cimport bool as cbool


# What CoordinatorWatch.check asks the engine to do
cdef enum WatchVerdict:
    WATCH_QUIET = 0     # nothing to report
    WATCH_WARN = 1      # log warning_text()
    WATCH_FAIL = 2      # fail the job with failure_text() (StallError)


cdef class CoordinatorWatch:
    # Owned by whoever holds the engine's loop (Engine.loop_lock), like the channel it reads.
    cdef cbool enabled              # not FUSE_STALL_CHECK_DISABLE
    cdef double warn_s              # FUSE_STALL_CHECK_TIME_SECONDS
    cdef double fail_s              # FUSE_STALL_SHUTDOWN_TIME_SECONDS; 0: never
    cdef double last_heard          # when a frame from rank 0 last arrived
    cdef double waiting_since       # when this rank's requests began to wait; 0: none waits
    cdef double last_warning        # when the last warning was logged; 0: none in this wait
    cdef double silent_s            # the silence check() measured last

    cdef void heard(self, double now) noexcept nogil
    cdef int check(self, double now, bint waiting) noexcept nogil
    cdef int sleep_ms(self, bint waiting) noexcept nogil
