# cython: language_level=3
# distutils: language = c++
"""This rank's side of negotiation: what it has asked for and what the coordinator's response
cache lets it send in short.

The engine hands each batch of queued requests to :meth:`Submitter.pack`, which records them as
in flight and writes one MSG_REQUESTS frame: the full description of a tensor the first time,
its cache slot (8 bytes) once the coordinator has assigned one and the signature is unchanged.
Small allreduces (and a small broadcast's root) carry their values along, so that the
coordinator computes the result itself.  :meth:`learn` remembers the slots responses assign;
:meth:`repack` answers the coordinator's MSG_STALE (a slot we used was evicted).
"""

from fuse.engine.protocol cimport *


cdef class Submitter:
    """Args:
        rank: this rank.
        psets: the engine's process sets.
        config: the knobs (inline_threshold, shm_threshold, cache_capacity).
    """

    def __init__(self, int rank, ProcessSets psets, config):
        self.rank = rank
        self.psets = psets
        self.inline_threshold = config.inline_threshold
        self.shm_threshold = config.shm_threshold
        self.cache_capacity = config.cache_capacity

    cdef void pack(self, vector[Request]& batch, string& msg) noexcept nogil:
        """Record ``batch`` as in flight and write the MSG_REQUESTS frame that asks for it."""
        cdef string full
        cdef string hits
        cdef uint32_t nfull = 0
        cdef uint32_t nhits = 0
        cdef string key
        cdef unordered_map[string, WorkerCache].iterator it
        for r in batch:
            key = _key(r.pset, r.name)
            self._attach_inline(r)
            self.inflight[key] = r
            it = self.wcache.find(key)
            if (self.cache_capacity and it != self.wcache.end()
                    and _same_signature(r, deref_wc(it).sig) and r.group_key.size() == 0):
                write_cache_hit(hits, deref_wc(it).slot, deref_wc(it).gen, r.data)
                self.sent_hits[(<uint64_t>deref_wc(it).slot << 32) | deref_wc(it).gen] = key
                nhits += 1
            else:
                _write_request(full, r)
                nfull += 1
        frame_requests(msg, nfull, full, nhits, hits)

    cdef bint repack(self, uint32_t slot, uint32_t gen, string& msg) noexcept nogil:
        """The coordinator evicted a cache slot we used: write the full request into ``msg``
        instead.  False when there is nothing to resend."""
        cdef uint64_t k = (<uint64_t>slot << 32) | gen
        cdef string key
        if self.sent_hits.count(k) == 0:
            return False
        key = self.sent_hits[k]
        self.sent_hits.erase(k)
        if self.wcache.count(key) and self.wcache[key].gen == gen:
            self.wcache.erase(key)
        if self.inflight.count(key) == 0:
            return False
        cdef string full
        _write_request(full, self.inflight[key])
        frame_requests(msg, 1, full, 0, string(b""))
        return True

    cdef void learn(self, const Response& resp) noexcept nogil:
        """Remember the slots the coordinator assigned, so the next submission is a hit."""
        cdef size_t i
        cdef string key
        cdef string old
        cdef WorkerCache wc
        for i in range(resp.names.size()):
            if resp.slots[i] == NO_SLOT:
                continue
            key = _key(resp.pset, resp.names[i])
            if self.wslot_owner.count(resp.slots[i]):
                old = self.wslot_owner[resp.slots[i]]
                if old != key and self.wcache.count(old) and self.wcache[old].slot == resp.slots[i]:
                    self.wcache.erase(old)
            wc.slot = resp.slots[i]
            wc.gen = resp.gens[i]
            wc.sig = _response_signature(resp, resp.shapes[i])
            self.wcache[key] = wc
            self.wslot_owner[resp.slots[i]] = key

    cdef bint inlines(self, int kind, int pset, size_t nbytes) noexcept nogil:
        """Whether a collective (``kind``) of ``nbytes`` per member in process set ``pset``
        travels inline with negotiation.  Where the set reduces through same-host shared
        memory, that path takes every allreduce from FUSE_SHM_THRESHOLD up, inline-sized or
        not: it is the faster one there (bench/studies/crossover.py measures where the two cross), and
        every rank decides alike, since shared memory is installed on all of them before the
        engine starts."""
        cdef PSet* ps
        if self.inline_threshold == 0 or nbytes == 0 or self.psets.map.count(pset) == 0:
            return False
        ps = &self.psets.map[pset]
        if (kind == K_ALLREDUCE and ps.shm != NULL and self.shm_threshold != 0
                and nbytes >= self.shm_threshold):
            return False
        return nbytes * ps.ranks.size() <= self.inline_threshold

    cdef void _attach_inline(self, Request& r) noexcept nogil:
        """Small allreduces (and a small broadcast's root) send their values with the request:
        the coordinator then computes the result itself and no backend collective runs.  One
        round trip instead of negotiation plus a ring, for latency-bound tensors."""
        cdef size_t nbytes
        if self.inline_threshold == 0 or self.psets.map.count(r.pset) == 0:
            return
        if not (r.kind == K_ALLREDUCE or (r.kind == K_BROADCAST and r.root == self.rank)):
            return
        if r.on_device:         # the values are in device memory: the device executor moves them
            return
        nbytes = <size_t>_numel(r.shape) * dtype_size(r.dtype)
        if not self.inlines(r.kind, r.pset, nbytes):
            return
        r.data.assign(<const char*>r.inp, nbytes)
        if r.kind == K_ALLREDUCE:
            scale_buffer(<void*>r.data.data(), nbytes // dtype_size(r.dtype), r.dtype, r.prescale)
