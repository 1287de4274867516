# cython: language_level=3
# distutils: language = c++
"""A collective as its caller asked for it: :class:`RequestSpec`.

The collective layer (fuse.collectives.calls) makes one per tensor and hands a list of them to
``Engine.enqueue``, which binds each to the engine's C ``Request`` (raw pointers, no Python
objects) and keeps it as the handle's record: it holds the buffer views the engine reads and
writes through, and the objects that own that memory, until the handle is waited for (as
mpi4py's ``_p_msg_cco`` does), so no resizable object can move its memory under the engine.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE

from fuse.engine.protocol cimport *

from fuse.engine.protocol import DTYPE_NAMES, KIND_NAMES

# indexes of RequestSpec._views
cdef enum:
    V_INPUT = 0
    V_OUTPUT = 1
    V_ALLOCATED = 2


cdef class RequestSpec:
    """One collective on one tensor, as its caller asked for it.

    Args:
        kind: the collective (fuse.engine.protocol.ALLREDUCE, ...).
        name: the tensor's name, the same on every rank.
        dtype: a fuse dtype code (fuse.engine.protocol.DTYPE_CODES).
        shape: the input's shape.
        pset: the process set's id.
        input: an object exporting the input's memory (buffer protocol, C-contiguous), or None.
        output: the same for the output (writable), or None when ``allocator`` makes it.
        op, prescale, postscale: the reduction (allreduce, reducescatter).
        root: the broadcast's root, a global rank.
        splits: alltoall: rows sent to each member (None: even).
        ranks: add_process_set: the new set's ranks.
        removed_set: remove_process_set: the set's id.
        allocator: ``shape -> (result, writable buffer)`` for outputs whose size negotiation
            decides (allgather, alltoall, reducescatter); ``result`` is kept in :attr:`result`.
        group_key: grouped calls: the group's name, the same for each of its tensors.
        device: for a device (GPU) tensor, its :class:`fuse.engine.device.DeviceRequest`
            (``input``, ``output`` and ``allocator`` stay None: the engine negotiates it like
            any tensor, and this rank's device executor moves its data).
    """

    def __init__(self, int kind, str name, int dtype, shape, int pset=0, *, input=None,
                 output=None, int op=OP_SUM, double prescale=1.0, double postscale=1.0,
                 int root=-1, splits=None, ranks=None, int removed_set=0, allocator=None,
                 str group_key=None, device=None):
        self.kind = kind
        self.name = name
        self.dtype = dtype
        self.shape = shape if type(shape) is tuple else tuple(shape)
        self.pset = pset
        self.input = input
        self.output = output
        self.op = op
        self.prescale = prescale
        self.postscale = postscale
        self.root = root
        self.splits = tuple(splits) if splits is not None else None
        self.ranks = tuple(ranks) if ranks is not None else None
        self.removed_set = removed_set
        self.allocator = allocator
        self.group_key = group_key
        self.device = device
        if device is not None and (input is not None or output is not None or allocator is not None):
            raise ValueError(f"tensor {name!r}: a device request's memory is its DeviceRequest's")

    def __dealloc__(self):
        self.release()

    def __repr__(self):
        return (f"RequestSpec({KIND_NAMES[self.kind]!r}, {self.name!r}, "
                f"{DTYPE_NAMES.get(self.dtype, self.dtype)}, {self.shape}, pset={self.pset})")

    cdef int bind(self, Request& r, int rank, size_t group_size) except -1:
        """Fill ``r`` from this spec and take the views of its input and output, which stay
        held until :meth:`release`.  ``group_size``: tensors in its grouped call (0: none)."""
        cdef size_t nbytes
        cdef Py_buffer* view
        if self._held[V_INPUT] or self._held[V_OUTPUT] or self._held[V_ALLOCATED]:
            raise ValueError(f"{self!r} was submitted twice")
        r.kind = self.kind
        r.dtype = self.dtype
        r.op = self.op
        r.pset = self.pset
        r.root = self.root
        r.prescale = self.prescale
        r.postscale = self.postscale
        r.shape.clear()
        for d in self.shape:
            r.shape.push_back(d)
        r.args.clear()
        if self.kind == K_ALLTOALL and self.splits is not None:
            for d in self.splits:
                r.args.push_back(d)
        elif self.kind == K_PSET_ADD and self.ranks is not None:
            for d in self.ranks:
                r.args.push_back(d)
        elif self.kind == K_PSET_REMOVE:
            r.args.push_back(self.removed_set)
        r.name = self.name.encode()
        r.group_key = self.group_key.encode() if self.group_key else b""
        r.group_size = <int>group_size if self.group_key else 0
        r.rank = rank
        r.on_device = self.device is not None
        r.inp = NULL
        r.out = NULL
        nbytes = <size_t>_numel(r.shape) * dtype_size(self.dtype)
        if self.input is not None:
            view = &self._views[V_INPUT]
            PyObject_GetBuffer(self.input, view, PyBUF_C_CONTIGUOUS)
            self._held[V_INPUT] = True
            if <size_t>view.len != nbytes:
                raise ValueError(f"tensor {self.name!r}: buffer has {view.len} bytes, shape "
                                 f"{self.shape} of {DTYPE_NAMES[self.dtype]} needs {nbytes}")
            r.inp = view.buf
        if self.output is not None:
            view = &self._views[V_OUTPUT]
            PyObject_GetBuffer(self.output, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
            self._held[V_OUTPUT] = True
            if <size_t>view.len != nbytes:
                raise ValueError(f"tensor {self.name!r}: output has {view.len} bytes, "
                                 f"expected {nbytes}")
            r.out = view.buf
        return 0

    cdef void* take_output(self, tuple shape, size_t nbytes) except? NULL:
        """Make the output whose size negotiation decided (``shape``, ``nbytes``) with the
        allocator; keep it in :attr:`result` and its view until :meth:`release`."""
        cdef Py_buffer* view = &self._views[V_ALLOCATED]
        if self.allocator is None:
            raise RuntimeError(f"{self!r} has no allocator for its output")
        if self._held[V_ALLOCATED]:
            raise RuntimeError(f"{self!r}: output allocated twice")
        result, buf = self.allocator(shape)
        self.result = result
        PyObject_GetBuffer(buf, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
        self._held[V_ALLOCATED] = True
        if <size_t>view.len != nbytes:
            raise ValueError(f"allocator returned {view.len} bytes, need {nbytes}")
        return view.buf

    cdef void release(self) noexcept:
        """Let go of the views: the engine no longer touches the memory."""
        cdef int i
        for i in range(3):
            if self._held[i]:
                self._held[i] = False
                PyBuffer_Release(&self._views[i])

