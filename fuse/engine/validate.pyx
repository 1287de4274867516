# cython: language_level=3
# distutils: language = c++
"""Whether the ranks agree on a collective: the checks the coordinator makes once every
member of the process set has submitted a tensor, and the mismatch messages users see.

Pure functions of the submitted requests and the process-set table; called on the engine
thread without the GIL (Coordinator._check_ready and _make_response).
"""

from libcpp.utility cimport pair

from fuse.engine.protocol cimport *
from fuse.engine.psets cimport ProcessSets


cdef string validate(Pending* entry, ProcessSets psets, int size) noexcept nogil:
    """Empty if the ranks agree; otherwise the message every rank raises."""
    cdef Request* a = NULL
    cdef size_t i
    cdef string why
    for i in range(entry.have.size()):
        if entry.have[i]:
            a = &entry.reqs[i]
            break
    cdef PSet* ps = &psets.map[a.pset]
    cdef string what = _str(" for tensor '") + a.name + _str("'")
    if (a.kind == K_ALLGATHER or a.kind == K_ALLTOALL) and a.shape.size() == 0:
        return _str(_kind_name(a.kind)) + _str(" needs at least one dimension") + what + \
            _str(": rank ") + _int_str(a.rank) + _str(" sent a scalar")
    if a.kind == K_BROADCAST and _position(ps, a.root) < 0:
        return _str("broadcast root rank ") + _int_str(a.root) + \
            _str(" is not a member of process set ") + _int_str(a.pset) + what
    for i in range(entry.have.size()):
        if not entry.have[i] or &entry.reqs[i] == a:
            continue
        why = _mismatch(a, &entry.reqs[i], what)
        if why.size():
            return why
    if a.kind == K_ALLTOALL:
        return _alltoall_splits(entry, ps, what)
    if a.kind == K_PSET_ADD:
        return _pset_add(a, psets, size)
    if a.kind == K_PSET_REMOVE:
        if a.args.size() != 1 or a.args[0] == 0 or psets.map.count(<int>a.args[0]) == 0:
            return _str("remove_process_set: no such process set ") + _shape_str(a.args) + \
                _str(" (the global set cannot be removed)")
    return string(b"")


cdef string _mismatch(Request* a, Request* b, const string& what) noexcept nogil:
    """Where rank ``b.rank``'s request differs from rank ``a.rank``'s; empty if nowhere."""
    cdef string ra = _str(": rank ") + _int_str(a.rank)
    cdef string rb = _str(", rank ") + _int_str(b.rank)
    if b.kind != a.kind:
        return _str("Mismatched operations") + what + ra + _str(" did ") + \
            _str(_kind_name(a.kind)) + rb + _str(" did ") + _str(_kind_name(b.kind))
    if b.on_device != a.on_device:
        return _str("Mismatched tensor placement") + what + ra + _str(" sent a ") + \
            _str(b"device (GPU)" if a.on_device else b"host (CPU)") + _str(" tensor") + rb + \
            _str(" a ") + _str(b"device (GPU)" if b.on_device else b"host (CPU)") + _str(" one")
    if b.dtype != a.dtype:
        return _str("Mismatched data types") + what + ra + _str(" sent ") + \
            _str(dtype_name(a.dtype)) + rb + _str(" sent ") + _str(dtype_name(b.dtype))
    if (a.kind == K_ALLREDUCE or a.kind == K_REDUCESCATTER) and b.op != a.op:
        return _str("Mismatched reduction ops") + what + ra + _str(" used ") + \
            _str(_op_name(a.op)) + rb + _str(" used ") + _str(_op_name(b.op))
    if b.prescale != a.prescale or b.postscale != a.postscale:
        return _str("Mismatched prescale/postscale factors") + what + ra + _str(" used ") + \
            _float_str(a.prescale) + _str("/") + _float_str(a.postscale) + rb + \
            _str(" used ") + _float_str(b.prescale) + _str("/") + _float_str(b.postscale)
    if a.kind == K_BROADCAST and b.root != a.root:
        return _str("Mismatched broadcast root ranks") + what + ra + _str(" gave root ") + \
            _int_str(a.root) + rb + _str(" gave root ") + _int_str(b.root)
    if a.kind == K_PSET_ADD and not vec_eq(b.args, a.args):
        return _str("Mismatched add_process_set calls") + ra + _str(" asked for ranks ") + \
            _shape_str(a.args) + rb + _str(" for ") + _shape_str(b.args)
    if a.kind == K_PSET_REMOVE and not vec_eq(b.args, a.args):
        return _str("Mismatched remove_process_set calls") + ra + _str(" removed set ") + \
            _shape_str(a.args) + rb + _str(" removed ") + _shape_str(b.args)
    return _shape_mismatch(a, b, what, ra, rb)


cdef string _shape_mismatch(Request* a, Request* b, const string& what, const string& ra,
                            const string& rb) noexcept nogil:
    """The shapes must be equal, except an allgather's or alltoall's first dimension."""
    cdef size_t j
    cdef string shapes = ra + _str(" sent ") + _shape_str(a.shape) + rb + _str(" sent ") + \
        _shape_str(b.shape)
    if a.kind == K_ALLREDUCE or a.kind == K_BROADCAST or a.kind == K_REDUCESCATTER:
        if not vec_eq(b.shape, a.shape):
            return _str("Mismatched ") + _str(_kind_name(a.kind)) + _str(" tensor shapes") + \
                what + shapes
    if a.kind == K_ALLGATHER or a.kind == K_ALLTOALL:
        if b.shape.size() != a.shape.size():
            return _str("Mismatched ") + _str(_kind_name(a.kind)) + _str(" tensor ranks") + \
                what + shapes + _str("; only the first dimension may differ")
        for j in range(1, a.shape.size()):
            if a.shape[j] != b.shape[j]:
                return _str("Mismatched ") + _str(_kind_name(a.kind)) + \
                    _str(" tensor shapes") + what + _str(" in dimension ") + _int_str(j) + \
                    shapes + _str("; only the first dimension may differ")
    return string(b"")


cdef string _alltoall_splits(Pending* entry, PSet* ps, const string& what) noexcept nogil:
    """Each rank's splits name every member, or its first dimension divides evenly."""
    cdef size_t i
    cdef Request* b
    cdef int64_t members = <int64_t>ps.ranks.size()
    for i in range(entry.have.size()):
        b = &entry.reqs[i]
        if b.args.size() and <int64_t>b.args.size() != members:
            return _str("alltoall splits") + what + _str(" on rank ") + _int_str(b.rank) + \
                _str(" has ") + _int_str(b.args.size()) + _str(" entries; the process set has ") + \
                _int_str(members) + _str(" ranks")
        if b.args.size() == 0 and b.shape[0] % members != 0:
            return _str("alltoall without splits") + what + _str(" needs the first dimension to "
                "be divisible by the number of ranks: rank ") + _int_str(b.rank) + \
                _str(" sent ") + _shape_str(b.shape) + _str(" to ") + _int_str(members) + \
                _str(" ranks")
    return string(b"")


cdef string _pset_add(Request* a, ProcessSets psets, int size) noexcept nogil:
    """The new set's ranks are distinct, sorted, in the job, and not a set already."""
    cdef size_t i
    cdef bint same
    cdef pair[int, PSet] p
    if a.args.size() == 0:
        return _str("add_process_set needs at least one rank")
    for i in range(a.args.size()):
        if a.args[i] < 0 or a.args[i] >= size or (i and a.args[i] <= a.args[i - 1]):
            return _str("add_process_set: ranks ") + _shape_str(a.args) + \
                _str(" must be distinct, sorted and below ") + _int_str(size)
    for p in psets.map:
        if p.second.ranks.size() == a.args.size():
            same = True
            for i in range(a.args.size()):
                if p.second.ranks[i] != a.args[i]:
                    same = False
            if same:
                return _str("add_process_set: a process set with ranks ") + \
                    _shape_str(a.args) + _str(" already exists (id ") + _int_str(p.first) + \
                    _str(")")
    return string(b"")
