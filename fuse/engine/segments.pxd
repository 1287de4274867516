from fuse.engine.csupport cimport ShmAllreduce


cdef class SharedSegments:
    # Used by whoever holds the engine's loop (Engine.loop_lock) once an engine has it
    # (``installed``: ProcessSets.install_shm); before that, by allreduce() (tests).
    cdef ShmAllreduce* impl
    cdef list _segments
    cdef public bint installed
    cdef void add_region(self, list maps, list sizes) noexcept
