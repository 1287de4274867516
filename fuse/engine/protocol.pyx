# cython: language_level=3
# distutils: language = c++
"""The engine's wire format: what ranks tell each other over the control channel.

A worker sends its requests (a full description the first time a name is seen, a cache slot
afterwards) to the coordinator; the coordinator sends back one ordered stream of responses.
This module serializes both, and names kinds, ops and shapes for error messages.  It holds no
state; the structs and constants are declared in protocol.pxd so the loop (engine/loop.pyx),
the coordinator and the executor share one definition of each.  Every control frame is built
and read here (frame_* and read_*).
"""

from libc.stdint cimport int64_t, uint8_t, uint32_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.engine.csupport cimport *

cdef extern from *:
    """
    // indexed by K_* and OP_* (protocol.pxd)
    static const char* const fuse_kind_names[] = {
        "allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier", "join",
        "add_process_set", "remove_process_set"};
    static const char* const fuse_op_names[] = {
        "Average", "Sum", "Adasum", "Min", "Max", "Product"};
    """
    const char** kind_names "fuse_kind_names"
    const char** op_names "fuse_op_names"


cdef const char* _kind_name(int kind) noexcept nogil:
    if 0 <= kind <= K_PSET_REMOVE:
        return kind_names[kind]
    return "unknown collective"


cdef const char* _op_name(int op) noexcept nogil:
    if 0 <= op <= OP_PRODUCT:
        return op_names[op]
    return "unknown op"


# The Python-level names of the constants in protocol.pxd: the one place Python code imports
# them from.
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN, PSET_ADD, PSET_REMOVE = range(9)
AVERAGE, SUM, ADASUM, MIN, MAX, PRODUCT = range(6)
KIND_NAMES = tuple(_kind_name(k).decode() for k in range(K_PSET_REMOVE + 1))
OP_NAMES = tuple(_op_name(op).decode() for op in range(OP_PRODUCT + 1))
DTYPE_NAMES = {code: dtype_name(code).decode() for code in range(FUSE_BFLOAT16 + 1)}
DTYPE_CODES = {v: k for k, v in DTYPE_NAMES.items()}
BACKEND_OPS = ("sum", "min", "max", "product")


cdef inline void _put_slot(string& out, uint32_t slot, uint32_t gen) noexcept nogil:
    """A response-cache slot as both sides name it: its index and the generation it holds."""
    put[uint32_t](out, slot)
    put[uint32_t](out, gen)


cdef inline void _get_slot(Reader& rd, uint32_t* slot, uint32_t* gen) noexcept nogil:
    slot[0] = get[uint32_t](rd)
    gen[0] = get[uint32_t](rd)


cdef inline void _put_ints(string& out, const vector[int64_t]& v) noexcept nogil:
    """A length-prefixed vector of int64 (a shape, a collective's arguments)."""
    cdef size_t i
    put[uint32_t](out, <uint32_t>v.size())
    for i in range(v.size()):
        put[int64_t](out, v[i])


cdef inline void _get_ints(Reader& rd, vector[int64_t]& v) noexcept nogil:
    """What _put_ints wrote; stops at the first short read (``rd.bad`` then says so)."""
    cdef uint32_t n = get[uint32_t](rd)
    cdef uint32_t i
    for i in range(n):
        if rd.bad:
            break
        v.push_back(get[int64_t](rd))


cdef void _write_request(string& out, const Request& r) noexcept nogil:
    put_signature(out, r)
    _put_ints(out, r.shape)
    _put_ints(out, r.args)
    put_str(out, r.name)
    put_str(out, r.group_key)
    put[int](out, r.group_size)
    put[uint8_t](out, 1 if r.on_device else 0)
    put_str(out, r.data)


cdef Request _read_request(Reader& rd) noexcept nogil:
    cdef Request r
    get_signature(rd, r)
    _get_ints(rd, r.shape)
    _get_ints(rd, r.args)
    r.name = get_str(rd)
    r.group_key = get_str(rd)
    r.group_size = get[int](rd)
    r.on_device = get[uint8_t](rd) != 0
    r.data = get_str(rd)
    r.inp = NULL
    r.out = NULL
    r.handle = -1
    return r


cdef void _write_response(string& out, const Response& r) noexcept nogil:
    put_signature(out, r)
    put[uint32_t](out, <uint32_t>r.names.size())
    cdef size_t i
    for i in range(r.names.size()):
        put_str(out, r.names[i])
        _put_slot(out, r.slots[i], r.gens[i])
        _put_ints(out, r.shapes[i])
    _put_ints(out, r.args)
    put_str(out, r.error)
    put[int](out, r.error_kind)
    put[int](out, r.last_joined)
    put[uint8_t](out, 1 if r.on_device else 0)
    put[uint8_t](out, 1 if r.inline_data else 0)
    if r.inline_data:
        for i in range(r.payloads.size()):
            put_str(out, r.payloads[i])


cdef Response _read_response(Reader& rd) noexcept nogil:
    cdef Response r
    get_signature(rd, r)
    cdef uint32_t n = get[uint32_t](rd)
    cdef uint32_t i, slot, gen
    cdef vector[int64_t] shape
    for i in range(n):
        if rd.bad:
            break
        r.names.push_back(get_str(rd))
        _get_slot(rd, &slot, &gen)
        r.slots.push_back(slot)
        r.gens.push_back(gen)
        shape.clear()
        _get_ints(rd, shape)
        r.shapes.push_back(shape)
    _get_ints(rd, r.args)
    r.error = get_str(rd)
    r.error_kind = get[int](rd)
    r.last_joined = get[int](rd)
    r.on_device = get[uint8_t](rd) != 0
    r.inline_data = get[uint8_t](rd) != 0
    if r.inline_data:
        for i in range(r.names.size()):
            if rd.bad:
                break
            r.payloads.push_back(get_str(rd))
    return r


cdef string _shape_str(const vector[int64_t]& shape) noexcept nogil:
    cdef string s = string(b"[")
    cdef size_t i
    for i in range(shape.size()):
        if i:
            s.append(b", ")
        s.append(_int_str(shape[i]))
    s.append(b"]")
    return s


cdef string _exc_text(object e):
    return (f"{type(e).__name__}: {e}").encode(errors="replace")


# ---- control frames

cdef void frame_requests(string& out, uint32_t nfull, const string& full, uint32_t nhits,
                         const string& hits) noexcept nogil:
    """MSG_REQUESTS (a worker, or rank 0 itself, to the coordinator): ``nfull`` requests
    written by _write_request, then ``nhits`` cache hits written by write_cache_hit."""
    put[uint8_t](out, MSG_REQUESTS)
    put[uint32_t](out, nfull)
    out.append(full)
    put[uint32_t](out, nhits)
    out.append(hits)


cdef void write_cache_hit(string& out, uint32_t slot, uint32_t gen,
                          const string& data) noexcept nogil:
    """One cached request inside MSG_REQUESTS: its slot, and the values of a small collective
    that travel inline (else empty)."""
    _put_slot(out, slot, gen)
    put_str(out, data)


cdef void read_cache_hit(Reader& rd, uint32_t* slot, uint32_t* gen, string* data) noexcept nogil:
    _get_slot(rd, slot, gen)
    data[0] = get_str(rd)


cdef void frame_responses(string& out, uint32_t count, const string& bodies) noexcept nogil:
    """MSG_RESPONSES (the coordinator to a member): ``count`` responses written by
    _write_response, in the order every member runs them."""
    put[uint8_t](out, MSG_RESPONSES)
    put[uint32_t](out, count)
    out.append(bodies)


cdef void frame_stale(string& out, uint32_t slot, uint32_t gen) noexcept nogil:
    """MSG_STALE (the coordinator to a worker): the cache slot it used was reused since;
    send that request in full."""
    put[uint8_t](out, MSG_STALE)
    _put_slot(out, slot, gen)


cdef void read_stale(Reader& rd, uint32_t* slot, uint32_t* gen) noexcept nogil:
    _get_slot(rd, slot, gen)


cdef void frame_abort(string& out, const string& why) noexcept nogil:
    """MSG_ABORT (a worker to rank 0): this rank is failing, and why."""
    put[uint8_t](out, MSG_ABORT)
    put_str(out, why)


cdef string read_abort(Reader& rd) noexcept nogil:
    return get_str(rd)


cdef void frame_abort_all(string& out, int who, int kind, const string& why,
                          bint lost=False) noexcept nogil:
    """MSG_ABORT_ALL (rank 0 to every worker): the job failed because of rank ``who`` (< 0:
    the job itself, a stall), with ErrorKind ``kind`` and message ``why``; ``lost``: ``who``
    stopped answering (its host is down or cut off), which the workers keep as data."""
    put[uint8_t](out, MSG_ABORT_ALL)
    put[int](out, who)
    put[int](out, kind)
    put[uint8_t](out, 1 if lost else 0)
    put_str(out, why)


cdef void read_abort_all(Reader& rd, int* who, int* kind, string* why, bint* lost) noexcept nogil:
    who[0] = get[int](rd)
    kind[0] = get[int](rd)
    lost[0] = get[uint8_t](rd) != 0
    why[0] = get_str(rd)


cdef void frame_signal(string& out, uint8_t msg_type) noexcept nogil:
    """A frame with no body: MSG_BYE (a worker leaves cleanly), MSG_COORD_BYE (rank 0 does),
    MSG_ALIVE (rank 0 is alive while requests wait)."""
    put[uint8_t](out, msg_type)


cdef uint8_t read_type(Reader& rd) noexcept nogil:
    """A frame's MSG_* type: its first byte (the reader then stands at its body)."""
    return get[uint8_t](rd)


cdef uint32_t read_count(Reader& rd) noexcept nogil:
    """How many requests (or cache hits, or responses) follow in a MSG_REQUESTS or
    MSG_RESPONSES body."""
    return get[uint32_t](rd)



# the straggler view's layout version (read_stragglers refuses another)
cdef enum: STRAGGLER_VIEW_VERSION = 2


cdef inline void _put_lags(string& out, const vector[Lag]& lags) noexcept nogil:
    cdef size_t i
    put[int](out, <int>lags.size())
    for i in range(lags.size()):
        put_str(out, lags[i].host)
        put[double](out, lags[i].lateness)
        put[double](out, lags[i].share)
        put[double](out, lags[i].cost)
        put[char](out, lags[i].flagged)


cdef inline void _get_lags(Reader& rd, vector[Lag]& lags) noexcept nogil:
    """What _put_lags wrote; stops at the first short read (``rd.bad`` then says so)."""
    cdef Lag lag
    cdef int i, n = get[int](rd)
    for i in range(n):
        if rd.bad:
            return
        lag.host = get_str(rd)
        lag.lateness = get[double](rd)
        lag.share = get[double](rd)
        lag.cost = get[double](rd)
        lag.flagged = get[char](rd) != 0
        lags.push_back(lag)


cdef void frame_stragglers(string& out, const StragglerView& view) noexcept nogil:
    """MSG_STRAGGLERS (rank 0 to every rank, itself included): the straggler meter's view."""
    put[uint8_t](out, MSG_STRAGGLERS)
    put[int](out, STRAGGLER_VIEW_VERSION)
    put[int](out, view.filled)
    put[int](out, view.history)
    put[double](out, view.sample_s)
    put[double](out, view.factor)
    put[int64_t](out, view.samples)
    _put_lags(out, view.ranks)
    _put_lags(out, view.hosts)


cdef bint read_stragglers(Reader& rd, StragglerView* view) noexcept nogil:
    """What frame_stragglers wrote (after the type byte); False for another layout version or
    a short frame."""
    if get[int](rd) != STRAGGLER_VIEW_VERSION:
        return False
    view.filled = get[int](rd)
    view.history = get[int](rd)
    view.sample_s = get[double](rd)
    view.factor = get[double](rd)
    view.samples = get[int64_t](rd)
    _get_lags(rd, view.ranks)
    _get_lags(rd, view.hosts)
    return not rd.bad

# ---- the wire format as Python sees it: for the property-based tests, and straggler_report()

def encode_request(*, int kind, int dtype, int op, int pset, int root, double prescale,
                   double postscale, shape, args, bytes name, bytes group_key, int group_size,
                   bytes data, bint on_device=False):
    """One request as a worker writes it into a MSG_REQUESTS frame."""
    cdef Request r
    cdef string out
    r.kind, r.dtype, r.op, r.pset, r.root = kind, dtype, op, pset, root
    r.prescale, r.postscale = prescale, postscale
    r.shape = shape
    r.args = args
    r.name, r.group_key, r.group_size, r.data = name, group_key, group_size, data
    r.on_device = on_device
    _write_request(out, r)
    return bytes(out)


def decode_requests(bytes body, int count):
    """``count`` requests from ``body`` as the coordinator reads them, as dicts (the fields
    encode_request takes).  ValueError where the coordinator would find the message corrupt."""
    cdef string s = body
    cdef Reader rd = reader_new(s)
    cdef Request r
    out = []
    for _ in range(count):
        r = _read_request(rd)
        if rd.bad:
            raise ValueError(f"corrupt request {len(out)}")
        out.append(dict(kind=r.kind, dtype=r.dtype, op=r.op, pset=r.pset, root=r.root,
                        prescale=r.prescale, postscale=r.postscale, shape=list(r.shape),
                        args=list(r.args), name=bytes(r.name), group_key=bytes(r.group_key),
                        group_size=r.group_size, data=bytes(r.data), on_device=r.on_device))
    return out


def decode_response(bytes body):
    """One response from ``body`` as a worker reads it: (names, shapes, payloads, error).
    ValueError where a worker would find it corrupt."""
    cdef string s = body
    cdef Reader rd = reader_new(s)
    cdef Response r = _read_response(rd)
    if rd.bad:
        raise ValueError("corrupt response")
    return ([bytes(n) for n in r.names], [list(x) for x in r.shapes],
            [bytes(p) for p in r.payloads], bytes(r.error))


def decode_stragglers(bytes body):
    """A MSG_STRAGGLERS body as fuse.straggler_report() gives it: ``factor``, ``window_s``,
    ``samples``, ``complete``, ``ranks`` (per rank: ``rank``, ``host``, ``lateness_s``,
    ``wait_share``, ``cost_per_step_s``, ``behind``, ``straggler``), ``hosts`` (per host:
    ``host``, ``wait_share``, ``cost_per_step_s``, ``behind``, ``straggler``) and
    ``stragglers`` (the flagged ranks).  ValueError for a corrupt body or another version."""
    cdef string s = body
    cdef Reader rd = reader_new(s)
    cdef StragglerView view
    cdef Lag* lag
    cdef size_t i
    if not read_stragglers(rd, &view):
        raise ValueError("corrupt straggler report, or one of another layout version (this "
                         f"fuse reads version {STRAGGLER_VIEW_VERSION})")
    ranks = []
    for i in range(view.ranks.size()):
        lag = &view.ranks[i]
        ranks.append({"rank": i, "host": lag.host.decode(errors="replace"),
                      "lateness_s": lag.lateness, "wait_share": lag.share,
                      "cost_per_step_s": lag.cost, "behind": behind(lag.share),
                      "straggler": lag.flagged})
    hosts = []
    for i in range(view.hosts.size()):
        lag = &view.hosts[i]
        hosts.append({"host": lag.host.decode(errors="replace"), "wait_share": lag.share,
                      "cost_per_step_s": lag.cost, "behind": behind(lag.share),
                      "straggler": lag.flagged})
    return {"factor": view.factor, "window_s": view.history * view.sample_s,
            "samples": view.samples, "complete": view.filled >= view.history, "ranks": ranks,
            "hosts": hosts, "stragglers": [r["rank"] for r in ranks if r["straggler"]]}
