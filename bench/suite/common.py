"""Pieces every benchmark shares: alternating timed rounds, medians, ratios, result records.

A comparison runs fuse and its competitor in the same process, in rounds; each round measures
every side once, the order alternating from round to round, with a barrier before each
measurement, so drift in the machine's load hits all sides alike.  The report is the median
over rounds and the ratio of medians fuse/competitor.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from typing import Callable, Mapping, Sequence

MIB = 1024 * 1024
ALLREDUCE_BYTES = 64 << 20   # the bandwidth workloads' one allreduce per step


def time_per_call(fn: Callable[[], object], calls: int) -> float:
    """Mean wall time of one call of ``fn`` over ``calls`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def timed_steps(step: Callable[[], object], barrier: Callable[[], object], warmup: int,
                steps: int) -> list[float]:
    """The wall time of each of ``steps`` calls of ``step``, after ``warmup`` untimed calls;
    every rank passes ``barrier`` before and after the timed calls, so they start together and
    no rank's figures include waiting for a slower one to finish warming up."""
    for _ in range(warmup):
        step()
    barrier()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    barrier()
    return times


def alternating_rounds(sides: Mapping[str, Callable[[], float]], rounds: int,
                       barrier: Callable[[], object]) -> dict[str, list[float]]:
    """Run each side's measurement once per round, reversing the order every other round.

    ``sides`` maps a label to a function returning one measurement; the result maps each label
    to its ``rounds`` measurements.
    """
    labels = list(sides)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for rnd in range(rounds):
        for label in (labels if rnd % 2 == 0 else labels[::-1]):
            barrier()
            samples[label].append(sides[label]())
    return samples


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def ratio(fuse_value: float, competitor_value: float) -> float | None:
    """fuse / competitor; None when the competitor's figure is zero (nothing to compare)."""
    return fuse_value / competitor_value if competitor_value else None


def scaling_efficiency(rate_n_workers: float, rate_1_worker: float,
                       workers: int) -> float | None:
    """Throughput at n workers over n times the throughput of one worker."""
    return rate_n_workers / (workers * rate_1_worker) if rate_1_worker else None


def comparison(case: str, samples: Mapping[str, Sequence[float]], unit: str,
               fuse: str = "fuse", competitor: str | None = None,
               lower_is_better: bool = True, **extra) -> dict:
    """One result row: the raw samples, their medians and the ratio fuse/competitor.

    ``competitor`` defaults to the one label that is not ``fuse``.  ``unit`` names what the
    samples measure (``s``, ``samples/s``, ...); ``lower_is_better`` says how to read the ratio.
    """
    if competitor is None:
        others = [label for label in samples if label != fuse]
        competitor = others[0] if len(others) == 1 else None
    medians = {label: median(v) for label, v in samples.items()}
    row = {"case": case, "unit": unit, "lower_is_better": lower_is_better,
           "fuse": fuse, "competitor": competitor,
           "median": medians, "samples": {label: list(v) for label, v in samples.items()}}
    if competitor is not None and fuse in medians:
        row["ratio"] = ratio(medians[fuse], medians[competitor])
    row.update(extra)
    return row


def job_record(name: str, rows: list[dict], machine: dict, config: Mapping | None = None,
               **extra) -> dict:
    """What a benchmark job writes: its name, the machine it ran on, its settings and rows.
    The settings leave out ``json``, where the record is written (a scratch path when the
    suite runs the job), which says nothing about the measurement."""
    settings = {k: v for k, v in (config or {}).items() if k != "json"}
    return {"job": name, "machine": machine, "config": settings, "rows": rows, **extra}


def write_json(path: str | None, record: dict) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


def add_step_options(ap, threads_help: str) -> None:
    """The options every framework step driver (tf_step.py, mxnet_step.py) takes: levels of
    load, rounds and steps, the models and their size, and the threads per worker."""
    ap.add_argument("--load", type=int, default=1, help="busy processes beside the jobs")
    ap.add_argument("--no-quiet", action="store_true", help="skip the level without load")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--models", default="dense,resnet50")
    ap.add_argument("--size", choices=("full", "tiny"), default="full")
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                    help=threads_help)


def free_port() -> int:
    """A TCP port free on loopback right now (for torch.distributed's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resnet_layers(blocks: Sequence[int] = (3, 4, 6, 3), image: int = 224
                  ) -> list[tuple[tuple[int, ...], int]]:
    """A bottleneck ResNet's parameter tensors in definition order (torchvision's v1.5 layout,
    the stride in the 3x3 convolution), each with the forward FLOPs per image of the layer it
    belongs to (2 x multiply-adds of a convolution or the classifier, on the stored weight
    only; a batch norm's tensors carry 0).  ResNet-50: blocks (3, 4, 6, 3); ResNet-101:
    (3, 4, 23, 3)."""
    layers: list[tuple[tuple[int, ...], int]] = []

    def conv_bn(cout, cin, k, size_out):
        layers.append(((cout, cin, k, k), 2 * cout * cin * k * k * size_out * size_out))
        layers.extend([((cout,), 0), ((cout,), 0)])

    size = image // 2
    conv_bn(64, 3, 7, size)
    size //= 2                                          # the max pool
    cin = 64
    for stage, (width, count) in enumerate(zip((64, 128, 256, 512), blocks)):
        for b in range(count):
            stride = 2 if stage > 0 and b == 0 else 1
            conv_bn(width, cin, 1, size)
            size //= stride
            conv_bn(width, width, 3, size)
            conv_bn(width * 4, width, 1, size)
            if b == 0:
                conv_bn(width * 4, cin, 1, size)
            cin = width * 4
    layers.extend([((1000, 2048), 2 * 1000 * 2048), ((1000,), 0)])
    return layers


def resnet50_shapes() -> list[tuple[int, ...]]:
    """The shapes of ResNet-50's 161 parameter tensors (25.6 M values), in definition order."""
    return [shape for shape, _ in resnet_layers((3, 4, 6, 3))]


def transformer_shapes(layers: int = 6, width: int = 512, vocab: int = 32000,
                       context: int = 512) -> list[tuple[int, ...]]:
    """The shapes of a GPT-style decoder's parameter tensors, in definition order: token and
    position embeddings, then per layer two layer norms, the fused QKV and output projections
    and the two MLP matrices (4x wide), then the final norm (the head shares the token
    embedding).  The defaults: 6 layers of width 512, 32 000 tokens, 35.6 M values, 16.4 M of
    them (46 %) in the token embedding, the one parameter far larger than the rest."""
    shapes: list[tuple[int, ...]] = [(vocab, width), (context, width)]
    for _ in range(layers):
        shapes += [(width,), (width,), (3 * width, width), (3 * width,), (width, width),
                   (width,), (width,), (width,), (4 * width, width), (4 * width,),
                   (width, 4 * width), (width,)]
    shapes += [(width,), (width,)]
    return shapes


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:g} {unit}"
    return f"{n} B"
