# The coordinator (see coordinator.pyx) and the interface it uses to reach its engine.
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from fuse.engine.csupport cimport *
from fuse.engine.protocol cimport Request, Response, Pending, CacheEntry, PSet
from fuse.engine.channel cimport ControlChannel
from fuse.engine.psets cimport ProcessSets
from fuse.engine.straggler cimport StragglerMeter


cdef class CoordinatorLink:
    cdef void abort_job(self, int who, const string& msg, int kind) noexcept nogil


# what Tuning.take() did
cdef enum:
    TUNED_KEPT = 0
    TUNED_CACHE_OFF = 1         # the cache was switched off: forget its slots


cdef class Tuning:
    cdef Lock* lock                    # guards every field below but channel and cache_capacity
    cdef ControlChannel channel        # the engine's: set() wakes the loop
    cdef uint32_t cache_capacity       # FUSE_CACHE_CAPACITY: 0 keeps the cache off
    cdef cbool pending                 # set() left values the loop has not taken yet
    cdef size_t next_fusion_threshold
    cdef double next_cycle_time_s
    cdef cbool next_cache_enabled
    # in force (the loop changes them, under the lock, only in take(); it reads them without)
    cdef size_t fusion_threshold
    cdef double cycle_time_s
    cdef cbool cache_enabled           # assign cache slots

    cdef int take(self) noexcept nogil


cdef class Coordinator:
    cdef CoordinatorLink link          # the engine (set to None when its thread ends)
    cdef ControlChannel channel        # the engine's: frames to the workers
    cdef object log
    cdef int size
    cdef ProcessSets psets             # the engine's; the joined state in them is ours
    cdef Timeline* tl                  # the engine's (recording on rank 0 only)
    cdef Tuning tuning                 # fusion threshold, cycle time, cache switch
    # knobs
    cdef size_t zero_copy_bytes
    cdef double stall_warn_s
    cdef double stall_shutdown_s
    cdef cbool stall_check
    cdef uint32_t cache_capacity
    cdef cbool disable_group_fusion
    # negotiation state
    cdef unordered_map[string, Pending] table
    cdef vector[string] ready                  # keys ready everywhere, in the order they became so
    cdef unordered_map[string, vector[string]] group_ready
    cdef vector[CacheEntry] cache
    cdef unordered_map[string, uint32_t] cache_index
    cdef uint32_t cache_gen
    cdef uint64_t cache_clock
    cdef double last_emit
    cdef double last_stall_check
    cdef int next_pset_id
    cdef uint64_t st_cycles            # cycles that emitted responses
    cdef StragglerMeter meter          # who keeps the others waiting (disabled: policy off)
    cdef object straggler_hook         # Python: called (with the GIL) when the meter flags one

    # called by the engine
    cdef void ingest_requests(self, int rank, Reader& rd) noexcept nogil
    cdef bint step(self) noexcept nogil
    cdef int idle_timeout_ms(self) noexcept nogil
    cdef void rank_left(self, int rank) noexcept nogil
    cdef void apply_tuning(self) noexcept nogil
    # internal
    cdef void _add_request(self, Request& req) noexcept nogil
    cdef void _accumulate(self, Pending* entry, Request& req) noexcept nogil
    cdef bint _finish_inline(self, Pending* entry, Response* resp) noexcept nogil
    cdef void _reject(self, Request& req, const string& why) noexcept nogil
    cdef void _recheck_pset(self, int pset) noexcept nogil
    cdef void _check_ready(self, const string& key) noexcept nogil
    cdef void _error_ready(self, const string& key, const string& why, int kind) noexcept nogil
    cdef size_t _entry_bytes(self, Pending* entry) noexcept nogil
    cdef Request* _first(self, Pending* entry) noexcept nogil
    cdef Response _make_response(self, Pending* entry) noexcept nogil
    cdef bint _fusable(self, Response* r, Pending* entry) noexcept nogil
    cdef bint _could_fuse_more(self) noexcept nogil
    cdef void _assign_cache(self, Response* resp, size_t idx, Pending* entry,
                            const string& key) noexcept nogil
    cdef void _emit(self) noexcept nogil
    cdef void _check_stalls(self, double now) noexcept nogil
    cdef void _send_alive(self) noexcept nogil
    cdef void _tl_ready(self, Request* first) noexcept nogil
    cdef void _straggler_sample(self, double now) noexcept nogil
