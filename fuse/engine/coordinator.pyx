# cython: language_level=3
# distutils: language = c++
"""The coordinator (rank 0): turns the requests of every rank into one ordered stream of
responses.

It keeps the table of tensors some rank has submitted, counts per tensor which members of the
process set are ready, checks that they agree (engine/validate.pyx: the mismatch messages users
see), computes small allreduces and broadcasts itself when every contribution carried its data,
assigns response-cache slots so that later submissions travel as 8 bytes, fuses ready
allreduces into one response up to the fusion threshold (:class:`Tuning`: the knobs autotune
moves), handles join and process-set add/remove, and names the ranks that keep others waiting
(the stall inspector).

It does no I/O of its own: the engine's loop (engine/loop.pyx) reads the workers' sockets and
hands it request messages; it sends frames to a rank and asks whether a rank is gone through
the control channel (engine/channel.pyx), and fails the whole job through the one-method
:class:`CoordinatorLink` the loop implements.  That is the whole seam, so the negotiation logic
reads without the transport around it.  Every rank builds one; only rank 0's receives requests.
Everything runs on the engine thread without the GIL, except the stall warning's log call.
"""

from libcpp.utility cimport pair

from fuse.engine.protocol cimport *
from fuse.engine.straggler cimport StragglerMeter
from fuse.engine.validate cimport validate


cdef inline bint _has(const vector[int]& v, int x) noexcept nogil:
    cdef size_t i
    for i in range(v.size()):
        if v[i] == x:
            return True
    return False


cdef class CoordinatorLink:
    """What the coordinator needs from the engine it runs in; :class:`fuse.engine.loop.Loop`
    implements it.  (This body is never called.)"""

    cdef void abort_job(self, int who, const string& msg, int kind) noexcept nogil:
        pass


cdef class Tuning:
    """The coordinator's autotuned knobs: the fusion threshold, the cycle time and the
    response-cache switch; the one interface to them (``Engine.tuning``).  Only the
    coordinator's values matter: it alone fuses, holds ready tensors and assigns cache slots.
    A second Python thread (the autotuner) sets them; the loop takes them at the start of its
    next coordinator step (Coordinator.apply_tuning).  Its lock is taken without the GIL, as
    everywhere."""

    def __cinit__(self):
        self.lock = lock_new()

    def __dealloc__(self):
        lock_free(self.lock)

    def __init__(self, ControlChannel channel, config):
        self.channel = channel
        self.cache_capacity = config.cache_capacity
        self.fusion_threshold = config.fusion_threshold
        self.cycle_time_s = config.cycle_time_ms / 1000.0
        self.cache_enabled = self.cache_capacity > 0

    def set(self, size_t fusion_threshold, double cycle_time_ms, bint cache_enabled):
        """New values, in force from the coordinator's next step (the cache only where
        FUSE_CACHE_CAPACITY allows one)."""
        with nogil:
            lock_acquire(self.lock)
            self.next_fusion_threshold = fusion_threshold
            self.next_cycle_time_s = cycle_time_ms / 1000.0
            self.next_cache_enabled = cache_enabled and self.cache_capacity > 0
            self.pending = True
            lock_release(self.lock)
            self.channel.wake()

    def values(self):
        """The values in force now: (fusion threshold, cycle time ms, cache)."""
        cdef size_t threshold
        cdef double cycle_s
        cdef cbool cache
        with nogil:
            lock_acquire(self.lock)
            threshold = self.fusion_threshold
            cycle_s = self.cycle_time_s
            cache = self.cache_enabled
            lock_release(self.lock)
        return (threshold, cycle_s * 1000.0, bool(cache))

    cdef int take(self) noexcept nogil:
        """The loop: put the values set() left in force.  Returns TUNED_CACHE_OFF when that
        turned the cache off (its slots are to be forgotten), else TUNED_KEPT."""
        cdef int outcome = TUNED_KEPT
        lock_acquire(self.lock)
        if self.pending:
            self.pending = False
            if self.cache_enabled and not self.next_cache_enabled:
                outcome = TUNED_CACHE_OFF
            self.fusion_threshold = self.next_fusion_threshold
            self.cycle_time_s = self.next_cycle_time_s
            self.cache_enabled = self.next_cache_enabled
        lock_release(self.lock)
        return outcome


cdef class Coordinator:

    def __init__(self, CoordinatorLink link, ControlChannel channel, config, log):
        self.link = link
        self.channel = channel
        self.log = log
        self.size = config.size
        self.tuning = Tuning(channel, config)
        self.zero_copy_bytes = config.zero_copy_threshold
        self.stall_check = not config.stall_check_disable
        self.stall_warn_s = config.stall_check_time_seconds
        self.stall_shutdown_s = config.stall_shutdown_seconds
        if config.stall_shutdown_time_seconds and not self.stall_shutdown_s:
            log.warning("FUSE_STALL_SHUTDOWN_TIME_SECONDS (%g) is below the stall warning time "
                        "(%g); ignoring it", config.stall_shutdown_time_seconds, self.stall_warn_s)
        self.cache_capacity = config.cache_capacity
        self.disable_group_fusion = config.disable_group_fusion
        self.next_pset_id = 1
        self.cache.resize(self.cache_capacity)
        self.meter = StragglerMeter(config.size, config.straggler_policy != "off",
                                    config.straggler_factor, config.straggler_window)
        self.straggler_hook = None

    def set_hosts(self, names):
        self.meter.set_hosts(names)

    def set_straggler_hook(self, hook):
        """``hook(what, rank, host, behind, lateness_s, cost_per_step_s, share)``, called on the
        engine thread (with the GIL) when the meter flags a rank or host, and every minute it
        stays flagged (fuse/worker/straggler.py: the warning, and the elastic driver's notice)."""
        self.straggler_hook = hook

    # ---- what the engine calls

    cdef void ingest_requests(self, int rank, Reader& rd) noexcept nogil:
        """A MSG_REQUESTS message from ``rank`` (``rd`` is past the type byte): full requests,
        then cache hits; a hit on a slot that was reused since is answered MSG_STALE and the
        rank sends the full request."""
        cdef uint32_t n, i, slot, gen
        cdef Request req
        cdef string frame
        cdef string data
        n = read_count(rd)
        for i in range(n):
            req = _read_request(rd)
            if rd.bad:
                break
            req.rank = rank
            self._add_request(req)
        n = read_count(rd)
        for i in range(n):
            read_cache_hit(rd, &slot, &gen, &data)
            if rd.bad:
                break
            if slot < self.cache.size() and self.cache[slot].used and self.cache[slot].gen == gen:
                req = self.cache[slot].tmpl
                req.rank = rank
                req.data.swap(data)
                self._add_request(req)
            else:
                frame.clear()
                frame_stale(frame, slot, gen)
                self.channel.send_to(rank, frame)
        if rd.bad:
            self.link.abort_job(rank, _str("sent a corrupt request message"), ERR_INTERNAL)

    cdef bint step(self) noexcept nogil:
        """Check for stalls, emit ready responses; True if it emitted."""
        cdef double now = now_seconds()
        if self.meter.enabled and now - self.meter.sample_start >= self.meter.sample_s:
            self._straggler_sample(now)
        if self.stall_check and self.table.size() and now - self.last_stall_check >= 1.0:
            self.last_stall_check = now
            self._check_stalls(now)
            self._send_alive()
        if self.ready.size():
            if (self.table.size() > self.ready.size()
                    and now - self.last_emit < self.tuning.cycle_time_s
                    and self._could_fuse_more()):
                return False               # others are partly submitted: give them a moment
            self._emit()
            return True
        return False

    cdef bint _could_fuse_more(self) noexcept nogil:
        """Whether a request some ranks have not submitted yet could join a ready response:
        only allreduces fuse, and only within one process set.  Anything else waits for
        nothing by being held: a world barrier that the ranks outside a process set sat in
        held every collective of that set back by the cycle time (1.25 ms each, against
        23 us, 4 ranks with a set of 2)."""
        cdef vector[int] sets
        cdef string key
        cdef Request* a
        cdef unordered_map[string, Pending].iterator it
        if self.tuning.fusion_threshold == 0:
            return False
        for key in self.ready:
            a = self._first(&self.table[key])
            if a != NULL and a.kind == K_ALLREDUCE:
                sets.push_back(a.pset)
        if sets.size() == 0:
            return False
        it = self.table.begin()
        while it != self.table.end():
            if not deref_pending(it).is_ready:
                a = self._first(&deref_pending(it))
                if a != NULL and a.kind == K_ALLREDUCE and _has(sets, a.pset):
                    return True
            inc_pending(it)
        return False

    cdef void rank_left(self, int rank) noexcept nogil:
        """Rank shut down cleanly: whatever still waits for it can never complete."""
        cdef vector[string] keys
        cdef string k
        cdef unordered_map[string, Pending].iterator it = self.table.begin()
        while it != self.table.end():
            if not deref_pending(it).is_ready:
                keys.push_back(it_key(it))
            inc_pending(it)
        for k in keys:
            self._check_ready(k)

    cdef int idle_timeout_ms(self) noexcept nogil:
        """How long the engine thread may sleep: forever when nothing is pending anywhere."""
        cdef double remaining
        if self.ready.size():
            remaining = self.tuning.cycle_time_s - (now_seconds() - self.last_emit)
            return <int>(remaining * 1000.0) + 1 if remaining > 0 else 0
        if self.table.size() and self.stall_check:
            return 1000
        return -1

    cdef void apply_tuning(self) noexcept nogil:
        """The loop: take the values Tuning.set() left, so that one step always sees one
        consistent set.  Turning the cache off forgets every slot; a worker's later hit on one
        is answered as stale and sent in full."""
        cdef size_t s
        if self.tuning.take() == TUNED_CACHE_OFF:
            for s in range(self.cache.size()):
                self.cache[s].used = False
            self.cache_index.clear()

    # ---- negotiation

    cdef void _add_request(self, Request& req) noexcept nogil:
        cdef string key = _key(req.pset, req.name)
        cdef PSet* ps
        cdef int pos
        cdef Pending* entry
        # the clock only where it is read: a new entry's first arrival (the stall check's age)
        # and every arrival while the straggler meter is on (otherwise one clock read per
        # request, per tensor of every step, for nothing)
        cdef double now = 0.0
        cdef double waited_alone
        cdef int host
        if self.psets.map.count(req.pset) == 0:
            self._reject(req, _str("process set ") + _int_str(req.pset) + _str(" does not exist"))
            return
        ps = &self.psets.map[req.pset]
        pos = _position(ps, req.rank)
        if pos < 0:
            self._reject(req, _str("rank ") + _int_str(req.rank) +
                         _str(" is not a member of process set ") + _int_str(req.pset))
            return
        if self.table.count(key) == 0:
            now = now_seconds()
            entry = &self.table[key]
            entry.reqs.resize(ps.ranks.size())
            entry.have.assign(ps.ranks.size(), 0)
            entry.count = 0
            entry.first_time = entry.last_time = entry.other_time = now   # the first arrival
            entry.last_host = -1
            entry.warned = False
            entry.is_ready = False
            entry.all_data = True
            entry.error_kind = ERR_INTERNAL
        entry = &self.table[key]
        if entry.have[pos]:
            return
        self._accumulate(entry, req)
        req.data.clear()
        entry.reqs[pos] = req
        entry.have[pos] = 1
        entry.count += 1
        if tl_on(self.tl):
            if entry.count == 1:
                tl_span(self.tl, req.name, b'B', TLW_NEGOTIATE, req.kind)
            tl_tick(self.tl, req.name, req.rank)
        if req.kind == K_JOIN:
            if not ps.joined[pos]:
                ps.joined[pos] = 1
                ps.joined_count += 1
            ps.last_joined = req.rank
            self._recheck_pset(req.pset)
        elif self.meter.enabled:
            # how long after the first rank this one came; if it is the last, how long the
            # others had waited for it alone, and the ranks of other hosts for its host
            if now == 0.0:
                now = now_seconds()
            self.meter.arrived(req.rank, now - entry.first_time)
            waited_alone = now - entry.last_time
            host = self.meter.host_of[req.rank]
            if host != entry.last_host:
                if entry.last_host >= 0:
                    entry.other_time = entry.last_time
                entry.last_host = host
            entry.last_time = now
            self._check_ready(key)
            if entry.is_ready and entry.count == <int>entry.have.size():
                self.meter.ready(req.rank, waited_alone if entry.count > 1 else 0.0,
                                 now - entry.other_time, now, key)
            return
        self._check_ready(key)

    cdef void _accumulate(self, Pending* entry, Request& req) noexcept nogil:
        """Fold a small collective's values into the entry as they arrive."""
        cdef Request* first = self._first(entry)
        if not entry.all_data:
            return
        if req.kind == K_BROADCAST:
            if req.data.size():
                entry.acc.swap(req.data)
            return
        if req.kind != K_ALLREDUCE or req.data.size() == 0:
            entry.all_data = False
            entry.acc.clear()
            return
        if first == NULL:
            entry.acc = req.data
            return
        if (first.kind != K_ALLREDUCE or first.dtype != req.dtype or first.op != req.op
                or req.data.size() != entry.acc.size()):
            entry.all_data = False      # validation reports the mismatch
            entry.acc.clear()
            return
        reduce_into(<void*>entry.acc.data(), req.data.data(),
                    req.data.size() // dtype_size(req.dtype), req.dtype, _backend_op(req.op))

    cdef bint _finish_inline(self, Pending* entry, Response* resp) noexcept nogil:
        """If the coordinator holds the whole result, put it in the response."""
        cdef Request* a = self._first(entry)
        cdef PSet* ps = &self.psets.map[a.pset]
        cdef size_t nbytes = <size_t>_numel(a.shape) * dtype_size(a.dtype)
        cdef size_t i
        cdef string zeros
        cdef double post
        if not entry.all_data or entry.acc.size() != nbytes or nbytes == 0:
            return False
        if a.kind == K_ALLREDUCE:
            for i in range(entry.have.size()):      # joined ranks contribute zeros
                if not entry.have[i] and (a.op == OP_MIN or a.op == OP_MAX or a.op == OP_PRODUCT):
                    zeros.assign(nbytes, <char>0)
                    reduce_into(<void*>entry.acc.data(), zeros.data(), nbytes // dtype_size(a.dtype),
                                a.dtype, _backend_op(a.op))
            post = _postscale(a.op, a.postscale, ps.ranks.size())
            scale_buffer(<void*>entry.acc.data(), nbytes // dtype_size(a.dtype), a.dtype, post)
        elif a.kind != K_BROADCAST:
            return False
        resp.inline_data = True
        resp.payloads.push_back(string(b""))
        resp.payloads.back().swap(entry.acc)
        return True

    cdef void _reject(self, Request& req, const string& why) noexcept nogil:
        """An error response for one request, sent to its rank only."""
        cdef Response resp
        cdef string frame
        cdef string body
        _sign_response(resp, req)
        resp.names.push_back(req.name)
        resp.shapes.push_back(req.shape)
        resp.slots.push_back(NO_SLOT)
        resp.gens.push_back(0)
        resp.error = why
        resp.error_kind = ERR_INTERNAL
        resp.last_joined = -1
        resp.inline_data = False
        _write_response(body, resp)
        frame_responses(frame, 1, body)
        self.channel.send_to(req.rank, frame)

    cdef void _recheck_pset(self, int pset) noexcept nogil:
        cdef vector[string] keys
        cdef unordered_map[string, Pending].iterator it = self.table.begin()
        cdef string k
        while it != self.table.end():
            k = it_key(it)
            if not deref_pending(it).is_ready and _key_pset(k) == pset:
                keys.push_back(k)
            inc_pending(it)
        for k in keys:
            self._check_ready(k)

    cdef void _check_ready(self, const string& key) noexcept nogil:
        cdef Pending* entry = &self.table[key]
        cdef Request* first = NULL
        cdef PSet* ps
        cdef size_t i
        cdef bint complete = True
        cdef string missing_gone
        cdef string joined_problem
        cdef string k
        if entry.is_ready:
            return
        for i in range(entry.have.size()):
            if entry.have[i]:
                first = &entry.reqs[i]
                break
        if first == NULL:
            return
        ps = &self.psets.map[first.pset]
        for i in range(entry.have.size()):
            if entry.have[i]:
                continue
            if ps.joined[i] and first.kind != K_JOIN:
                if first.kind != K_ALLREDUCE:
                    joined_problem = _str(_kind_name(first.kind))
                elif first.on_device:   # a joined rank has no device buffer to add zeros from
                    joined_problem = _str("a device (GPU) allreduce")
                continue
            complete = False
            if ps.ranks[i] != 0 and self.channel.rank_gone(ps.ranks[i]):
                missing_gone = _str("rank ") + _int_str(ps.ranks[i])
        if joined_problem.size():
            self._error_ready(key, joined_problem + _str(" is not supported with join at this time "
                              "(only allreduce is): a rank called join() while tensor '") +
                              first.name + _str("' was outstanding"), ERR_INTERNAL)
            return
        if not complete:
            if missing_gone.size():
                self._error_ready(key, missing_gone + _str(" has already shut down (called "
                                  "fuse.shutdown() or exited), so collective '") + first.name +
                                  _str("' can never complete"), ERR_SHUTDOWN)
            return
        entry.is_ready = True
        if tl_on(self.tl):
            self._tl_ready(first)
        if first.group_key.size() and first.group_size > 1:
            self.group_ready[first.group_key].push_back(key)
            if <int>self.group_ready[first.group_key].size() >= first.group_size:
                for k in self.group_ready[first.group_key]:
                    self.ready.push_back(k)
                self.group_ready.erase(first.group_key)
        else:
            self.ready.push_back(key)

    cdef void _error_ready(self, const string& key, const string& why, int kind) noexcept nogil:
        cdef Pending* entry = &self.table[key]
        entry.is_ready = True
        if tl_on(self.tl) and self._first(entry) != NULL:
            self._tl_ready(self._first(entry))
        entry.error = why
        entry.error_kind = kind
        self.ready.push_back(key)

    cdef size_t _entry_bytes(self, Pending* entry) noexcept nogil:
        cdef size_t i
        for i in range(entry.have.size()):
            if entry.have[i]:
                return <size_t>_numel(entry.reqs[i].shape) * dtype_size(entry.reqs[i].dtype)
        return 0

    cdef Request* _first(self, Pending* entry) noexcept nogil:
        cdef size_t i
        for i in range(entry.have.size()):
            if entry.have[i]:
                return &entry.reqs[i]
        return NULL

    cdef Response _make_response(self, Pending* entry) noexcept nogil:
        cdef Response resp
        cdef Request* a = self._first(entry)
        cdef PSet* ps = &self.psets.map[a.pset]
        cdef size_t i, j
        cdef int64_t n
        _sign_response(resp, a[0])
        resp.last_joined = -1
        resp.names.push_back(a.name)
        resp.shapes.push_back(a.shape)
        resp.slots.push_back(NO_SLOT)
        resp.gens.push_back(0)
        resp.inline_data = False
        resp.error = entry.error
        resp.error_kind = entry.error_kind
        if resp.error.size() == 0:
            resp.error = validate(entry, self.psets, self.size)
            resp.error_kind = ERR_MISMATCH
        if resp.error.size():
            return resp
        if a.kind == K_ALLREDUCE or a.kind == K_BROADCAST:
            self._finish_inline(entry, &resp)
        if a.kind == K_ALLGATHER:
            for i in range(entry.reqs.size()):
                resp.args.push_back(entry.reqs[i].shape[0])
        elif a.kind == K_ALLTOALL:
            for i in range(entry.reqs.size()):
                if entry.reqs[i].args.size():
                    for j in range(entry.reqs[i].args.size()):
                        resp.args.push_back(entry.reqs[i].args[j])
                else:
                    n = entry.reqs[i].shape[0] // <int64_t>ps.ranks.size()
                    for j in range(ps.ranks.size()):
                        resp.args.push_back(n)
        elif a.kind == K_JOIN:
            resp.last_joined = ps.last_joined
            ps.joined.assign(ps.ranks.size(), 0)
            ps.joined_count = 0
            ps.last_joined = -1
        elif a.kind == K_PSET_ADD:
            resp.args.push_back(self.next_pset_id)
            self.next_pset_id += 1
            for i in range(a.args.size()):
                resp.args.push_back(a.args[i])
        elif a.kind == K_PSET_REMOVE:
            resp.args.push_back(a.args[0])
        return resp

    cdef bint _fusable(self, Response* r, Pending* entry) noexcept nogil:
        cdef Request* b = self._first(entry)
        if entry.error.size() or b.kind != K_ALLREDUCE:
            return False
        if b.dtype != r.dtype or b.op != r.op or b.pset != r.pset or b.on_device != r.on_device:
            return False
        if b.prescale != r.prescale or b.postscale != r.postscale:
            return False
        if r.inline_data != (entry.all_data and entry.acc.size() ==
                             <size_t>_numel(b.shape) * dtype_size(b.dtype)):
            return False
        if validate(entry, self.psets, self.size).size():
            return False
        return True

    cdef void _assign_cache(self, Response* resp, size_t idx, Pending* entry, const string& key) noexcept nogil:
        """Give a negotiated allreduce a cache slot so later submissions travel as 8 bytes."""
        cdef uint32_t slot = NO_SLOT
        cdef uint32_t s
        cdef uint64_t oldest = 0xFFFFFFFFFFFFFFFF
        cdef unordered_map[string, uint32_t].iterator it
        if not self.tuning.cache_enabled:
            return
        self.cache_clock += 1
        it = self.cache_index.find(key)
        if it != self.cache_index.end():
            slot = it_u32(it)
            if _same_signature(self.cache[slot].tmpl, self._first(entry)[0]):
                self.cache[slot].last_use = self.cache_clock
                resp.slots[idx] = slot
                resp.gens[idx] = self.cache[slot].gen
                return
        else:
            for s in range(self.cache_capacity):
                if not self.cache[s].used:
                    slot = s
                    break
            if slot == NO_SLOT:      # evict the least recently used slot nobody is waiting on
                for s in range(self.cache_capacity):
                    if self.cache[s].last_use < oldest and self.table.count(self.cache[s].key) == 0:
                        oldest = self.cache[s].last_use
                        slot = s
            if slot == NO_SLOT:
                return
            if self.cache[slot].used:
                self.cache_index.erase(self.cache[slot].key)
        self.cache_gen += 1
        self.cache[slot].used = True
        self.cache[slot].key = key
        self.cache[slot].tmpl = self._first(entry)[0]
        self.cache[slot].tmpl.inp = NULL
        self.cache[slot].tmpl.out = NULL
        self.cache[slot].gen = self.cache_gen
        self.cache[slot].last_use = self.cache_clock
        self.cache_index[key] = slot
        resp.slots[idx] = slot
        resp.gens[idx] = self.cache_gen

    cdef void _emit(self) noexcept nogil:
        """Turn the ready list into responses (fusing allreduces) and send them, in one order,
        to every member of each response's process set."""
        cdef vector[string] keys
        cdef vector[cbool] taken
        cdef vector[Response] out
        cdef vector[vector[string]] out_keys
        cdef vector[string] bodies
        cdef vector[uint32_t] counts
        cdef Response resp
        cdef Pending* entry
        cdef Pending* other
        cdef size_t i, j, k, total
        cdef PSet* ps
        cdef string frame
        keys.swap(self.ready)
        self.st_cycles += 1
        taken.assign(keys.size(), False)
        for i in range(keys.size()):
            if taken[i]:
                continue
            taken[i] = True
            entry = &self.table[keys[i]]
            resp = self._make_response(entry)
            out_keys.push_back(vector[string]())
            out_keys.back().push_back(keys[i])
            if resp.kind == K_ALLREDUCE and resp.error.size() == 0:
                self._assign_cache(&resp, 0, entry, keys[i])
                total = self._entry_bytes(entry)
                for j in range(i + 1, keys.size()):
                    # A tensor above the zero-copy size is reduced where it lies: copying it
                    # into and out of the fusion buffer costs more than the extra call.
                    if (self.tuning.fusion_threshold == 0
                            or self._entry_bytes(entry) > self.zero_copy_bytes):
                        break           # no fusion, or the first tensor is reduced in place
                    if taken[j]:
                        continue
                    other = &self.table[keys[j]]
                    if self._entry_bytes(other) > self.zero_copy_bytes:
                        continue
                    if not self._fusable(&resp, other):
                        continue
                    if (self.disable_group_fusion and
                            self._first(other).group_key != self._first(entry).group_key):
                        continue
                    if total + self._entry_bytes(other) > self.tuning.fusion_threshold:
                        continue
                    if resp.inline_data and not self._finish_inline(other, &resp):
                        continue
                    total += self._entry_bytes(other)
                    taken[j] = True
                    resp.names.push_back(self._first(other).name)
                    resp.shapes.push_back(self._first(other).shape)
                    resp.slots.push_back(NO_SLOT)
                    resp.gens.push_back(0)
                    self._assign_cache(&resp, resp.names.size() - 1, other, keys[j])
                    out_keys.back().push_back(keys[j])
            out.push_back(resp)
        bodies.assign(self.size, string(b""))
        counts.assign(self.size, 0)
        for i in range(out.size()):
            ps = &self.psets.map[out[i].pset]
            frame.clear()
            _write_response(frame, out[i])
            for j in range(ps.ranks.size()):
                k = <size_t>ps.ranks[j]
                bodies[k].append(frame)
                counts[k] += 1
            for j in range(out_keys[i].size()):
                self.table.erase(out_keys[i][j])
        for k in range(<size_t>self.size):
            if counts[k] == 0:
                continue
            frame.clear()
            frame_responses(frame, counts[k], bodies[k])
            self.channel.send_to(<int>k, frame)
        self.last_emit = now_seconds()

    cdef void _send_alive(self) noexcept nogil:
        """Tell the workers rank 0 is alive while requests wait: a worker that stops hearing
        it while its own requests wait knows rank 0 is stopped or hung (liveness.pyx)."""
        cdef string frame
        frame_signal(frame, MSG_ALIVE)
        self.channel.send_all(frame, -1)

    cdef void _check_stalls(self, double now) noexcept nogil:
        """Horovod's stall inspector: name the ranks that keep others waiting."""
        cdef unordered_map[string, Pending].iterator it = self.table.begin()
        cdef Pending* e
        cdef Request* a
        cdef PSet* ps
        cdef size_t i
        cdef string report
        cdef string fatal
        cdef vector[string] per_rank
        cdef vector[int] per_rank_n
        cdef bint any_new = False
        cdef double age
        per_rank.assign(self.size, string(b""))
        per_rank_n.assign(self.size, 0)
        while it != self.table.end():
            e = &deref_pending(it)
            inc_pending(it)
            if e.is_ready:
                continue
            a = self._first(e)
            if a == NULL or a.kind == K_JOIN:
                continue
            age = now - e.first_time
            if age < self.stall_warn_s:
                continue
            if not e.warned:
                any_new = True
                e.warned = True
            ps = &self.psets.map[a.pset]
            for i in range(e.have.size()):
                if e.have[i] or ps.joined[i]:
                    continue
                per_rank_n[ps.ranks[i]] += 1
                if per_rank_n[ps.ranks[i]] <= 6:
                    if per_rank[ps.ranks[i]].size():
                        per_rank[ps.ranks[i]].append(b", ")
                    per_rank[ps.ranks[i]].append(a.name)
                elif per_rank_n[ps.ranks[i]] == 7:
                    per_rank[ps.ranks[i]].append(b" ...")
            if self.stall_shutdown_s > 0 and age >= self.stall_shutdown_s:
                fatal = a.name
        for i in range(<size_t>self.size):
            if per_rank_n[i]:
                report.append(b"\n  ")
                report.append(self.channel.who(<int>i))
                report.append(b": [")
                report.append(per_rank[i])
                report.append(b"]")
        if fatal.size():
            self.link.abort_job(-1, _str("stall: some ranks did not submit collectives the others have "
                                    "waited on for more than ") + _int_str(<int64_t>self.stall_shutdown_s) +
                            _str(" s (FUSE_STALL_SHUTDOWN_TIME_SECONDS); shutting down. Missing ranks "
                                "and their tensors:") + report, ERR_STALL)
            return
        if any_new and report.size():
            with gil:
                self.log.warning(
                    "One or more tensors were submitted to be reduced, gathered or broadcast by "
                    "some ranks and have waited for the remaining ranks for more than %g seconds. "
                    "This may indicate that different ranks are trying to submit different "
                    "tensors, or that only a subset of ranks is submitting tensors, which will "
                    "cause a deadlock.\nMissing ranks:%s", self.stall_warn_s,
                    report.decode(errors="replace"))

    cdef void _straggler_sample(self, double now) noexcept nogil:
        """Close the meter's sample; when it added one, send every rank the smoothed view
        (MSG_STRAGGLERS, rank 0 included: Engine.straggler_frame), draw it on the timeline and
        name whoever is flagged."""
        cdef string frame
        cdef StragglerView view
        cdef vector[string] series
        cdef vector[double] values
        cdef int who, r
        if not self.meter.close_sample(now):
            return
        self.meter.view(&view)
        frame_stragglers(frame, view)
        self.channel.send_all(frame, -1)
        self.channel.send_to(0, frame)
        if tl_on(self.tl):
            for r in range(self.size):
                series.push_back(_str("rank ") + _int_str(r))
                values.push_back(self.meter.late_med[r] * 1000.0)
            tl_counter(self.tl, _str("STRAGGLER_LATENESS_MS"), series, values)
            values.clear()
            for r in range(self.size):
                values.push_back(self.meter.share_med[r] * 100.0)
            tl_counter(self.tl, _str("STRAGGLER_WAIT_SHARE_PCT"), series, values)
        who = self.meter.due_warning(now)
        while who >= 0:
            with gil:
                self._name_straggler(who)
            who = self.meter.due_warning(now)

    def _name_straggler(self, int index):
        what, rank, host, behind, late, cost, share = self.meter.describe(index)
        if self.straggler_hook is not None:
            try:
                self.straggler_hook(what, rank, host, behind, late, cost, share)
            except Exception:       # the engine thread must go on
                self.log.exception("the straggler hook failed")
        else:
            self.log.warning("straggler: %s %s is behind by %.2fx", what,
                             rank if what == "rank" else host, behind)

    cdef void _tl_ready(self, Request* first) noexcept nogil:
        """Timeline: negotiation is over, the tensor waits in the response queue."""
        tl_span(self.tl, first.name, b'E', TLW_NEGOTIATE, first.kind)
        tl_span(self.tl, first.name, b'B', TLW_TOP, first.kind)
        tl_span(self.tl, first.name, b'B', TLW_QUEUE, first.kind)
