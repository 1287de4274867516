# cython: language_level=3
# distutils: language = c++
"""Shared-memory segments of the members of a process set on one host, and the C++ reducer over
them (csrc/shm_allreduce.h): mapped by fuse.engine.shm, installed in the engine by the process-set
table (psets.pyx), whose executor then calls the reducer without the GIL."""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE

from fuse.engine.protocol cimport *

from fuse.engine.protocol import DTYPE_CODES, BACKEND_OPS


cdef void _warn_late_member(const char* message) noexcept with gil:
    from fuse._log import logger
    logger.warning("%s", message.decode(errors="replace"))



cdef class SharedSegments:
    """Every member's mapped shared-memory segment (objects exporting the buffer protocol, such
    as ``mmap.mmap``, kept alive here) and the C++ reducer over them (csrc/shm_allreduce.h).
    Built by fuse.engine.shm; the engine hands ``impl`` to the executor."""

    def __cinit__(self, list segments, int rank, size_t chunk):
        cdef vector[char*] bases
        cdef Py_buffer view
        self.impl = NULL
        self._segments = []
        for seg in segments:
            PyObject_GetBuffer(seg, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
            if <size_t>view.len < kShmHeaderBytes + 2 * chunk:
                PyBuffer_Release(&view)
                raise ValueError("shared-memory segment smaller than its header and 2 chunks")
            bases.push_back(<char*>view.buf)
            PyBuffer_Release(&view)     # the objects in _segments keep the memory mapped
            self._segments.append(seg)
        self.impl = new ShmAllreduce(bases, rank, chunk)

    def __dealloc__(self):
        del self.impl

    cdef void add_region(self, list maps, list sizes) noexcept:
        """One more region: ``maps[k]`` is rank k's mapping (writable buffers, kept alive
        here), ``sizes[k]`` its length.  The caller makes sure no allreduce runs meanwhile."""
        cdef vector[char*] bases
        cdef vector[size_t] nbytes
        cdef Py_buffer view
        for m, size in zip(maps, sizes):
            PyObject_GetBuffer(m, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
            bases.push_back(<char*>view.buf)
            nbytes.push_back(min(<size_t>size, <size_t>view.len))
            PyBuffer_Release(&view)
            self._segments.append(m)
        with nogil:
            self.impl.add_region(bases, nbytes)

    def set_patience(self, double warn_s, double fail_s):
        """How long a barrier waits for a late member: a warning after ``warn_s``, a
        StallError after ``fail_s`` (0: never; see csrc/shm_allreduce.h)."""
        self.impl.set_patience(warn_s, fail_s, _warn_late_member)

    @property
    def direct(self):
        """Allreduces reduced straight between regions so far."""
        return self.impl.direct

    def allreduce(self, buf, str dtype, str op, double factor=1.0):
        """Reduce ``buf`` (contiguous, writable, of wire dtype ``dtype``) in place across the
        members and multiply it by ``factor``.  For segments no engine uses (tests): an
        engine's loop calls ``impl`` itself, and a call from another thread would race it."""
        if self.installed:
            raise RuntimeError("these shared-memory segments belong to the engine; "
                               "use fuse.allreduce")
        cdef int dcode = DTYPE_CODES[dtype]
        cdef int ocode = BACKEND_OPS.index(op)
        cdef Py_buffer view
        cdef char err[ERRLEN]
        cdef int rc
        PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
        try:
            err[0] = 0
            with nogil:
                rc = self.impl.allreduce(view.buf, <size_t>view.len // dtype_size(dcode), dcode,
                                         ocode, factor, err, ERRLEN)
        finally:
            PyBuffer_Release(&view)
        if rc != 0:
            raise RuntimeError(err.decode("utf-8", "replace"))


SHM_HEADER_BYTES = kShmHeaderBytes
SHM_PID_OFFSET = kShmPidOffset
