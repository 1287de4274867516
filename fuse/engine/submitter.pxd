# This rank's side of negotiation (see submitter.pyx).
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from fuse.engine.protocol cimport Request, Response, WorkerCache
from fuse.engine.psets cimport ProcessSets


cdef class Submitter:
    # Everything here belongs to whoever holds the engine's loop (Engine.loop_lock).
    cdef int rank
    cdef ProcessSets psets              # the engine's
    cdef size_t inline_threshold        # FUSE_INLINE_THRESHOLD (bytes times members)
    cdef size_t shm_threshold           # FUSE_SHM_THRESHOLD: shared memory wins from here
    cdef uint32_t cache_capacity        # 0: the response cache is off
    # this rank's requests sent and not yet finished, by _key(pset, name)
    cdef unordered_map[string, Request] inflight
    # the response cache's slots as the coordinator assigned them: key -> (slot, gen, signature)
    cdef unordered_map[string, WorkerCache] wcache
    cdef unordered_map[uint32_t, string] wslot_owner    # slot -> the key that holds it
    cdef unordered_map[uint64_t, string] sent_hits      # (slot << 32 | gen) -> key, in flight

    cdef void pack(self, vector[Request]& batch, string& msg) noexcept nogil
    cdef bint repack(self, uint32_t slot, uint32_t gen, string& msg) noexcept nogil
    cdef void learn(self, const Response& resp) noexcept nogil
    cdef bint inlines(self, int kind, int pset, size_t nbytes) noexcept nogil
    cdef void _attach_inline(self, Request& r) noexcept nogil
