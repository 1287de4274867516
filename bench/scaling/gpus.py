"""The GPU cluster the prediction is for: ResNet-101 on hosts of 8 GPUs joined by a network.

Nothing here is measured on this machine; every figure is an assumption, stated where it is
set (``ASSUMPTIONS`` is printed with every prediction and shown on the docs page):

- compute: Horovod's own benchmark page (docs/benchmarks.rst, the setting of its 90 % claim:
  Pascal GPUs, ``tf_cnn_benchmarks --model resnet101 --batch_size 64``) reports 1656.82
  images/s on 16 GPUs, 103.6 images/s per GPU, i.e. 0.62 s per step of 64 images.  Taken as one
  GPU's rate (it was measured at 16 GPUs, so the lone GPU is a little faster: the prediction is
  then a little optimistic);
- the split: backward takes two thirds of the step (twice the forward's FLOPs), spread over the
  layers in proportion to their FLOPs (bench/suite/common.py resnet_layers); a batch norm's
  gradients are ready with its convolution's; the optimizer's update is in the step's figure;
- inside a host: NVLink at 80 GB/s per GPU (a DGX-1's P100 links: 4 x 20 GB/s), 10 µs per
  collective (a kernel launch and its synchronisation); the ring inside the host moves
  2 (L - 1) / L of the buffer per GPU;
- between hosts: the stated rate at the fraction of it a TCP stream reached between this
  machine's namespace hosts (measured), plus 5 µs per message for the NIC and the switch on top
  of the per-message cost measured here (a negotiation with rank 0 crosses twice);
- the engine and the hooks: the costs per collective and per gradient measured here (the same
  Python and engine thread drive NCCL); a hook's write of the gradient into its slot is a copy
  in device memory (a P100's HBM2, 732 GB/s, read and written: 366 GB/s of gradient);
- every GPU's rank has its own processor: nothing is time-shared (``cores=None``).
"""

from __future__ import annotations

import dataclasses
import os
import sys

from model import Cluster, Engine, Link, SharedMemory, Workload

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "suite"))
from common import resnet_layers  # noqa: E402

IMAGES_PER_SECOND = 1656.82 / 16
BATCH = 64
NVLINK_BYTES_PER_S = 80e9
NVLINK_ALPHA = 10e-6
WIRE_ALPHA = 5e-6
GPUS_PER_HOST = 8
DEVICE_COPY_BYTES_PER_S = 732e9 / 2

ASSUMPTIONS = [
    f"ResNet-101 (44.5 M parameters, 314 tensors), batch {BATCH} per GPU, "
    f"{IMAGES_PER_SECOND:.1f} images/s per GPU (Horovod's benchmark page: 1656.82 images/s "
    "on 16 Pascal GPUs)",
    "backward two thirds of the step, spread over the layers by their FLOPs",
    f"{GPUS_PER_HOST} GPUs per host (4 in Horovod's layout), NVLink "
    f"{NVLINK_BYTES_PER_S / 1e9:.0f} GB/s per GPU, {NVLINK_ALPHA * 1e6:.0f} µs per collective "
    "inside the host",
    f"between hosts: the rate at the payload fraction measured here, the per-message cost "
    f"measured here + {WIRE_ALPHA * 1e6:.0f} µs",
    "the engine's costs per collective and the hooks' per gradient as measured here; a "
    f"gradient's write into its slot at {DEVICE_COPY_BYTES_PER_S / 1e9:.0f} GB/s (device memory)",
    "one processor per GPU: no term of the shared cores applies",
]


def engine(measured: Engine) -> Engine:
    """The engine measured here, its hooks writing the gradients in device memory."""
    return dataclasses.replace(measured, per_gradient_byte=1 / DEVICE_COPY_BYTES_PER_S)


def resnet101(images_per_second: float = IMAGES_PER_SECOND) -> Workload:
    layers = resnet_layers((3, 4, 23, 3))
    step = BATCH / images_per_second
    flops = sum(f for _, f in layers)
    backward = []
    for shape, f in reversed(layers):
        count = 1
        for d in shape:
            count *= d
        backward.append((step * 2 / 3 * f / flops, 4 * count))
    return Workload(forward=step / 3, backward=backward, optimizer=0.0)


def cluster(gpus: int, rate_gbit: float, measured: Link, line_rate_bytes: float,
            local: int = GPUS_PER_HOST) -> Cluster:
    """``gpus`` GPUs, ``local`` per host (fewer when they fit in one host); ``measured``: the
    namespace link measured here at ``line_rate_bytes``, whose payload fraction and
    per-message cost carry over."""
    fraction = measured.bandwidth / line_rate_bytes
    inter = Link(alpha=measured.alpha + WIRE_ALPHA, bandwidth=rate_gbit * 1e9 / 8 * fraction,
                 negotiation=measured.negotiation + 2 * WIRE_ALPHA)
    local = min(local, gpus)
    nvlink = SharedMemory(alpha=NVLINK_ALPHA,
                          per_byte=2 * (local - 1) / local / NVLINK_BYTES_PER_S)
    return Cluster(hosts=gpus // local, local=local, inter=inter, shm=nvlink, cores=None)
