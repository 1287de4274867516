# cython: freethreading_compatible=False
"""Cython binding of the shared-memory allreduce (csrc/shm_allreduce.h): the whole reduction
runs with the GIL released, so the engine thread does not contend with the training thread."""

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libcpp.vector cimport vector

cdef extern from "fuse_dtypes.h" namespace "fuse" nogil:
    const char* dtype_name(int dtype)
    const char* op_name(int op)
    size_t dtype_size(int dtype)

cdef extern from "shm_allreduce.h" namespace "fuse" nogil:
    size_t kShmHeaderBytes
    cppclass ShmAllreduce:
        ShmAllreduce(vector[char*] bases, int rank, size_t chunk)
        int allreduce(void* buf, size_t count, int dtype, int op, double post, char* err,
                      size_t errlen)

HEADER_BYTES = kShmHeaderBytes

cdef enum:
    ERRLEN = 1024


cdef int _code(const char* (*name_of)(int) noexcept nogil, str name, int upto) except -1:
    """The code whose name (as fuse_dtypes.h spells it) is ``name``."""
    cdef int code
    for code in range(upto):
        if name_of(code).decode() == name:
            return code
    raise ValueError(f"shared-memory allreduce: unknown {name!r}")


cdef class SharedSegments:
    """Every member's mapped segment (Python buffers, kept alive here) and the reducer."""

    cdef ShmAllreduce* impl
    cdef list _views

    def __cinit__(self, list segments, int rank, size_t chunk):
        cdef vector[char*] bases
        cdef Py_buffer view
        self._views = []
        for seg in segments:
            PyObject_GetBuffer(seg, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
            if <size_t>view.len < kShmHeaderBytes + 2 * chunk:
                PyBuffer_Release(&view)
                raise ValueError("shared-memory segment smaller than its header and 2 chunks")
            bases.push_back(<char*>view.buf)
            PyBuffer_Release(&view)     # the mmap objects in _views keep the memory mapped
            self._views.append(seg)
        self.impl = new ShmAllreduce(bases, rank, chunk)

    def __dealloc__(self):
        del self.impl

    def allreduce(self, buf, str dtype, str op, double factor=1.0):
        """Reduce ``buf`` (contiguous, writable) in place across the members, then multiply
        it by ``factor``."""
        cdef int dcode = _code(dtype_name, dtype, 11)
        cdef int ocode = _code(op_name, op, 4)
        cdef Py_buffer view
        cdef char err[ERRLEN]
        cdef int rc
        cdef size_t esize = dtype_size(dcode)
        PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
        try:
            err[0] = 0
            with nogil:
                rc = self.impl.allreduce(view.buf, <size_t>view.len // esize, dcode, ocode,
                                         factor, err, ERRLEN)
        finally:
            PyBuffer_Release(&view)
        if rc != 0:
            raise RuntimeError(err.decode("utf-8", "replace"))
