# cython: language_level=3
# distutils: language = c++
"""Array arithmetic of the engine's reduction kernels, for backends written in Python (the MPI
backend's user-defined reduction, third-party Python backends): the same element-wise code the
engine reduces with, so that every backend agrees bit for bit."""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE

from fuse.engine.protocol cimport *

from fuse.engine.protocol import DTYPE_CODES, BACKEND_OPS


def reduce_arrays(dst, src, str dtype, str op):
    """``dst = dst <op> src`` elementwise for any wire dtype (bfloat16 as uint16 views): the
    reference reduction, for backends written in Python."""
    cdef Py_buffer d, s
    cdef int code = DTYPE_CODES[dtype]
    cdef int opc = BACKEND_OPS.index(op)
    cdef size_t count
    PyObject_GetBuffer(dst, &d, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(src, &s, PyBUF_C_CONTIGUOUS)
        try:
            if d.len != s.len:
                raise ValueError("reduce_arrays: buffers differ in size")
            count = <size_t>d.len // dtype_size(code)
            with nogil:
                reduce_into(d.buf, s.buf, count, code, opc)
        finally:
            PyBuffer_Release(&s)
    finally:
        PyBuffer_Release(&d)
