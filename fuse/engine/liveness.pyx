# cython: language_level=3
# distutils: language = c++
"""A worker's watch on the coordinator: stall detection that does not depend on rank 0.

The stall inspector runs in the coordinator, on rank 0; if rank 0 itself stops (SIGSTOP, a
debugger, a hung host) nobody would notice, and every worker would wait for a response forever.
So while a worker has requests waiting for their response, it expects to hear from rank 0:
the coordinator sends MSG_ALIVE about once a second while it holds unfinished requests (see
Coordinator.step), besides its responses.  A worker that hears nothing for the stall-check time
warns, and after the stall-shutdown time fails the job with a StallError naming rank 0.

Only silence counts: a rank 0 that is alive but waits for another rank keeps sending MSG_ALIVE,
and its own stall inspector names the missing rank instead.  Time spent running collectives is
not counted either: rank 0 sends nothing while it runs one, so the clock restarts when a
worker has run the responses it read (Engine._read_control).
"""

cdef class CoordinatorWatch:
    """Args:
        config: the job's fuse.config.Config (stall-check knobs)."""

    def __init__(self, config):
        self.enabled = not config.stall_check_disable
        self.warn_s = config.stall_check_time_seconds
        self.fail_s = config.stall_shutdown_seconds
        self.last_heard = 0
        self.waiting_since = 0
        self.last_warning = 0
        self.silent_s = 0

    cdef void heard(self, double now) noexcept nogil:
        """A frame from rank 0 arrived."""
        self.last_heard = now

    cdef int check(self, double now, bint waiting) noexcept nogil:
        """Whether rank 0 has been silent too long while this rank ``waiting`` for responses:
        a WatchVerdict.  The silence is measured from the later of the last frame heard and
        the start of this wait."""
        if not self.enabled or not waiting:
            self.waiting_since = 0
            self.last_warning = 0
            return WATCH_QUIET
        if self.waiting_since == 0:
            self.waiting_since = now
        self.silent_s = now - (self.last_heard if self.last_heard > self.waiting_since
                               else self.waiting_since)
        if self.fail_s > 0 and self.silent_s >= self.fail_s:
            return WATCH_FAIL
        if self.silent_s >= self.warn_s and (self.last_warning == 0 or
                                              now - self.last_warning >= self.warn_s):
            self.last_warning = now
            return WATCH_WARN
        return WATCH_QUIET

    cdef int sleep_ms(self, bint waiting) noexcept nogil:
        """How long an idle worker may sleep before it must check again (-1: no limit)."""
        return 1000 if self.enabled and waiting else -1

    def warning_text(self, int rank, size_t waiting, str rank0="rank 0"):
        return (f"{rank0}, the coordinator, has not answered for {self.silent_s:.0f} seconds "
                f"while rank {rank} waits for {waiting} collective(s); rank 0 may be stopped, "
                f"hung or unreachable (FUSE_STALL_CHECK_TIME_SECONDS={self.warn_s:g}"
                + (f"; the job fails after FUSE_STALL_SHUTDOWN_TIME_SECONDS={self.fail_s:g})"
                   if self.fail_s else ")"))

    def failure_text(self, int rank, size_t waiting, str rank0="rank 0"):
        return (f"stall: {rank0}, the coordinator, has not answered for {self.silent_s:.0f} "
                f"seconds while rank {rank} waited for {waiting} collective(s) "
                f"(FUSE_STALL_SHUTDOWN_TIME_SECONDS={self.fail_s:g}); rank 0 is stopped, hung "
                f"or unreachable; shutting down")
