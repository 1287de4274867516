# The straggler meter (see straggler.pyx): the coordinator's per-rank account of who keeps
# the others waiting.
from libc.stdint cimport int64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.engine.protocol cimport StragglerView


cdef class StragglerMeter:
    cdef cbool enabled
    cdef int size
    cdef double sample_s            # seconds per sample
    cdef int history                # samples the medians are taken over
    cdef double factor              # FUSE_STRAGGLER_FACTOR
    cdef vector[int] host_of        # per rank: its host's index (set_hosts)
    cdef vector[string] host_names  # per host index
    cdef vector[string] rank_hosts  # per rank: its host's name
    # the sample being gathered
    cdef double sample_start
    cdef vector[double] late_sum    # per rank: sum over ready tensors of (its arrival - first)
    cdef vector[int64_t] late_n
    cdef vector[double] wait_sum    # per rank: time every other rank had arrived, it had not
    cdef vector[double] host_wait_sum   # per host: time every rank of other hosts had arrived
    cdef vector[double] wait_until      # per rank: end of the last wait counted (waits overlap)
    cdef vector[double] host_wait_until # per host: the same
    cdef string step_key            # the first tensor ready in the sample: its repeats = steps
    cdef int64_t steps
    # completed samples: rings of `history` values per rank (index rank * history + slot)
    cdef vector[double] late_ring, share_ring, cost_ring
    cdef vector[double] host_share_ring, host_cost_ring   # per host
    cdef int filled, head
    cdef int64_t samples
    # the smoothed view: medians over the rings
    cdef vector[double] late_med, share_med, cost_med, host_share_med, host_cost_med
    cdef vector[char] flagged       # per rank, then per host: behind by more than the factor
    cdef vector[double] told_at     # per rank, then per host: when the warning last named it

    cdef void arrived(self, int rank, double late) noexcept nogil
    cdef void ready(self, int last_rank, double waited_alone, double host_waited, double now,
                    const string& key) noexcept nogil
    cdef bint close_sample(self, double now) noexcept nogil
    cdef void view(self, StragglerView* out) noexcept nogil
    cdef int due_warning(self, double now) noexcept nogil
    cdef int _ranks_on(self, int h) noexcept nogil
    cdef bint _rank_flagged_on(self, int h) noexcept nogil
