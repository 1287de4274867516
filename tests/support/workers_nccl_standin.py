"""Worker side of test_nccl_standin.py: the NCCL backend on the CuPy/NCCL stand-in (the
wiring, NOT a GPU).  Each function runs on every rank of a real 2-worker job."""

from __future__ import annotations

import sys

import numpy as np

import fake_cupy


def group_collectives():
    """Every DeviceGroup call of NCCLGroup, with results and the recorded NCCL calls."""
    fake_cupy.install()
    import fuse
    from fuse.backends.nccl import NCCLBackend
    from fuse.worker import state

    fuse.init()
    cp = sys.modules["cupy"]
    r = fuse.rank()
    backend = NCCLBackend(state.config())
    group = backend.create_group(               # the unique id from rank 0, over fuse itself
        r, fuse.size(), 0, lambda uid: fuse.broadcast_object(uid, 0, name="standin.uid"))
    stream = backend.stream(0)
    out = {"rank_size": (group.rank, group.size)}
    a = cp.asarray(np.arange(4, dtype=np.float32) + r)
    group.allreduce(a, a, "float32", "sum", stream)
    out["allreduce"] = a.tolist()
    m = cp.asarray(np.array([r, 5 - r], np.int32))
    group.allreduce(m, m, "int32", "min", stream)
    out["min"] = m.tolist()
    recv = cp.empty(3, "int64")
    group.allgatherv(cp.asarray(np.full(r + 1, r + 7, np.int64)), recv, [1, 2], "int64",
                     stream)
    out["allgatherv"] = recv.tolist()
    even = cp.empty(4, "float64")
    group.allgatherv(cp.asarray(np.full(2, r, np.float64)), even, [2, 2], "float64", stream)
    out["allgather"] = even.tolist()
    b = cp.asarray(np.full(3, r, np.uint8))
    group.broadcast(b, 1, "uint8", stream)
    out["broadcast"] = b.tolist()
    send = cp.asarray(np.arange(3, dtype=np.float32) + 10 * r)
    sendcounts, recvcounts = ([1, 2], [1, 2]) if r == 0 else ([2, 1], [2, 1])
    got = cp.empty(3, "float32")
    mark = len(fake_cupy.CALLS)
    group.alltoallv(send, sendcounts, got, recvcounts, "float32", stream)
    out["alltoallv"] = got.tolist()
    out["alltoallv_calls"] = [c[0] for c in fake_cupy.CALLS[mark:]]
    rs = cp.empty(2, "float32")
    group.reducescatter(cp.asarray(np.arange(4, dtype=np.float32) * (r + 1)), rs, [2, 2],
                        "float32", "sum", stream)
    out["reducescatter"] = rs.tolist()
    uneven = cp.empty(2, "float32")
    group.reducescatter(cp.asarray(np.arange(3, dtype=np.float32)), uneven, [2, 1],
                        "float32", "max", stream)
    out["reducescatter_uneven"] = uneven[:[2, 1][r]].tolist()
    out["uid_calls"] = [c for c in fake_cupy.CALLS if c[0] in ("get_unique_id",
                                                                "NcclCommunicator")]
    out["streams"] = sorted({next(x for x in c[1:] if isinstance(x, str))   # the stream
                             for c in fake_cupy.CALLS
                             if c[0] in ("allReduce", "allGather", "broadcast", "send", "recv",
                                         "reduceScatter")})
    out["host_copies"] = list(fake_cupy.HOST_COPIES)
    backend.close()
    fuse.shutdown()
    return out
