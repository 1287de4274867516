# The engine's process sets (see psets.pyx).
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from fuse.engine.csupport cimport Lock
from fuse.engine.protocol cimport PSet, Hierarchy


cdef class ProcessSets:
    cdef int rank
    cdef Lock* lock                     # the engine's lock
    # id -> set.  Written under ``lock``: by Python threads before the engine starts, and by
    # the loop (add/remove responses); the loop reads it without the lock (the coordinator and
    # the executor hold pointers into it), Python threads under it.
    cdef unordered_map[int, PSet] map
    # id -> how the set's allreduces go hierarchically, and the cross-host connection that
    # points to (map[id].hier and hier[id].cross point into these; node addresses are stable)
    cdef unordered_map[int, Hierarchy] hier
    cdef unordered_map[int, PSet] cross
    # Python objects the sets point to, kept alive here (under the GIL): id -> Group, and
    # (id, "capsule" | "twin" | "twin capsule" | "shm" | "hier shm") -> what the name says,
    # (id, "cross") -> the cross-host Group of a hierarchical set
    cdef dict groups
    cdef object create_group            # callable(ranks, id) -> Group, for new sets

    cdef PSet _describe(self, ranks, group, object key) except *
    cdef int add(self, const vector[int64_t]& args, string& err) noexcept with gil
    cdef void remove(self, int pset_id) noexcept with gil
