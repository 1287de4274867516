# A collective as its caller asked for it (see request.pyx).
from fuse.engine.protocol cimport Request


cdef class RequestSpec:
    # what the caller asked for (read-only once made)
    cdef readonly int kind
    cdef readonly str name
    cdef readonly object input          # exports the buffer protocol, or None
    cdef readonly object output         # writable, or None: the allocator makes it
    cdef readonly int dtype
    cdef readonly tuple shape
    cdef readonly int op
    cdef readonly double prescale
    cdef readonly double postscale
    cdef readonly int root              # a global rank (broadcast), else -1
    cdef readonly tuple splits          # alltoall: rows sent to each member; None: even
    cdef readonly tuple ranks           # add_process_set: the new set's ranks
    cdef readonly int removed_set       # remove_process_set: the set's id
    cdef readonly int pset
    cdef readonly object allocator      # shape -> (result, writable buffer), or None
    cdef readonly str group_key         # grouped calls: the group's name, else None
    cdef readonly object device         # a device tensor's DeviceRequest (fuse/engine/device.py)
                                        # or None: a host tensor
    # filled in while the collective runs; released by release()
    cdef readonly object result         # what the allocator made (allgather, alltoall, ...)
    cdef Py_buffer _views[3]            # input, output, the allocator's buffer
    cdef bint _held[3]

    cdef int bind(self, Request& r, int rank, size_t group_size) except -1
    cdef void* take_output(self, tuple shape, size_t nbytes) except? NULL
    cdef void release(self) noexcept
