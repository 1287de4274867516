# cython: language_level=3
# distutils: language = c++
"""The engine's process sets: which ranks each holds, this rank's place in it, and the backend
connections (native ops table, a second "twin" connection, same-host shared memory) its
collectives run over.  The world is set 0; add_process_set and remove_process_set responses
change the table on every rank at the same point of the response stream."""

from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer

from fuse.engine.protocol cimport *
from fuse.engine.segments cimport SharedSegments

cdef const char* OPS_CAPSULE = FUSE_GROUP_OPS_CAPSULE


cdef fuse_group_ops* _native_ops(object group, object capsule, bint strict) except? NULL:
    """The native ops table in ``capsule`` (what ``group.native_ops()`` returned, which must
    be kept alive as long as the table is used), or NULL when there is none (or, unless
    ``strict``, an unusable one: with ``strict`` that raises TypeError)."""
    if capsule is None:
        return NULL
    if not PyCapsule_IsValid(capsule, OPS_CAPSULE):
        if not strict:
            return NULL
        raise TypeError(f"{type(group).__name__}.native_ops() must return a "
                        "'fuse.group_ops.v1' capsule")
    cdef fuse_group_ops* native = <fuse_group_ops*>PyCapsule_GetPointer(capsule, OPS_CAPSULE)
    if native.api_version != FUSE_BACKEND_API_VERSION:
        if not strict:
            return NULL
        raise TypeError(f"backend ops table has API version {native.api_version}, "
                        f"fuse expects {FUSE_BACKEND_API_VERSION}")
    return native


cdef class ProcessSets:
    """The process-set table of one engine, which sets ``lock`` to its own before use.

    Args:
        rank: this rank.
        create_group: ``(ranks, id) -> Group``, the backend's, for sets added later.
    """

    def __init__(self, int rank, create_group):
        self.rank = rank
        self.groups = {}
        self.create_group = create_group

    cdef PSet _describe(self, ranks, group, object key) except *:
        """A PSet for ``ranks`` with this rank's place in it and ``group``'s connection (None:
        not a member); what it points to is kept alive under ``key`` here."""
        cdef PSet ps
        cdef fuse_group_ops* native = NULL
        for r in sorted(ranks):
            ps.ranks.push_back(r)
        ps.index = -1
        for i, r in enumerate(sorted(ranks)):
            if r == self.rank:
                ps.index = i
        ps.joined.assign(ps.ranks.size(), 0)
        ps.joined_count = 0
        ps.last_joined = -1
        ps.pygroup = NULL
        ps.native = NULL
        ps.twin = NULL
        ps.shm = NULL
        ps.hier = NULL
        if group is not None:
            self.groups[key] = group
            ps.pygroup = <PyObject*>group
            capsule = group.native_ops()
            native = _native_ops(group, capsule, True)
            if native != NULL:
                self.groups[(key, "capsule")] = capsule
                ps.native = native
        return ps

    def install(self, int pset_id, ranks, group):
        """Record a process set.  ``group`` is the backend Group, or None on non-members."""
        cdef PSet ps = self._describe(ranks, group, pset_id)
        with nogil:
            lock_acquire(self.lock)
            self.map[pset_id] = ps
            lock_release(self.lock)

    def install_hierarchy(self, int pset_id, SharedSegments local, cross_ranks, cross_group,
                          size_t min_bytes, size_t gather_min_bytes, local_index):
        """Let a process set that spans hosts run its allreduces of at least ``min_bytes`` and
        allgathers of at least ``gather_min_bytes`` hierarchically (fuse.engine.hierarchy):
        ``local`` are the shared-memory segments of this host's members, ``cross_group`` the
        backend Group of ``cross_ranks``, this rank's peers on the other hosts, and
        ``local_index[i]`` the index of the set's i-th member on its host.  Every member
        installs its own before the engine starts."""
        cdef PSet cross = self._describe(cross_ranks, cross_group, (pset_id, "cross"))
        cdef vector[int] index_on_host = [int(i) for i in local_index]
        self.groups[(pset_id, "hier shm")] = local
        local.installed = True
        with nogil:
            lock_acquire(self.lock)
            if self.map.count(pset_id):
                self.cross[pset_id] = cross
                self.hier[pset_id].local = local.impl
                self.hier[pset_id].cross = &self.cross[pset_id]
                self.hier[pset_id].min_bytes = min_bytes
                self.hier[pset_id].gather_min_bytes = gather_min_bytes
                self.hier[pset_id].local_index = index_on_host
                self.map[pset_id].hier = &self.hier[pset_id]
            lock_release(self.lock)

    def install_twin(self, int pset_id, group):
        """Give a process set a second connection to its ranks (a backend Group with native
        ops, built by every member), over which large allreduces send half their data
        concurrently (FUSE_SPLIT_THRESHOLD).  Groups without native ops are ignored."""
        capsule = group.native_ops()
        cdef fuse_group_ops* native = _native_ops(group, capsule, False)
        if native == NULL:
            return False
        self.groups[(pset_id, "twin")] = group
        self.groups[(pset_id, "twin capsule")] = capsule
        with nogil:
            lock_acquire(self.lock)
            if self.map.count(pset_id):
                self.map[pset_id].twin = native
            lock_release(self.lock)
        return True

    def install_shm(self, int pset_id, SharedSegments segments):
        """Let a process set whose members share this host reduce its large allreduces
        (FUSE_SHM_THRESHOLD) through their shared-memory segments instead of the backend.
        Every member installs its own view of the same segments before the engine starts (the
        world) or before it submits anything else on the set (a set added later)."""
        self.groups[(pset_id, "shm")] = segments
        segments.installed = True
        with nogil:
            lock_acquire(self.lock)
            if self.map.count(pset_id):
                self.map[pset_id].shm = segments.impl
            lock_release(self.lock)

    @property
    def shared_memory(self):
        """The world's SharedSegments, or None when its ranks do not share memory."""
        return self.groups.get((0, "shm"))

    def ranks(self, int pset_id):
        """The set's ranks, or None when there is no such set."""
        with nogil:
            lock_acquire(self.lock)
        if self.map.count(pset_id) == 0:
            lock_release(self.lock)
            return None
        ranks = list(self.map[pset_id].ranks)
        lock_release(self.lock)
        return ranks

    def ids(self):
        with nogil:
            lock_acquire(self.lock)
        ids = sorted(p.first for p in self.map)
        lock_release(self.lock)
        return ids

    def close(self):
        """Close every backend group (shutdown)."""
        for g in list(self.groups.values()):
            if hasattr(g, "close"):
                try:
                    g.close()
                except Exception:
                    pass
        self.groups.clear()

    cdef int add(self, const vector[int64_t]& args, string& err) noexcept with gil:
        """The loop: an add_process_set response (``args``: the new id, then its ranks) makes
        the set here, with a backend Group if this rank is a member.  Returns the new id; a
        failure is left in ``err``."""
        cdef int new_id = <int>args[0]
        try:
            ranks = [int(x) for x in list(args)[1:]]
            group = self.create_group(ranks, new_id) if self.rank in ranks else None
            self.install(new_id, ranks, group)
        except BaseException as e:
            err = _str("add_process_set failed: ") + _exc_text(e)
        return new_id

    cdef void remove(self, int pset_id) noexcept with gil:
        """The loop: a remove_process_set response drops the set and closes its Group."""
        group = self.groups.pop(pset_id, None)
        self.groups.pop((pset_id, "capsule"), None)
        if group is not None:
            try:
                group.close()
            except Exception:
                pass
        with nogil:
            lock_acquire(self.lock)
            self.map.erase(pset_id)
            lock_release(self.lock)
        self.groups.pop((pset_id, "shm"), None)     # (no longer reachable from the map)
