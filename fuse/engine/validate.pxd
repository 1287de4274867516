# Whether the ranks agree on a collective (see validate.pyx).
from libcpp.string cimport string

from fuse.engine.protocol cimport Pending
from fuse.engine.psets cimport ProcessSets


cdef string validate(Pending* entry, ProcessSets psets, int size) noexcept nogil
