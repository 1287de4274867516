# The engine's shared vocabulary, cimported by every engine module: the wire constants, the
# structs that travel between ranks (Request, Response) or between the engine's parts (Pending,
# CacheEntry, WorkerCache, HandleState, PSet), and the small helpers all of them use.  Inline
# helpers are defined here so that each module compiles them in; the (de)serialization and
# message formatting live in protocol.pyx.  ``from fuse.engine.protocol cimport *`` also brings
# what this file cimports (the fixed-width integers, string, vector, unordered_map, cbool,
# PyObject, memcpy, and csupport's backend declarations): the engine's modules take that
# vocabulary from here and cimport only what else they use.
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from fuse.engine.csupport cimport *

cdef extern from * nogil:
    """
    #include <vector>
    template <class T> static inline bool fuse_vec_eq(const std::vector<T>& a,
                                                      const std::vector<T>& b) { return a == b; }
    """
    cbool vec_eq "fuse_vec_eq"(const vector[int64_t]&, const vector[int64_t]&)

# ---- constants (the Python-level names are in protocol.pyx) ----
# Collective kinds (values follow Horovod's request types where they exist).
cdef enum: K_ALLREDUCE = 0
cdef enum: K_ALLGATHER = 1
cdef enum: K_BROADCAST = 2
cdef enum: K_ALLTOALL = 3
cdef enum: K_REDUCESCATTER = 4
cdef enum: K_BARRIER = 5
cdef enum: K_JOIN = 6
cdef enum: K_PSET_ADD = 7
cdef enum: K_PSET_REMOVE = 8

# User-facing reduce ops, Horovod's wire values.
cdef enum: OP_AVERAGE = 0
cdef enum: OP_SUM = 1
cdef enum: OP_ADASUM = 2
cdef enum: OP_MIN = 3
cdef enum: OP_MAX = 4
cdef enum: OP_PRODUCT = 5

# Control messages.
cdef enum: MSG_REQUESTS = 1
cdef enum: MSG_ABORT = 2
cdef enum: MSG_BYE = 3
cdef enum: MSG_RESPONSES = 11
cdef enum: MSG_STALE = 12
cdef enum: MSG_ABORT_ALL = 13
cdef enum: MSG_COORD_BYE = 14
cdef enum: MSG_ALIVE = 15     # the coordinator is alive (sent while requests wait; liveness.pyx)
cdef enum: MSG_STRAGGLERS = 16  # the coordinator's straggler report (engine/straggler.pyx)

# Handle states.
cdef enum: H_PENDING = 0
cdef enum: H_DONE = 1
cdef enum: H_ERROR = 2

# Engine states.
cdef enum: S_RUNNING = 0
cdef enum: S_STOPPING = 1
cdef enum: S_STOPPED = 2
cdef enum: S_FAILED = 3

# How a failure reaches the user: the exception class _core._make_error raises.  Travels in
# Response.error_kind and in MSG_ABORT_ALL frames, and is kept in HandleState.error_kind.
cdef enum ErrorKind:
    ERR_INTERNAL = 0    # FuseInternalError: a rank raised or died, or a local error
    ERR_MISMATCH = 1    # MismatchError: the ranks disagree about a collective
    ERR_SHUTDOWN = 2    # ShutdownError: a rank shut down or its connection closed
    ERR_STALL = 3       # StallError: the stall check gave up
    ERR_BACKEND = 4     # BackendError: a backend collective failed

cdef enum: ERRLEN = 1024
cdef extern from *:
    """
    #define FUSE_NO_SLOT 0xFFFFFFFFu
    """
    const uint32_t NO_SLOT "FUSE_NO_SLOT"


cdef struct Request:
    int64_t handle
    int kind
    int dtype
    int op
    int pset
    int root            # global rank (broadcast)
    double prescale
    double postscale
    vector[int64_t] shape
    vector[int64_t] args     # by kind: ALLTOALL the rows sent to each member (empty: even);
                             # PSET_ADD the new set's ranks; PSET_REMOVE the set's id
    string name
    string group_key
    int group_size
    int rank            # who sent it (filled in by the coordinator)
    cbool on_device     # a device (GPU) tensor: the device executor runs it (fuse/engine/device.py)
    string data         # small allreduce/broadcast: the (prescaled) values ride along
    # local only: where the data is
    void* inp
    void* out


cdef struct Response:
    int kind
    int dtype
    int op
    int pset
    int root
    double prescale
    double postscale
    vector[string] names
    vector[vector[int64_t]] shapes
    vector[uint32_t] slots
    vector[uint32_t] gens
    vector[int64_t] args        # by kind: ALLGATHER dim 0 per member; ALLTOALL the
                                # members x members rows sent (row: sender); PSET_ADD the new
                                # set's id, then its ranks; PSET_REMOVE the set's id
    string error
    int error_kind              # an ErrorKind
    int last_joined
    cbool on_device             # device tensors: this rank's device executor runs it
    cbool inline_data           # the coordinator computed the result: it is in payloads
    vector[string] payloads


cdef struct Pending:
    vector[Request] reqs       # indexed by position in the process set
    vector[char] have
    int count
    double first_time
    double last_time          # the straggler meter: when the latest request arrived,
    int last_host             # ... the host of that rank (StragglerMeter.host_of),
    double other_time         # ... and the latest arrival from any other host
    cbool warned
    cbool is_ready
    string error              # set when the coordinator already knows the collective fails
    int error_kind            # an ErrorKind
    string acc                # small collectives: the running reduction (or the root's data)
    cbool all_data            # every contribution so far carried its data


cdef struct CacheEntry:
    cbool used
    string key
    Request tmpl
    uint32_t gen
    uint64_t last_use


cdef struct WorkerCache:
    uint32_t slot
    uint32_t gen
    Request sig


cdef struct HandleState:
    int status
    string error
    int64_t value
    vector[int64_t] aux
    int error_kind          # an ErrorKind
    bint drivable           # settled by negotiation alone: its waiter may drive (Engine._drive)


# The coordinator's straggler view (engine/straggler.pyx), as every rank receives it in a
# MSG_STRAGGLERS frame (frame_stragglers): per rank and per host, medians over the window.
cdef struct Lag:             # one rank's, or one host's (its ranks together, none alone)
    string host
    double lateness           # a rank's requests arrive this long after the first rank's
                              # (a host's: 0)
    double share              # the share of the job's time spent waiting for it alone (a
                              # host: the ranks of the other hosts waiting for its ranks)
    double cost               # that wait per step, seconds
    cbool flagged             # behind by more than FUSE_STRAGGLER_FACTOR


cdef struct StragglerView:
    int filled                # samples in the window so far (complete at ``history``)
    int history               # samples a window holds
    double sample_s
    double factor             # FUSE_STRAGGLER_FACTOR
    int64_t samples           # samples taken since the start
    vector[Lag] ranks
    vector[Lag] hosts


cdef inline double behind(double share) noexcept nogil:
    """How many times faster the job would run without the wait a share stands for."""
    if share >= 0.99:
        return 100.0
    return 1.0 / (1.0 - share)


cdef struct Hierarchy


cdef struct PSet:
    vector[int] ranks
    int index              # this rank's position, -1 if not a member
    vector[char] joined    # coordinator: per position
    int joined_count
    int last_joined
    fuse_group_ops* native
    fuse_group_ops* twin   # a second native connection to the same ranks, or NULL (Executor)
    ShmAllreduce* shm      # the members' shared-memory segments when they share a host, or NULL
    PyObject* pygroup      # borrowed, or NULL; ProcessSets.groups keeps it alive
    Hierarchy* hier        # how the set's allreduces go hierarchically, or NULL (Executor)


cdef struct Hierarchy:
    # A set spanning hosts with several members on each (fuse/engine/hierarchy.py): reduce-
    # scatter among this host's members through shared memory, allreduce this rank's shard with
    # its peers on the other hosts, allgather on this host; for allgather, gather with the
    # peers on the other hosts, then share on this host.  A threshold of SIZE_MAX: never.
    ShmAllreduce* local    # this host's members' shared-memory segments
    PSet* cross            # this rank's peers (same local rank) on every host
    size_t min_bytes       # allreduces of at least this many bytes go this way
    size_t gather_min_bytes  # allgathers of at least this many bytes (in all) go this way
    vector[int] local_index  # per member (position in the set): its index on its host


cdef extern from * nogil:
    """
    template <class It> static inline auto& fuse_deref(It& it) { return it->second; }
    template <class It> static inline void fuse_inc(It& it) { ++it; }
    template <class It> static inline const std::string& fuse_key(It& it) { return it->first; }
    """
    WorkerCache& deref_wc "fuse_deref"(unordered_map[string, WorkerCache].iterator&)
    Request& deref_req "fuse_deref"(unordered_map[string, Request].iterator&)
    HandleState& deref_hs "fuse_deref"(unordered_map[int64_t, HandleState].iterator&)
    Pending& deref_pending "fuse_deref"(unordered_map[string, Pending].iterator&)
    void inc_hs "fuse_inc"(unordered_map[int64_t, HandleState].iterator&)
    void inc_pending "fuse_inc"(unordered_map[string, Pending].iterator&)
    const string& it_key "fuse_key"(unordered_map[string, Pending].iterator&)
    uint32_t& it_u32 "fuse_deref"(unordered_map[string, uint32_t].iterator&)

cdef extern from "<string>" namespace "std" nogil:
    string to_string(long long)
    string to_string(double)


# ---- wire format and messages (_protocol.pyx)
cdef void _write_request(string& out, const Request& r) noexcept nogil
cdef Request _read_request(Reader& rd) noexcept nogil
cdef void _write_response(string& out, const Response& r) noexcept nogil
cdef Response _read_response(Reader& rd) noexcept nogil
cdef const char* _kind_name(int kind) noexcept nogil
cdef const char* _op_name(int op) noexcept nogil
cdef string _shape_str(const vector[int64_t]& shape) noexcept nogil
cdef string _exc_text(object e)

# ---- control frames: every one is built and read here (a frame: its MSG_* type byte, then
# its body; readers start after the type byte, see _frame_type)
cdef void frame_requests(string& out, uint32_t nfull, const string& full, uint32_t nhits,
                         const string& hits) noexcept nogil
cdef void write_cache_hit(string& out, uint32_t slot, uint32_t gen,
                          const string& data) noexcept nogil
cdef void read_cache_hit(Reader& rd, uint32_t* slot, uint32_t* gen, string* data) noexcept nogil
cdef void frame_responses(string& out, uint32_t count, const string& bodies) noexcept nogil
cdef void frame_stale(string& out, uint32_t slot, uint32_t gen) noexcept nogil
cdef void read_stale(Reader& rd, uint32_t* slot, uint32_t* gen) noexcept nogil
cdef void frame_abort(string& out, const string& why) noexcept nogil
cdef string read_abort(Reader& rd) noexcept nogil
cdef void frame_abort_all(string& out, int who, int kind, const string& why,
                          bint lost=*) noexcept nogil
cdef void read_abort_all(Reader& rd, int* who, int* kind, string* why, bint* lost) noexcept nogil
cdef void frame_signal(string& out, uint8_t msg_type) noexcept nogil
cdef uint8_t read_type(Reader& rd) noexcept nogil
cdef uint32_t read_count(Reader& rd) noexcept nogil
cdef void frame_stragglers(string& out, const StragglerView& view) noexcept nogil
cdef bint read_stragglers(Reader& rd, StragglerView* view) noexcept nogil


# ---- inline helpers

cdef inline string _key(int pset, const string& name) noexcept nogil:
    """The table key of a tensor: its process set, then its name."""
    cdef string k = string(b"")
    put[int](k, pset)
    k.append(name)
    return k


cdef inline int _key_pset(const string& key) noexcept nogil:
    cdef int p = 0
    memcpy(&p, key.data(), sizeof(int))
    return p


cdef inline int64_t _numel(const vector[int64_t]& shape) noexcept nogil:
    cdef int64_t n = 1
    cdef size_t i
    for i in range(shape.size()):
        n *= shape[i]
    return n


cdef inline int64_t _row_elems(const vector[int64_t]& shape) noexcept nogil:
    """Elements per row of dim 0 (1 for a scalar or a vector)."""
    cdef int64_t n = 1
    cdef size_t i
    for i in range(1, shape.size()):
        n *= shape[i]
    return n


cdef inline string _int_str(int64_t v) noexcept nogil:
    """An integer as decimal text (for messages built without the GIL)."""
    return to_string(<long long>v)


cdef inline string _float_str(double v) noexcept nogil:
    """A float as text."""
    return to_string(v)


cdef inline string _str(const char* s) noexcept nogil:
    """A C string as a std::string, so that ``+`` concatenates."""
    return string(s)


cdef inline cbool _same_signature(const Request& a, const Request& b) noexcept nogil:
    return (a.kind == b.kind and a.dtype == b.dtype and a.op == b.op and a.pset == b.pset
            and a.root == b.root and a.prescale == b.prescale and a.postscale == b.postscale
            and a.on_device == b.on_device and vec_eq(a.shape, b.shape))


cdef inline void _sign_response(Response& resp, const Request& a) noexcept nogil:
    """A response answers a request of ``a``'s signature (kind, dtype, op, set, root, scales,
    placement)."""
    copy_signature(resp, a)


cdef inline Request _response_signature(const Response& resp,
                                        const vector[int64_t]& shape) noexcept nogil:
    """The signature of the requests ``resp`` answers (one tensor's ``shape``), as the worker's
    side of the response cache compares it (_same_signature)."""
    cdef Request sig
    copy_signature(sig, resp)
    sig.shape = shape
    return sig


cdef inline int _backend_op(int op) noexcept nogil:
    if op == OP_MIN:
        return FUSE_OP_MIN
    if op == OP_MAX:
        return FUSE_OP_MAX
    if op == OP_PRODUCT:
        return FUSE_OP_PRODUCT
    return FUSE_OP_SUM


cdef inline double _postscale(int op, double postscale, size_t members) noexcept nogil:
    """The factor a reduction's result is scaled by: Average is a sum scaled by 1/members."""
    if op == OP_AVERAGE:
        return postscale / <double>members
    return postscale


cdef inline int _position(PSet* ps, int rank) noexcept nogil:
    """A global rank's index in the process set, -1 if it is not a member."""
    cdef size_t i
    for i in range(ps.ranks.size()):
        if ps.ranks[i] == rank:
            return <int>i
    return -1


cdef inline uint8_t _frame_type(const string& frame) noexcept nogil:
    """A control frame's message type (MSG_*), 0 for an empty frame."""
    return <uint8_t>frame[0] if frame.size() else 0
