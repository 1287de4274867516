"""Worker side of test_mx_compat.py: what Horovod's MXNet scripts and tests expect (issue 24)."""

from __future__ import annotations

import mxnet as mx
from mxnet.base import MXNetError

import fuse.mxnet as hvd


def _caught(call):
    """Which of Horovod's error types catch what ``call`` raises (None: nothing raised)."""
    try:
        call()
    except Exception as err:        # noqa: BLE001 - the test reports the type
        return {"MXNetError": isinstance(err, MXNetError),
                "RuntimeError": isinstance(err, RuntimeError),
                "ValueError": isinstance(err, ValueError)}
    return None


def errors():
    """alltoall with rows that do not divide evenly or wrong splits raises MXNetError /
    RuntimeError; scalar reducescatter (and grouped) raises ValueError; the job goes on."""
    hvd.init()
    out = {
        "uneven_rows": _caught(lambda: hvd.alltoall(mx.nd.arange(3))),
        "splits_count": _caught(lambda: hvd.alltoall(mx.nd.arange(4), splits=[1, 1, 2])),
        "splits_sum": _caught(lambda: hvd.alltoall(mx.nd.arange(4), splits=[1, 1])),
        "splits_negative": _caught(lambda: hvd.alltoall(mx.nd.arange(4), splits=[5, -1])),
        "scalar_reducescatter": _caught(lambda: hvd.reducescatter(mx.nd.array(3.0))),
        "scalar_grouped_reducescatter": _caught(lambda: hvd.grouped_reducescatter(
            [mx.nd.ones((2,)), mx.nd.array(3.0)])),
    }
    out["after"] = hvd.reducescatter(mx.nd.ones((2, 1)), op=hvd.Sum).asnumpy().tolist()
    return out


def submodules():
    """horovod.mxnet's module layout: mpi_ops and compression."""
    from fuse.common.exceptions import HorovodInternalError
    from fuse.mxnet import mpi_ops
    from fuse.mxnet.compression import Compression, Compressor, FP16Compressor
    mpi_ops.init()
    total = mpi_ops.allreduce(mx.nd.ones((2,)), op=mpi_ops.Sum).asnumpy().tolist()
    wire, ctx = Compression.fp16.compress(mx.nd.ones((2,)))
    return {
        "allreduce": total == [2.0, 2.0],
        "basics": mpi_ops.size() == 2 and mpi_ops.rank() == hvd.rank(),
        "no_optimizer": not hasattr(mpi_ops, "DistributedTrainer"),
        "compression": (Compression is hvd.Compression and issubclass(FP16Compressor, Compressor)
                        and wire.dtype.__name__ == "float16"
                        and Compression.fp16.decompress(wire, ctx).dtype.__name__ == "float32"),
        "exceptions": HorovodInternalError is hvd.HorovodInternalError,
    }
