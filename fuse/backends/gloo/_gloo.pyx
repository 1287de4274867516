# cython: freethreading_compatible=False
"""Cython binding of the Gloo backend.

:class:`Device` is this process's TCP endpoint; :class:`GlooContext` is one Gloo context (a full
mesh of connections) per process set.  Each context offers the :class:`fuse.backends.base.Group`
methods, which release the GIL around every collective, and ``native_ops()``, a
``"fuse.group_ops.v1"`` capsule the engine calls from its background thread without the GIL.
Rendezvous goes through a Python :class:`fuse.cluster.store.Store`; the C++ layer calls it back
(taking the GIL) only while a context connects.
"""

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.pycapsule cimport PyCapsule_GetContext, PyCapsule_New, PyCapsule_SetContext
from cpython.ref cimport Py_DECREF, Py_INCREF
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.backends.libfusebackend cimport *
from fuse.backends.gloo.libfusegloo cimport *

from fuse.backends.gloo.errors import GlooError

cdef enum:
    ERRLEN = 1024

# wire dtype name -> fuse_dtype code, and its item size (the tables in fuse_dtypes.h)
DTYPES = {dtype_name(code).decode(): code for code in range(FUSE_BFLOAT16 + 1)}
OPS = {"sum": FUSE_OP_SUM, "min": FUSE_OP_MIN, "max": FUSE_OP_MAX, "product": FUSE_OP_PRODUCT}
_ITEMSIZE = {name: dtype_size(code) for name, code in DTYPES.items()}
CAPSULE_NAME = FUSE_GROUP_OPS_CAPSULE.decode()
API_VERSION = FUSE_BACKEND_API_VERSION


cdef str _text(const char* err):
    return err.decode("utf-8", "replace")


cdef int _dtype_code(str dtype) except -1:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"gloo: unsupported dtype {dtype!r}; expected one of "
                         f"{', '.join(DTYPES)}") from None


cdef int _op_code(str op) except -1:
    try:
        return OPS[op]
    except KeyError:
        raise ValueError(f"gloo: unsupported reduction {op!r}; expected one of "
                         f"{', '.join(OPS)}") from None


cdef class _Buffer:
    """A contiguous buffer held for the duration of one call (PEP 3118)."""
    cdef Py_buffer view
    cdef bint held

    def __cinit__(self, obj, bint writable):
        PyObject_GetBuffer(obj, &self.view,
                           PyBUF_C_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0))
        self.held = True

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)


cdef vector[size_t] _sizes(object values, int n, str what) except *:
    cdef vector[size_t] out
    values = [int(v) for v in values]
    if len(values) != n:
        raise ValueError(f"gloo: {what} has {len(values)} entries; the group has {n} members")
    if any(v < 0 for v in values):
        raise ValueError(f"gloo: {what} has a negative entry: {values}")
    out = values
    return out


# ---- rendezvous: the C++ store calls these, each taking the GIL ----

cdef int _check_holds(str call, str buffer, Py_ssize_t have, size_t need, str sizes) except -1:
    """ValueError unless ``buffer`` (``have`` bytes) holds the ``need`` bytes ``sizes`` ask
    for: Gloo would read or write past its end."""
    if need > <size_t>have:
        raise ValueError(f"gloo {call}: {buffer} has {have} bytes, {sizes} add up to {need}")
    return 0


cdef class _StoreAdapter:
    """Wraps a Python Store for the C++ layer; keeps the first exception it raised."""
    cdef object store
    cdef object error
    cdef fuse_gloo_store_cb cb

    def __cinit__(self, store):
        self.store = store
        self.error = None
        self.cb.handle = <void*>self
        self.cb.set = _store_set
        self.cb.get = _store_get
        self.cb.wait = _store_wait

    cdef int fail(self, exc, string* err) noexcept:
        if self.error is None:
            self.error = exc
        try:
            err[0] = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
        except BaseException:
            pass
        return 1


cdef int _store_set(void* handle, const string& key, const char* data, size_t n,
                    string* err) noexcept with gil:
    cdef _StoreAdapter adapter = <_StoreAdapter>handle
    try:
        adapter.store.set(key.decode(), data[:n] if n else b"")
        return 0
    except BaseException as exc:
        return adapter.fail(exc, err)


cdef int _store_get(void* handle, const string& key, double timeout_ms, string* out,
                    string* err) noexcept with gil:
    cdef _StoreAdapter adapter = <_StoreAdapter>handle
    try:
        out[0] = bytes(adapter.store.get(key.decode(), timeout_ms / 1000.0))
        return 0
    except BaseException as exc:
        return adapter.fail(exc, err)


cdef int _store_wait(void* handle, const vector[string]& keys, double timeout_ms,
                     string* err) noexcept with gil:
    cdef _StoreAdapter adapter = <_StoreAdapter>handle
    try:
        adapter.store.wait([keys[i].decode() for i in range(keys.size())], timeout_ms / 1000.0)
        return 0
    except BaseException as exc:
        return adapter.fail(exc, err)


# ---- objects ----

cdef class Device:
    """This process's Gloo TCP endpoint: bound to ``hostname`` or to interface ``iface``."""
    cdef fuse_gloo_device* _ptr

    def __cinit__(self, str hostname="", str iface=""):
        cdef bytes h = hostname.encode()
        cdef bytes i = iface.encode()
        cdef const char* hp = h
        cdef const char* ip = i
        cdef char err[ERRLEN]
        cdef int rc
        with nogil:
            rc = fuse_gloo_device_new(hp, ip, &self._ptr, err, ERRLEN)
        if rc != 0:
            self._ptr = NULL
            raise GlooError(_text(err))

    def __dealloc__(self):
        if self._ptr != NULL:
            with nogil:
                fuse_gloo_device_free(self._ptr)
            self._ptr = NULL

    def __str__(self):
        return fuse_gloo_device_str(self._ptr).decode("utf-8", "replace")

    def __repr__(self):
        return f"<gloo Device {self}>"


cdef void _release_capsule(object capsule) noexcept:
    cdef void* owner = PyCapsule_GetContext(capsule)
    if owner != NULL:
        Py_DECREF(<object>owner)


cdef class GlooContext:
    """One Gloo context over ``size`` processes, this one being ``rank``.

    Connects at construction (collective over the members; rendezvous keys are
    ``prefix + "<rank>"`` in ``store``).  A context of size 1 needs no device or store.
    Implements :class:`fuse.backends.base.Group`.
    """
    cdef fuse_gloo_group* _ptr
    cdef fuse_group_ops _ops
    cdef Device _device
    cdef readonly int rank
    cdef readonly int size
    cdef readonly str prefix

    def __cinit__(self, Device device, int rank, int size, double timeout_seconds, store=None,
                  str prefix=""):
        cdef _StoreAdapter adapter = _StoreAdapter(store) if store is not None else None
        cdef const fuse_gloo_store_cb* cb = &adapter.cb if adapter is not None else NULL
        cdef fuse_gloo_device* dev = device._ptr if device is not None else NULL
        cdef bytes pfx = prefix.encode()
        cdef const char* p = pfx
        cdef double timeout_ms = timeout_seconds * 1000.0
        cdef char err[ERRLEN]
        cdef int rc
        self.rank, self.size, self.prefix, self._device = rank, size, prefix, device
        with nogil:
            rc = fuse_gloo_group_new(dev, rank, size, timeout_ms, cb, p, &self._ptr, err, ERRLEN)
        if rc != 0:
            self._ptr = NULL
            cause = adapter.error if adapter is not None else None
            if cause is not None and not isinstance(cause, Exception):
                raise cause  # KeyboardInterrupt or SystemExit during rendezvous
            raise GlooError(_text(err)) from cause
        fuse_gloo_group_fill_ops(self._ptr, &self._ops)

    def __dealloc__(self):
        if self._ptr != NULL:
            with nogil:
                fuse_gloo_group_free(self._ptr)
            self._ptr = NULL

    def __repr__(self):
        return f"<GlooContext rank {self.rank} of {self.size} prefix {self.prefix!r}>"

    cdef int _check(self, int rc, const char* err) except -1:
        if rc != 0:
            raise GlooError(_text(err))
        return 0

    def native_ops(self):
        """A ``"fuse.group_ops.v1"`` capsule over this context; it keeps the context alive."""
        capsule = PyCapsule_New(&self._ops, FUSE_GROUP_OPS_CAPSULE, _release_capsule)
        Py_INCREF(self)
        PyCapsule_SetContext(capsule, <void*>self)
        return capsule

    def allreduce(self, buf, str dtype, str op):
        """Reduce ``buf`` in place across the group."""
        cdef int d = _dtype_code(dtype)
        cdef int o = _op_code(op)
        cdef _Buffer b = _Buffer(buf, True)
        cdef size_t itemsize = _ITEMSIZE[dtype]
        if <size_t>b.view.len % itemsize:
            raise ValueError(f"gloo allreduce: a buffer of {b.view.len} bytes does not hold "
                             f"whole {dtype} elements")
        cdef size_t count = <size_t>b.view.len // itemsize
        cdef char err[ERRLEN]
        cdef int rc
        with nogil:
            rc = fuse_gloo_allreduce(self._ptr, b.view.buf, count, d, o, err, ERRLEN)
        self._check(rc, err)

    def allgatherv(self, sendbuf, recvbuf, recvbytes):
        """Gather every member's bytes into ``recvbuf``, member after member."""
        cdef vector[size_t] sizes = _sizes(recvbytes, self.size, "recvbytes")
        cdef _Buffer s = _Buffer(sendbuf, False)
        cdef _Buffer r = _Buffer(recvbuf, True)
        if <size_t>s.view.len != sizes[self.rank]:
            raise ValueError(f"gloo allgatherv: sendbuf has {s.view.len} bytes but "
                             f"recvbytes[{self.rank}] is {sizes[self.rank]}")
        _check_holds("allgatherv", "recvbuf", r.view.len, sum(sizes), "recvbytes")
        cdef char err[ERRLEN]
        cdef int rc
        with nogil:
            rc = fuse_gloo_allgatherv(self._ptr, s.view.buf, s.view.len, r.view.buf,
                                      sizes.data(), err, ERRLEN)
        self._check(rc, err)

    def broadcast(self, buf, int root):
        """Copy ``buf`` from group rank ``root`` to every member."""
        cdef _Buffer b = _Buffer(buf, True)
        cdef char err[ERRLEN]
        cdef int rc
        with nogil:
            rc = fuse_gloo_broadcast(self._ptr, b.view.buf, b.view.len, root, err, ERRLEN)
        self._check(rc, err)

    def alltoallv(self, sendbuf, sendbytes, recvbuf, recvbytes):
        """Send block i of ``sendbuf`` to member i; receive member i's block into ``recvbuf``."""
        cdef vector[size_t] ssizes = _sizes(sendbytes, self.size, "sendbytes")
        cdef vector[size_t] rsizes = _sizes(recvbytes, self.size, "recvbytes")
        cdef _Buffer s = _Buffer(sendbuf, False)
        cdef _Buffer r = _Buffer(recvbuf, True)
        _check_holds("alltoallv", "sendbuf", s.view.len, sum(ssizes), "sendbytes")
        _check_holds("alltoallv", "recvbuf", r.view.len, sum(rsizes), "recvbytes")
        cdef char err[ERRLEN]
        cdef int rc
        with nogil:
            rc = fuse_gloo_alltoallv(self._ptr, s.view.buf, ssizes.data(), r.view.buf,
                                     rsizes.data(), err, ERRLEN)
        self._check(rc, err)

    def reducescatter(self, buf, recvcounts, str dtype, str op):
        """Leave this member's block of the reduction at the front of ``buf``."""
        cdef vector[size_t] counts = _sizes(recvcounts, self.size, "recvcounts")
        cdef int d = _dtype_code(dtype)
        cdef int o = _op_code(op)
        cdef _Buffer b = _Buffer(buf, True)
        _check_holds("reducescatter", "buffer", b.view.len, sum(counts) * _ITEMSIZE[dtype],
                     f"recvcounts (times the {dtype} item size)")
        cdef char err[ERRLEN]
        cdef int rc
        with nogil:
            rc = fuse_gloo_reducescatter(self._ptr, b.view.buf, counts.data(), d, o, err, ERRLEN)
        self._check(rc, err)

    def barrier(self):
        """Return once every member has called it."""
        cdef char err[ERRLEN]
        cdef int rc
        with nogil:
            rc = fuse_gloo_barrier(self._ptr, err, ERRLEN)
        self._check(rc, err)

    def close(self):
        """Drop the connections; later collectives raise GlooError ("group is closed")."""
        with nogil:
            fuse_gloo_group_close(self._ptr)

    def _set_algorithm(self, str name):
        """Allreduce algorithm: "ring" (default) or "bcube".  For benchmarks."""
        cdef int code = {"ring": FUSE_GLOO_RING, "bcube": FUSE_GLOO_BCUBE}[name]
        if fuse_gloo_group_set_algorithm(self._ptr, code) != 0:
            raise ValueError(f"gloo: cannot select algorithm {name!r}")

    def set_timeout(self, double seconds):
        """How long each later collective waits for a peer's data before it fails."""
        if self._ptr == NULL or fuse_gloo_group_set_timeout(self._ptr, seconds * 1000.0) != 0:
            raise ValueError(f"gloo: cannot set a collective timeout of {seconds!r} s")


def reduce_local(out, a, b, str dtype, str op):
    """``out[i] = op(a[i], b[i])`` with the kernel the allreduce uses (for tests)."""
    cdef int d = _dtype_code(dtype)
    cdef int o = _op_code(op)
    cdef _Buffer bo = _Buffer(out, True)
    cdef _Buffer ba = _Buffer(a, False)
    cdef _Buffer bb = _Buffer(b, False)
    if not bo.view.len == ba.view.len == bb.view.len:
        raise ValueError("reduce_local: buffers differ in size")
    cdef size_t n = <size_t>bo.view.len // _ITEMSIZE[dtype]
    cdef char err[ERRLEN]
    cdef int rc
    with nogil:
        rc = fuse_gloo_reduce_local(bo.view.buf, ba.view.buf, bb.view.buf, n, d, o, err, ERRLEN)
    if rc != 0:
        raise ValueError(_text(err))
