# cython: language_level=3
# distutils: language = c++
"""Running the coordinator's responses on this rank and completing its handles.

Responses arrive in the coordinator's order; each turns into at most one backend collective,
which the executor runs (it moves the data and knows nothing of handles).  Here: the
bookkeeping around it for this rank's requests: which of them a response covers, their
completion (done, or the error and its ErrorKind), process sets added and removed, and the
timeline's spans.  A backend failure is returned to the engine, which waits for its cause.
"""

from fuse.engine.protocol cimport *
from fuse.engine.executor cimport EX_OK, EX_BACKEND, EX_LOCAL


cdef class ResponseRunner:
    """Args: the engine's parts (see results.pxd)."""

    def __init__(self, HandleTable table, Submitter submitter, ProcessSets psets,
                 Executor executor):
        self.table = table
        self.submitter = submitter
        self.psets = psets
        self.executor = executor

    cdef int run(self, Response& resp, string& err) noexcept nogil:
        """Run one response; on the timeline (rank 0): QUEUE ends, then the activity.  Returns
        EX_BACKEND (with ``err``) when the backend collective failed, else EX_OK; then call
        close_spans."""
        cdef uint8_t act = TLW_INLINE if resp.inline_data else TLW_BACKEND
        cdef bint spans = resp.kind != K_ALLREDUCE and resp.error.size() == 0 and (
            resp.kind <= K_REDUCESCATTER)
        if tl_on(self.tl):
            self._tl_all(resp, b'E', TLW_QUEUE)
            if spans:
                self._tl_all(resp, b'B', act)
        return self._run(resp, err)

    cdef void close_spans(self, Response& resp) noexcept nogil:
        """Timeline: <KIND> ends for the tensors this rank did not finish (not a member, lost)."""
        cdef size_t i
        if tl_on(self.tl):
            for i in range(resp.names.size()):
                self._tl_close(resp.names[i], resp.dtype, resp.shapes[i])

    cdef int _run(self, Response& resp, string& err) noexcept nogil:
        cdef size_t i
        cdef PSet* ps
        if resp.error.size():
            for i in range(resp.names.size()):
                self.finish(_key(resp.pset, resp.names[i]), H_ERROR, resp.error,
                            resp.error_kind)
            return EX_OK
        if resp.kind == K_PSET_ADD:
            self._add_set(resp)
            return EX_OK
        if self.psets.map.count(resp.pset) == 0:
            return EX_OK
        ps = &self.psets.map[resp.pset]
        if ps.index < 0:
            return EX_OK
        self.submitter.learn(resp)
        if resp.on_device and resp.kind <= K_REDUCESCATTER:
            return self._device(resp, ps, err)
        if resp.kind == K_ALLREDUCE:
            return self._allreduce(resp, ps, err)
        elif resp.kind <= K_REDUCESCATTER:
            return self._single(resp, ps, err)
        elif resp.kind == K_BARRIER:
            self._finish_ok(_key(resp.pset, resp.names[0]), 0)
        elif resp.kind == K_JOIN:
            self._finish_ok(_key(resp.pset, resp.names[0]), resp.last_joined)
        elif resp.kind == K_PSET_REMOVE:
            self._remove_set(resp)
        return EX_OK

    # ---- the collectives: the executor moves the data, this completes the handles

    cdef int _allreduce(self, Response& resp, PSet* ps, string& err) noexcept nogil:
        cdef size_t i
        cdef unordered_map[string, Request].iterator it
        cdef int rc
        self.exec_reqs.clear()
        for i in range(resp.names.size()):
            it = self.submitter.inflight.find(_key(resp.pset, resp.names[i]))
            self.exec_reqs.push_back(&deref_req(it) if it != self.submitter.inflight.end() else NULL)
        return self._settle(resp, self.executor.allreduce(resp, ps, self.exec_reqs, err), err)

    cdef int _single(self, Response& resp, PSet* ps, string& err) noexcept nogil:
        """A collective of one tensor: broadcast, allgather, alltoall or reducescatter."""
        cdef string key = _key(resp.pset, resp.names[0])
        cdef unordered_map[string, Request].iterator it = self.submitter.inflight.find(key)
        cdef Request* r
        cdef vector[int64_t] recv_splits
        cdef int rc
        if it == self.submitter.inflight.end():
            return EX_OK
        r = &deref_req(it)
        if resp.kind == K_BROADCAST:
            rc = self.executor.broadcast(resp, ps, r, err)
        elif resp.kind == K_ALLGATHER:
            rc = self.executor.allgather(resp, ps, r, err)
        elif resp.kind == K_ALLTOALL:
            rc = self.executor.alltoall(resp, ps, r, recv_splits, err)
            self.table.set_aux(r.handle, recv_splits)     # wait() returns the received splits
        else:
            rc = self.executor.reducescatter(resp, ps, r, err)
        return self._settle(resp, rc, err)

    cdef int _settle(self, Response& resp, int rc, const string& err) noexcept nogil:
        """Complete the response's handles as the executor's ``rc`` says: done, or this
        rank's own error (a backend failure is the engine's to handle).  Returns ``rc``."""
        if rc == EX_LOCAL:
            self._finish_all(resp, H_ERROR, err, ERR_INTERNAL)
        elif rc == EX_OK:
            self._finish_all(resp, H_DONE, string(b""), 0)
        return rc

    cdef int _device(self, Response& resp, PSet* ps, string& err) noexcept nogil:
        """A response on device tensors: the device executor enqueues it on the GPU backend's
        stream (it never waits for the device) and the handles complete; whoever waits for
        one orders its stream after the collective's event."""
        cdef size_t i
        cdef unordered_map[string, Request].iterator it
        cdef vector[int64_t] handles
        cdef vector[int64_t] recv_splits
        cdef bint spans = resp.kind == K_ALLREDUCE and tl_on(self.tl)
        for i in range(resp.names.size()):
            it = self.submitter.inflight.find(_key(resp.pset, resp.names[i]))
            if it == self.submitter.inflight.end():
                err = _str("device ") + _str(_kind_name(resp.kind)) + _str(" of tensor '") + \
                    resp.names[i] + _str("': this rank has no request for it")
                self._finish_all(resp, H_ERROR, err, ERR_INTERNAL)
                return EX_OK
            handles.push_back(deref_req(it).handle)
        if spans:
            self._tl_all(resp, b'B', TLW_BACKEND)
        with gil:
            try:
                if self.device_executor is None:
                    raise RuntimeError("no device executor on this rank (the GPU backend "
                                       "could not start here)")
                received = self.device_executor.run(
                    resp.kind, [self.executor.records[h].device for h in handles], resp.dtype,
                    resp.op, resp.prescale, resp.postscale, _position(ps, resp.root),
                    list(ps.ranks), ps.index, list(resp.args), resp.pset,
                    <object>ps.pygroup if ps.pygroup != NULL else None)
                if received is not None:
                    for v in received:
                        recv_splits.push_back(v)
            except BaseException as e:
                err = _str("device ") + _str(_kind_name(resp.kind)) + _str(" of tensor '") + \
                    resp.names[0] + _str("' failed: ") + _exc_text(e)
                return EX_BACKEND
        if resp.kind == K_ALLTOALL:
            self.table.set_aux(handles[0], recv_splits)   # wait() returns the received splits
        elif resp.kind == K_ALLREDUCE:      # the autotuner scores allreduced bytes
            self.executor.st_allreduces += 1
            self.executor.st_tensors += resp.names.size()
            for i in range(resp.shapes.size()):
                self.executor.st_bytes += <size_t>_numel(resp.shapes[i]) * dtype_size(resp.dtype)
        self._finish_all(resp, H_DONE, string(b""), 0)
        return EX_OK

    cdef void _add_set(self, Response& resp) noexcept nogil:
        cdef string key = _key(resp.pset, resp.names[0])
        cdef string err
        cdef int new_id = self.psets.add(resp.args, err)
        if err.size():
            self.finish(key, H_ERROR, err, ERR_BACKEND)
        else:
            self._finish_ok(key, new_id)

    cdef void _remove_set(self, Response& resp) noexcept nogil:
        cdef int pset_id = <int>resp.args[0]
        self.psets.remove(pset_id)
        with gil:
            if self.device_executor is not None:
                self.device_executor.forget_set(pset_id)
        self._finish_ok(_key(resp.pset, resp.names[0]), pset_id)

    # ---- completing handles

    cdef void finish(self, const string& key, int status, const string& error,
                     int error_kind) noexcept nogil:
        """This rank's request ``key`` is over: forget it and complete its handle."""
        cdef unordered_map[string, Request].iterator it = self.submitter.inflight.find(key)
        if it == self.submitter.inflight.end():
            return
        cdef int64_t handle = deref_req(it).handle
        if tl_on(self.tl):          # before the handle completes (see tl_close)
            self._tl_close(deref_req(it).name, deref_req(it).dtype, deref_req(it).shape)
        self.submitter.inflight.erase(it)
        self.table.retire(key, handle, status, error, error_kind)

    cdef void _finish_ok(self, const string& key, int64_t value) noexcept nogil:
        cdef unordered_map[string, Request].iterator it = self.submitter.inflight.find(key)
        if it == self.submitter.inflight.end():
            return
        self.table.set_value(deref_req(it).handle, value)
        self.finish(key, H_DONE, string(b""), 0)

    cdef void _finish_all(self, Response& resp, int status, const string& error,
                          int kind) noexcept nogil:
        cdef size_t i
        for i in range(resp.names.size()):
            self.finish(_key(resp.pset, resp.names[i]), status, error, kind)

    # ---- timeline

    cdef void _tl_all(self, Response& resp, char ph, uint8_t what) noexcept nogil:
        """The same span boundary for every tensor of a (fused) response."""
        tl_span_all(self.tl, resp.names, ph, what, resp.kind)

    cdef void _tl_close(self, const string& name, int dtype,
                        const vector[int64_t]& shape) noexcept nogil:
        cdef string args = _str(dtype_name(dtype))
        args.push_back(0)
        args.append(_shape_str(shape))
        tl_close(self.tl, name, args)
