# cython: language_level=3
# distutils: language = c++
"""The executor: runs one response's collective on this rank.

Responses arrive in the coordinator's order and each turns into at most one backend collective:
pack the ready allreduces into the fusion buffer (or reduce a large tensor where it lies, or
copy in the result the coordinator computed inline), one backend call, unpack, scale.  The
response runner (engine/results.pyx) looks up this rank's requests for the response and completes their handles from
the code an Executor method returns; the executor only moves data, so it knows nothing of
handles, sockets or the coordinator.  Everything here runs on the engine thread without the GIL,
except calls into a backend written in Python and the caller's output allocator.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE
from cpython.buffer cimport PyBUF_WRITE
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdlib cimport free
from libc.string cimport memmove, memset

from fuse.engine.protocol cimport *
from fuse.engine.request cimport RequestSpec

import numpy as np

from fuse.engine.protocol import DTYPE_NAMES, DTYPE_CODES, BACKEND_OPS
from fuse.backends.base import dtype_name_to_numpy
# the documented place of the reference reduction for Python backends (docs/plugins.md)
from fuse.engine.arrays import reduce_arrays  # noqa: F401

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void**, size_t, size_t)


cdef class FusionBufferManager:
    """One host buffer, grown on demand and reused for every fused collective (Horovod keeps one
    per device and stream; fuse runs host collectives only, so one is enough)."""

    def __dealloc__(self):
        free(self._ptr)

    cdef void* get(self, size_t nbytes) noexcept nogil:
        cdef void* p = NULL
        if nbytes > self._size:
            free(self._ptr)
            self._ptr = NULL
            self._size = 0
            if posix_memalign(&p, 64, nbytes if nbytes > 64 else 64) != 0:
                return NULL
            self._ptr = p
            self._size = nbytes
        return self._ptr

    @property
    def size(self):
        return self._size


cdef object _view(void* ptr, size_t nbytes, int dtype):
    """A numpy array over engine memory, for backends driven through Python."""
    np_dtype = dtype_name_to_numpy(DTYPE_NAMES[dtype])
    if nbytes == 0:
        return np.empty(0, dtype=np_dtype)
    return np.frombuffer(PyMemoryView_FromMemory(<char*>ptr, nbytes, PyBUF_WRITE), dtype=np_dtype)


cdef int _py_invoke(object fn, tuple args, string& err):
    """Call a backend's Python method; a raised exception becomes ``err`` and a non-zero code."""
    try:
        fn(*args)
        return 0
    except BaseException as e:
        err = _exc_text(e)
        return 1


# ---- backend calls: the native table without the GIL, else the Python methods.  A native
# call writes its error into ``errbuf`` (see fuse_backend.h); _native_rc moves it into ``err``.

cdef inline int _native_rc(int rc, const char* errbuf, string& err) noexcept nogil:
    if rc:
        err = _str(errbuf)
    return rc


cdef inline size_t _total(const vector[size_t]& sizes) noexcept nogil:
    cdef size_t total = 0
    cdef size_t i
    for i in range(sizes.size()):
        total += sizes[i]
    return total


cdef int _b_allreduce(PSet* ps, void* buf, size_t count, int dtype, int op,
                      string& err) noexcept nogil:
    cdef char errbuf[ERRLEN]
    errbuf[0] = 0
    if count == 0:
        return 0
    if ps.native != NULL:
        return _native_rc(ps.native.allreduce(ps.native.self, buf, count, dtype, op, errbuf,
                                              ERRLEN), errbuf, err)
    with gil:
        return _py_invoke((<object>ps.pygroup).allreduce,
                          (_view(buf, count * dtype_size(dtype), dtype), DTYPE_NAMES[dtype],
                           BACKEND_OPS[op]), err)


cdef int _b_broadcast(PSet* ps, void* buf, size_t nbytes, int root,
                      string& err) noexcept nogil:
    cdef char errbuf[ERRLEN]
    errbuf[0] = 0
    if nbytes == 0:
        return 0
    if ps.native != NULL:
        return _native_rc(ps.native.broadcast(ps.native.self, buf, nbytes, root, errbuf, ERRLEN),
                          errbuf, err)
    with gil:
        return _py_invoke((<object>ps.pygroup).broadcast,
                          (_view(buf, nbytes, FUSE_UINT8), root), err)


cdef inline bint _even(vector[size_t]& sizes) noexcept nogil:
    """Whether every member's part is as large (then part k begins at k times it, where the
    shared-memory reduce-scatter cuts its shards)."""
    cdef size_t i
    for i in range(1, sizes.size()):
        if sizes[i] != sizes[0]:
            return False
    return True


cdef int _b_allgatherv(PSet* ps, const void* send, size_t sendbytes, void* recv,
                       vector[size_t]& recvbytes, string& err) noexcept nogil:
    cdef char errbuf[ERRLEN]
    cdef size_t total = _total(recvbytes)
    errbuf[0] = 0
    if total == 0:
        return 0
    if ps.native != NULL:
        return _native_rc(ps.native.allgatherv(ps.native.self, send, sendbytes, recv,
                                               recvbytes.data(), errbuf, ERRLEN), errbuf, err)
    with gil:
        return _py_invoke((<object>ps.pygroup).allgatherv,
                          (_view(<void*>send, sendbytes, FUSE_UINT8),
                           _view(recv, total, FUSE_UINT8), list(recvbytes)), err)


cdef int _b_alltoallv(PSet* ps, const void* send, vector[size_t]& sendbytes,
                      void* recv, vector[size_t]& recvbytes, string& err) noexcept nogil:
    cdef char errbuf[ERRLEN]
    errbuf[0] = 0
    if ps.native != NULL:
        return _native_rc(ps.native.alltoallv(ps.native.self, send, sendbytes.data(), recv,
                                              recvbytes.data(), errbuf, ERRLEN), errbuf, err)
    with gil:
        return _py_invoke((<object>ps.pygroup).alltoallv,
                          (_view(<void*>send, _total(sendbytes), FUSE_UINT8), list(sendbytes),
                           _view(recv, _total(recvbytes), FUSE_UINT8), list(recvbytes)), err)


cdef int _b_reducescatter(PSet* ps, void* buf, vector[size_t]& counts, int dtype,
                          int op, string& err) noexcept nogil:
    """Leave this member's block of the reduction at the front of ``buf``.  A native table
    without reducescatter falls back to the Group's Python method, whose default
    (fuse.backends.base.Group.reducescatter) reduces everything and moves the block."""
    cdef char errbuf[ERRLEN]
    errbuf[0] = 0
    if ps.native != NULL and ps.native.reducescatter != NULL:
        return _native_rc(ps.native.reducescatter(ps.native.self, buf, counts.data(), dtype, op,
                                                  errbuf, ERRLEN), errbuf, err)
    with gil:
        return _py_invoke((<object>ps.pygroup).reducescatter,
                          (_view(buf, _total(counts) * dtype_size(dtype), dtype), list(counts),
                           DTYPE_NAMES[dtype], BACKEND_OPS[op]), err)


cdef bint _back_to_back(vector[Request*]& reqs, vector[size_t]& offsets) noexcept nogil:
    """True when every tensor is reduced in place and tensor i starts ``offsets[i]`` bytes
    after tensor 0, so that the fused response is one contiguous span of memory."""
    cdef size_t i
    cdef char* base
    if reqs.size() < 2 or reqs[0] == NULL:
        return False
    base = <char*>reqs[0].out
    for i in range(reqs.size()):
        if reqs[i] == NULL or reqs[i].inp != reqs[i].out:
            return False
        if <char*>reqs[i].out != base + offsets[i]:
            return False
    return True


cdef struct HalfJob:
    fuse_group_ops* ops
    char* buf
    size_t count
    int dtype
    int op
    double post
    char err[ERRLEN]


# The hierarchical allreduce's pipeline unit (Executor._reduce_hier): a quarter of the buffer
# within these bounds, so that the first reduce-scatter and the last allgather, which nothing
# overlaps, are short even for a few MiB, while each cross-host call is large enough to keep
# the link busy.
cdef size_t HIER_SEGMENT_MIN_BYTES = 1 << 20
cdef size_t HIER_SEGMENT_MAX_BYTES = 8 << 20


cdef int _run_half(void* arg) noexcept nogil:
    """The lane's share of a split allreduce: its half over the twin connection, then the
    postscale of that half."""
    cdef HalfJob* job = <HalfJob*>arg
    cdef int rc
    job.err[0] = 0
    rc = job.ops.allreduce(job.ops.self, job.buf, job.count, job.dtype, job.op, job.err, ERRLEN)
    if rc == 0:
        scale_buffer(job.buf, job.count, job.dtype, job.post)
    return rc


cdef inline int _shm_outcome(int rc, const char* errbuf, string& err) noexcept nogil:
    """An Executor outcome (EX_*) for what a shared-memory step returned; on a failure, the
    text the step wrote into ``errbuf`` goes to ``err``."""
    if rc == 0:
        return EX_OK
    err = _str(errbuf)
    return EX_STALL if rc == kShmStalled else EX_BACKEND


cdef void _start_cross(Lane* lane, Hierarchy* h, HalfJob* job, char* seg, size_t count,
                       int dtype, int op, double post) noexcept nogil:
    """Start this rank's shard of a segment of ``count`` elements at ``seg`` on the lane:
    reduced with its peers on the other hosts, then postscaled (Executor._reduce_hier)."""
    cdef size_t lo = h.local.shard_begin(count, h.local.index())
    cdef size_t hi = h.local.shard_begin(count, h.local.index() + 1)
    job.ops = h.cross.native
    job.buf = seg + lo * dtype_size(dtype)
    job.count = hi - lo
    job.dtype = dtype
    job.op = op
    job.post = post
    lane.start(_run_half, job)


cdef class Executor:
    """Runs the collectives of responses on this rank; owns the fusion buffer and the
    counters of :meth:`fuse._core.Engine.stats` that concern execution."""

    def __cinit__(self, records):
        self.fusion = FusionBufferManager()
        self.records = records
        self.lane = NULL

    def __dealloc__(self):
        if self.lane != NULL:
            lane_free(self.lane)

    cdef bint _via_shm(self, PSet* ps, size_t nbytes) noexcept nogil:
        """Whether an allreduce of ``nbytes`` goes through same-host shared memory: from
        FUSE_SHM_THRESHOLD up, and below it whatever is too large to travel inline, which
        would otherwise fall to the backend's ring, slower than shared memory at every size
        on one host (bench/studies/crossover.py).  With 2 ranks the inline limit (64 KiB over the
        set) lies above the shared-memory threshold (16 KiB) and this changes nothing; from 5
        ranks on a host it does (64 KiB / 8 ranks = 8 KiB)."""
        if ps.shm == NULL or self.shm_bytes == 0:
            return False
        return nbytes >= self.shm_bytes or (
            self.inline_bytes != 0 and nbytes * ps.ranks.size() > self.inline_bytes)

    cdef bint _via_hier(self, PSet* ps, size_t nbytes) noexcept nogil:
        """Whether an allreduce of ``nbytes`` goes hierarchically (the set spans hosts)."""
        return ps.hier != NULL and nbytes != 0 and nbytes >= ps.hier.min_bytes

    cdef int _reduce_hier(self, PSet* ps, char* buf, size_t count, int dtype, int op,
                          double post, string& err) noexcept nogil:
        """The hierarchical allreduce (fuse/engine/hierarchy.py): reduce-scatter among this
        host's ranks through shared memory, this rank's shard reduced with its peers on the
        other hosts over its own connection (every local rank at once, so each host's link
        carries the data once) and postscaled, then allgather on this host.

        Over a native connection the buffer goes in segments, pipelined: the lane thread
        reduces segment s across hosts while this thread reduce-scatters segment s + 1 and
        gathers segment s - 1, so the link is rarely idle while memory is copied.  Every
        local rank makes the same shared-memory calls in the same order, failures included:
        a rank whose cross-host part failed says so in the allgather of that segment, where
        all of the host's ranks stop together."""
        cdef Hierarchy* h = ps.hier
        cdef size_t dsize = dtype_size(dtype)
        cdef size_t step = min(max(count * dsize // 4, HIER_SEGMENT_MIN_BYTES),
                               HIER_SEGMENT_MAX_BYTES) // dsize
        cdef size_t nseg, s
        cdef bint lane_ok = True
        cdef int rc = 0, rc_cross = 0
        cdef string cross_err
        cdef char errbuf[ERRLEN]
        cdef HalfJob job
        self.st_hier += 1
        if h.cross.native == NULL:     # a backend driven through Python: one piece, in turn
            return self._hier_piece(h, buf, count, dtype, op, post, err)
        if self.lane == NULL:
            self.lane = lane_new()
        nseg = (count + step - 1) // step
        errbuf[0] = 0
        rc = h.local.reduce_scatter(buf, min(step, count), dtype, op, errbuf, ERRLEN)
        if rc != 0:
            return _shm_outcome(rc, errbuf, err)
        for s in range(nseg):
            if rc_cross == 0:
                _start_cross(self.lane, h, &job, buf + s * step * dsize,
                             min(step, count - s * step), dtype, op, post)
            if rc == 0 and s + 1 < nseg:
                rc = h.local.reduce_scatter(buf + (s + 1) * step * dsize,
                                            min(step, count - (s + 1) * step), dtype, op,
                                            errbuf, ERRLEN)
            if rc == 0 and s > 0:
                rc = h.local.allgather(buf + (s - 1) * step * dsize, step, dtype, lane_ok,
                                       errbuf, ERRLEN)
            if rc_cross == 0:
                rc_cross = self.lane.wait()
                if rc_cross != 0:
                    cross_err = _str(job.err)
            lane_ok = rc_cross == 0
            if rc != 0:
                break
        if rc == 0:
            rc = h.local.allgather(buf + (nseg - 1) * step * dsize,
                                   count - (nseg - 1) * step, dtype, lane_ok, errbuf, ERRLEN)
        if rc_cross != 0:
            err = cross_err
            return EX_BACKEND
        return _shm_outcome(rc, errbuf, err)

    cdef int _hier_piece(self, Hierarchy* h, char* buf, size_t count, int dtype, int op,
                         double post, string& err) noexcept nogil:
        """The three steps one after the other, for the whole buffer."""
        cdef size_t me = h.local.index()
        cdef size_t lo, hi
        cdef int rc
        cdef char errbuf[ERRLEN]
        cdef int rc_local
        errbuf[0] = 0
        rc_local = h.local.reduce_scatter(buf, count, dtype, op, errbuf, ERRLEN)
        if rc_local != 0:
            return _shm_outcome(rc_local, errbuf, err)
        lo = h.local.shard_begin(count, me)
        hi = h.local.shard_begin(count, me + 1)
        rc = self._reduce(h.cross, buf + lo * dtype_size(dtype), hi - lo, dtype, op, post, err)
        # even after a failure: the host's other ranks wait in it and learn of the failure
        rc_local = h.local.allgather(buf, count, dtype, rc == 0, errbuf, ERRLEN)
        if rc_local != 0 and rc == EX_OK:
            rc = _shm_outcome(rc_local, errbuf, err)
        return rc

    cdef int _reduce(self, PSet* ps, char* buf, size_t count, int dtype, int op, double post,
                     string& err) noexcept nogil:
        """Allreduce ``count`` elements at ``buf`` in place, then multiply by ``post``.  When
        the set's members share a host, large buffers go through shared memory; otherwise large
        buffers go as two halves at once, the second over the set's twin connection on the
        lane thread.  Every rank decides the same way from the same sizes, so they meet.
        Returns EX_OK, EX_BACKEND or EX_STALL (a member did not arrive in shared memory)."""
        cdef size_t dsize = dtype_size(dtype)
        cdef size_t half
        cdef HalfJob job
        cdef int rc, rc_lane
        if self._via_hier(ps, count * dsize):
            return self._reduce_hier(ps, buf, count, dtype, op, post, err)
        if self._via_shm(ps, count * dsize):
            # every member is on this host: no backend at all (the postscale is applied by
            # each part's owner while the part is in cache)
            return self._reduce_shm(ps, buf, count, dtype, op, post, err)
        if ps.twin == NULL or self.split_bytes == 0 or count * dsize < self.split_bytes:
            rc = _b_allreduce(ps, buf, count, dtype, op, err)
            if rc == 0:
                scale_buffer(buf, count, dtype, post)
            return EX_BACKEND if rc else EX_OK
        if self.lane == NULL:
            self.lane = lane_new()
        half = count // 2
        job.ops = ps.twin
        job.buf = buf + half * dsize
        job.count = count - half
        job.dtype = dtype
        job.op = op
        job.post = post
        self.lane.start(_run_half, &job)
        rc = _b_allreduce(ps, buf, half, dtype, op, err)
        if rc == 0:
            scale_buffer(buf, half, dtype, post)
        rc_lane = self.lane.wait()      # always: the job lives on this stack
        self.st_split += 1
        if rc == 0 and rc_lane != 0:
            err = _str(job.err)
            rc = rc_lane
        return EX_BACKEND if rc else EX_OK

    cdef void _allreduce_inline(self, Response& resp, vector[Request*]& reqs) noexcept nogil:
        """An allreduce the coordinator computed: its results came with the response."""
        cdef size_t i
        cdef bint tl = tl_on(self.tl)
        self.st_inline += resp.names.size()
        if tl:
            tl_span_all(self.tl, resp.names, b'B', TLW_INLINE, resp.kind)
        for i in range(resp.names.size()):
            if reqs[i] != NULL and resp.payloads[i].size():
                memcpy(reqs[i].out, resp.payloads[i].data(), resp.payloads[i].size())
        if tl:
            tl_span_all(self.tl, resp.names, b'E', TLW_INLINE, resp.kind)

    cdef int allreduce(self, Response& resp, PSet* ps, vector[Request*]& reqs,
                       string& err) noexcept nogil:
        """``reqs``: this rank's request per tensor of the response (NULL: this rank joined and
        contributes zeros)."""
        cdef size_t i, n = resp.names.size()
        cdef size_t dsize = dtype_size(resp.dtype)
        cdef vector[size_t] offsets
        cdef size_t total = 0
        cdef char* buf
        cdef int bop = _backend_op(resp.op)
        cdef double post = _postscale(resp.op, resp.postscale, ps.ranks.size())
        cdef bint tl = tl_on(self.tl)
        cdef int rc
        cdef uint8_t act = TLW_BACKEND
        if resp.inline_data:
            self._allreduce_inline(resp, reqs)
            return EX_OK
        for i in range(n):
            offsets.push_back(total)
            total += <size_t>_numel(resp.shapes[i]) * dsize
        offsets.push_back(total)            # tensor i spans offsets[i] .. offsets[i + 1]
        cdef bint fused = not (n == 1 and reqs[0] != NULL)
        cdef double t0 = now_seconds()
        cdef double t1, t2
        self.st_allreduces += 1
        self.st_tensors += n
        self.st_bytes += total
        if fused and _back_to_back(reqs, offsets):
            # The caller laid these tensors out in one allocation in response order (the torch
            # DistributedOptimizer does so for gradients): reduce the span where it lies.  This
            # is a local choice; every rank still makes the same single backend call.
            fused = False
            self.st_adjacent += 1
        if not fused:                       # reduced where it lies
            buf = <char*>reqs[0].out
            if reqs[0].inp != reqs[0].out:
                memcpy(buf, reqs[0].inp, total)
        else:
            self.st_fused += 1
            if tl:
                tl_span_all(self.tl, resp.names, b'B', TLW_MEMCPY_IN, resp.kind)
            buf = <char*>self.fusion.get(total)
            if buf == NULL and total:
                err = _str("out of memory for the fusion buffer (") + _int_str(total) + _str(" bytes)")
                return EX_LOCAL
            for i in range(n):
                if reqs[i] != NULL:
                    memcpy(buf + offsets[i], reqs[i].inp, offsets[i + 1] - offsets[i])
                else:                           # a joined rank contributes zeros
                    memset(buf + offsets[i], 0, offsets[i + 1] - offsets[i])
        scale_buffer(buf, total // dsize if dsize else 0, resp.dtype, resp.prescale)
        if tl:
            if fused:
                tl_span_all(self.tl, resp.names, b'E', TLW_MEMCPY_IN, resp.kind)
            if self._via_hier(ps, total):
                act = TLW_HIER
            elif self._via_shm(ps, total):
                act = TLW_SHM
            tl_span_all(self.tl, resp.names, b'B', act, resp.kind)
        t1 = now_seconds()
        rc = self._reduce(ps, buf, total // dsize if dsize else 0, resp.dtype, bop, post, err)
        if rc != EX_OK:
            return rc
        t2 = now_seconds()
        if tl:
            tl_span_all(self.tl, resp.names, b'E', act, resp.kind)
        if fused:
            if tl:
                tl_span_all(self.tl, resp.names, b'B', TLW_MEMCPY_OUT, resp.kind)
            for i in range(n):
                if reqs[i] != NULL:
                    memcpy(reqs[i].out, buf + offsets[i], offsets[i + 1] - offsets[i])
            if tl:
                tl_span_all(self.tl, resp.names, b'E', TLW_MEMCPY_OUT, resp.kind)
        self.st_backend_s += t2 - t1
        self.st_copy_s += (t1 - t0) + (now_seconds() - t2)
        return EX_OK

    cdef int broadcast(self, Response& resp, PSet* ps, Request* r, string& err) noexcept nogil:
        cdef size_t nbytes = <size_t>_numel(r.shape) * dtype_size(r.dtype)
        cdef vector[size_t] at, sizes
        cdef vector[int] owner
        if resp.inline_data:
            memcpy(r.out, resp.payloads[0].data(), nbytes)
            return EX_OK
        if r.inp != r.out and r.inp != NULL:
            memcpy(r.out, r.inp, nbytes)
        if self.gathers_via_shm(ps) and nbytes:
            at.push_back(0)
            sizes.push_back(nbytes)
            owner.push_back(_position(ps, resp.root))
            return self._gather_shm(ps, <char*>r.out, at, sizes, owner, err)
        if _b_broadcast(ps, r.out, nbytes, _position(ps, resp.root), err) != 0:
            return EX_BACKEND
        return EX_OK

    cdef int allgather(self, Response& resp, PSet* ps, Request* r, string& err) noexcept nogil:
        cdef size_t row, i
        cdef vector[size_t] recvbytes
        cdef vector[int64_t] out_shape
        cdef int64_t rows = 0
        cdef void* out
        row = <size_t>_row_elems(r.shape) * dtype_size(r.dtype)
        for i in range(resp.args.size()):
            recvbytes.push_back(<size_t>resp.args[i] * row)
            rows += resp.args[i]
        out_shape = r.shape
        out_shape[0] = rows
        out = self._allocate(r.handle, out_shape, <size_t>rows * row, err)
        if out == NULL and rows * row:
            return EX_LOCAL
        if (ps.hier != NULL and rows * row != 0
                and <size_t>(rows * row) >= ps.hier.gather_min_bytes):
            return self._allgather_hier(ps, r.inp, <char*>out, recvbytes, err)
        if self.gathers_via_shm(ps) and rows * row:
            return self._allgather_shm(ps, r.inp, <char*>out, recvbytes, err)
        if _b_allgatherv(ps, r.inp, <size_t>r.shape[0] * row, out, recvbytes, err) != 0:
            return EX_BACKEND
        return EX_OK

    cdef int _allgather_hier(self, PSet* ps, const void* inp, char* out,
                             vector[size_t]& recvbytes, string& err) noexcept nogil:
        """The hierarchical allgather (fuse/engine/hierarchy.py): gather with this rank's peers
        on the other hosts (each host's link carries every other host's data once), put their
        rows in place, then share on this host through shared memory: every local rank owns
        the rows of the members with its local index."""
        cdef Hierarchy* h = ps.hier
        cdef PSet* cross = h.cross
        cdef vector[size_t] offsets, cross_bytes
        cdef vector[int] owners
        cdef size_t i, j, pos = 0, total = 0
        cdef char* staging
        cdef int rc, rc_local
        cdef char errbuf[ERRLEN]
        self.st_hier_gather += 1
        for i in range(recvbytes.size()):
            offsets.push_back(pos)
            pos += recvbytes[i]
            owners.push_back(h.local_index[i])
        for i in range(cross.ranks.size()):
            j = <size_t>_position(ps, cross.ranks[i])
            cross_bytes.push_back(recvbytes[j])
            total += recvbytes[j]
        staging = <char*>self.fusion.get(total if total else 1)
        if staging == NULL:
            err = _str("out of memory for the fusion buffer (") + _int_str(total) + _str(" bytes)")
            rc = 1     # still through the host's step below, so that the others hear of it
        else:
            rc = _b_allgatherv(cross, inp, recvbytes[ps.index], staging, cross_bytes, err)
        if rc == 0:
            pos = 0
            for i in range(cross.ranks.size()):
                j = <size_t>_position(ps, cross.ranks[i])
                memcpy(out + offsets[j], staging + pos, recvbytes[j])
                pos += recvbytes[j]
        errbuf[0] = 0
        rc_local = h.local.allgather_ranges(out, offsets, recvbytes, owners, rc == 0, errbuf,
                                            ERRLEN)
        if rc_local != 0 and rc == 0:
            return _shm_outcome(rc_local, errbuf, err)
        return EX_BACKEND if rc else EX_OK

    cdef bint gathers_via_shm(self, PSet* ps) noexcept nogil:
        """Whether an allgather, a broadcast or an alltoall among the set's members goes
        through same-host shared memory (every member on this host, shared memory not turned off), at every
        size: Gloo sends each member's data through its TCP pairs, two kernel copies and a
        thread wake-up per message, where shared memory copies it once into the segment and
        once out (bench/suite/collectives.py compares both with torch.distributed)."""
        return ps.shm != NULL and ps.hier == NULL and self.shm_bytes != 0

    cdef int _allgather_shm(self, PSet* ps, const void* inp, char* out,
                            vector[size_t]& recvbytes, string& err) noexcept nogil:
        """An allgather among members on this host: each member's rows go from its output
        through its segment into the others' outputs."""
        cdef vector[size_t] offsets
        cdef vector[int] owners
        cdef size_t i, pos = 0
        for i in range(recvbytes.size()):
            offsets.push_back(pos)
            owners.push_back(<int>i)
            pos += recvbytes[i]
        if recvbytes[ps.index]:
            memcpy(out + offsets[ps.index], inp, recvbytes[ps.index])
        return self._gather_shm(ps, out, offsets, recvbytes, owners, err)

    cdef int _gather_shm(self, PSet* ps, char* buf, vector[size_t]& offsets,
                         vector[size_t]& nbytes, vector[int]& owners, string& err) noexcept nogil:
        """Range i of ``buf`` (``nbytes[i]`` from ``offsets[i]``), filled on member
        ``owners[i]``, copied to every member through shared memory."""
        cdef char errbuf[ERRLEN]
        cdef int rc
        errbuf[0] = 0
        rc = ps.shm.allgather_ranges(buf, offsets, nbytes, owners, True, errbuf, ERRLEN)
        self.st_shm_gather += 1
        return _shm_outcome(rc, errbuf, err)

    cdef int alltoall(self, Response& resp, PSet* ps, Request* r, vector[int64_t]& recv_splits,
                      string& err) noexcept nogil:
        """``recv_splits``: filled with the rows received from each member."""
        cdef size_t row, j, n = ps.ranks.size(), me = <size_t>ps.index
        cdef vector[size_t] sendbytes
        cdef vector[size_t] recvbytes
        cdef vector[int64_t] out_shape
        cdef int64_t rows = 0
        cdef void* out
        row = <size_t>_row_elems(r.shape) * dtype_size(r.dtype)
        recv_splits.clear()
        for j in range(n):
            sendbytes.push_back(<size_t>resp.args[me * n + j] * row)
            recvbytes.push_back(<size_t>resp.args[j * n + me] * row)
            rows += resp.args[j * n + me]
            recv_splits.push_back(resp.args[j * n + me])
        out_shape = r.shape
        out_shape[0] = rows
        out = self._allocate(r.handle, out_shape, <size_t>rows * row, err)
        if out == NULL and rows * row:
            return EX_LOCAL
        if self.gathers_via_shm(ps):
            return self._alltoall_shm(ps, resp, <const char*>r.inp, sendbytes, <char*>out,
                                      recvbytes, row, err)
        if _b_alltoallv(ps, r.inp, sendbytes, out, recvbytes, err) != 0:
            return EX_BACKEND
        return EX_OK

    cdef int _alltoall_shm(self, PSet* ps, Response& resp, const char* send,
                           vector[size_t]& sendbytes, char* out, vector[size_t]& recvbytes,
                           size_t row, string& err) noexcept nogil:
        """An alltoall among members on this host: each block goes from the sender's input
        through its segment into the receiver's output (see gathers_via_shm)."""
        cdef vector[size_t] send_off, recv_off
        cdef size_t j, spos = 0, rpos = 0, longest = 0
        cdef char errbuf[ERRLEN]
        cdef int rc
        for j in range(sendbytes.size()):
            send_off.push_back(spos)
            recv_off.push_back(rpos)
            spos += sendbytes[j]
            rpos += recvbytes[j]
        for j in range(resp.args.size()):      # every rank's splits: the same steps everywhere
            longest = max(longest, <size_t>resp.args[j] * row)
        if longest == 0:
            return EX_OK
        errbuf[0] = 0
        rc = ps.shm.alltoall(send, send_off, sendbytes, out, recv_off, recvbytes, longest,
                             errbuf, ERRLEN)
        self.st_shm_gather += 1
        return _shm_outcome(rc, errbuf, err)

    cdef int reducescatter(self, Response& resp, PSet* ps, Request* r, string& err) noexcept nogil:
        cdef size_t dsize = dtype_size(resp.dtype)
        cdef size_t n = ps.ranks.size(), i
        cdef int64_t dim0, rowel, my_rows = 0
        cdef vector[size_t] counts
        cdef vector[int64_t] out_shape
        cdef size_t total
        cdef char* buf
        cdef void* out
        cdef double post = resp.postscale
        cdef int rc
        cdef size_t offset = 0
        dim0 = r.shape[0] if r.shape.size() else 1
        rowel = _row_elems(r.shape)
        cdef size_t rows_i
        for i in range(n):     # rows spread evenly, the remainder to the first ranks
            rows_i = <size_t>(dim0 // <int64_t>n)
            if <int64_t>i < dim0 % <int64_t>n:
                rows_i += 1
            counts.push_back(rows_i * <size_t>rowel)
        my_rows = <int64_t>(counts[ps.index] // <size_t>rowel) if rowel else 0
        total = <size_t>_numel(r.shape) * dsize
        buf = <char*>self.fusion.get(total if total else 1)
        if buf == NULL:
            err = _str("out of memory for the fusion buffer (") + _int_str(total) + _str(" bytes)")
            return EX_LOCAL
        memcpy(buf, r.inp, total)
        scale_buffer(buf, total // dsize, resp.dtype, resp.prescale)
        post = _postscale(resp.op, post, n)
        if ps.shm != NULL and ps.hier == NULL and total:
            rc = self._reducescatter_shm(ps, buf, total // dsize, counts, resp.dtype,
                                         _backend_op(resp.op), post, err)
            if rc != EX_OK:
                return rc
        elif self._via_hier(ps, total):
            # across hosts of several ranks: the hierarchical allreduce carries each host's
            # share over its link once, where the backend's flat reduce-scatter sends most of
            # the buffer from every rank across (bench/results/sharded.md, 2x2 hosts)
            rc = self._reduce_hier(ps, buf, total // dsize, resp.dtype, _backend_op(resp.op),
                                   post, err)
            if rc != EX_OK:
                return rc
            for i in range(<size_t>ps.index):
                offset += counts[i]
            if offset and counts[ps.index]:
                memmove(buf, buf + offset * dsize, counts[ps.index] * dsize)
        else:
            if _b_reducescatter(ps, buf, counts, resp.dtype, _backend_op(resp.op), err) != 0:
                return EX_BACKEND
            scale_buffer(buf, counts[ps.index], resp.dtype, post)
        out_shape = r.shape
        if out_shape.size():
            out_shape[0] = my_rows
        out = self._allocate(r.handle, out_shape, counts[ps.index] * dsize, err)
        if out == NULL and counts[ps.index]:
            return EX_LOCAL
        if counts[ps.index]:
            memcpy(out, buf, counts[ps.index] * dsize)
        return EX_OK

    cdef int _reduce_shm(self, PSet* ps, char* buf, size_t count, int dtype, int op,
                         double post, string& err) noexcept nogil:
        """``buf`` reduced in place among the set's members through this host's shared memory,
        scaled by ``post``; a failure's text into ``err``."""
        cdef char errbuf[ERRLEN]
        cdef int rc
        errbuf[0] = 0
        rc = ps.shm.allreduce(buf, count, dtype, op, post, errbuf, ERRLEN)
        self.st_shm += 1
        return _shm_outcome(rc, errbuf, err)

    cdef int _reducescatter_shm(self, PSet* ps, char* buf, size_t count, vector[size_t]& counts,
                                int dtype, int op, double post, string& err) noexcept nogil:
        """A reduce-scatter among members that share this host, through shared memory: when
        every member's part is as large, each rank reduces its own part only; otherwise the
        whole buffer is reduced.  This member's part, scaled by ``post``, is then moved to the
        front of ``buf``, where the backend's reduce-scatter leaves it.  Gloo's reduce-scatter sends
        every part through its TCP pairs: 2.7 ms for 1 MiB at 2 ranks beside test jobs, where
        the shared-memory allreduce of all of it took 0.27 ms quiet (bench/results/allreduce.md);
        bench/suite/collectives.py compares both with torch.distributed."""
        cdef size_t dsize = dtype_size(dtype)
        cdef size_t offset = 0, i
        cdef int rc
        cdef char errbuf[ERRLEN]
        for i in range(<size_t>ps.index):
            offset += counts[i]
        if _even(counts):
            # the members' parts are ShmAllreduce's shards: each rank reduces only its own
            # (no allreduce's last phase, which would copy every other part back)
            errbuf[0] = 0
            rc = ps.shm.reduce_scatter(buf, count, dtype, op, errbuf, ERRLEN)
            self.st_shm += 1
            if rc:
                return _shm_outcome(rc, errbuf, err)
            scale_buffer(buf + offset * dsize, counts[ps.index], dtype, post)
        else:
            rc = self._reduce_shm(ps, buf, count, dtype, op, post, err)
            if rc != EX_OK:
                return rc
        if offset and counts[ps.index]:
            memmove(buf, buf + offset * dsize, counts[ps.index] * dsize)
        return EX_OK

    cdef void* _allocate(self, int64_t handle, vector[int64_t]& shape, size_t nbytes,
                         string& err) noexcept with gil:
        """Ask the caller's allocator for an output whose size only negotiation could tell."""
        cdef void* ptr = NULL
        try:
            spec = self.records.get(handle)
            if spec is None:
                raise RuntimeError(f"no record for handle {handle}")
            ptr = (<RequestSpec>spec).take_output(tuple(shape), nbytes)
            advise_huge_pages(ptr, nbytes)
        except BaseException as e:
            err = _str("could not allocate the output: ") + _exc_text(e)
            return NULL
        return ptr
