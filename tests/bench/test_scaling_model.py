"""The scaling model's arithmetic (bench/scaling/), on cases worked by hand.  No timing."""

import math
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH / "scaling"))
sys.path.insert(1, str(BENCH / "suite"))

import fit  # noqa: E402
import gpus  # noqa: E402
import points  # noqa: E402
import predict  # noqa: E402
from model import (MIB, Cluster, Engine, Link, SharedMemory, Workload,  # noqa: E402
                   allreduce, allreduce_parts, efficiency, hierarchical_allreduce,
                   ring_allreduce, shm_allreduce, simulate_step)

from common import resnet_layers  # noqa: E402

LINK = Link(alpha=1e-4, bandwidth=1e8)          # 100 µs a message, 100 MB/s


def test_ring_allreduce_of_two_and_four_ranks():
    # N = 2: 2 messages of S/2 -> 2 alpha + S / B = 200 µs + 10 ms
    assert ring_allreduce(1e6, 2, LINK) == pytest.approx(0.0102)
    # N = 4: 6 messages of S/4 -> 6 alpha + 1.5 S / B = 600 µs + 15 ms
    assert ring_allreduce(1e6, 4, LINK) == pytest.approx(0.0156)
    assert ring_allreduce(1e6, 1, LINK) == 0.0


def test_shared_memory_stretches_with_the_ranks_per_core():
    shm = SharedMemory(alpha=1e-5, per_byte=1e-10)
    assert shm_allreduce(1e6, shm) == pytest.approx(1e-5 + 1e-4)
    assert shm_allreduce(1e6, shm, stretch=2.0) == pytest.approx(1e-5 + 2e-4)
    four_on_two = Cluster(hosts=1, local=4, inter=LINK, shm=shm, cores=2)
    assert four_on_two.oversubscription == 2.0
    assert allreduce(1e6, four_on_two) == pytest.approx(1e-5 + 2e-4)
    assert Cluster(1, 4, LINK, shm, cores=None).oversubscription == 1.0


def test_hierarchical_allreduce_pipelines_its_segments():
    shm = SharedMemory(alpha=0.0, per_byte=1e-9)
    cluster = Cluster(hosts=2, local=2, inter=LINK, shm=shm)
    # 4 MiB in 4 segments of 1 MiB; per segment: local 1 MiB x 1 ns, across 2 hosts
    # 2 alpha + 1 MiB / B; the first passes both stages, the 3 others the slower (the link)
    local = MIB * 1e-9
    cross = 2e-4 + MIB / 1e8
    assert hierarchical_allreduce(4 * MIB, cluster) == pytest.approx(local + 4 * cross)
    assert allreduce(4 * MIB, cluster) == pytest.approx(local + 4 * cross)
    # below the hierarchical threshold: a flat ring over all 4 ranks
    assert allreduce(64 << 10, cluster) == pytest.approx(ring_allreduce(64 << 10, 4, LINK))
    always = Cluster(2, 2, LINK, shm, hierarchical_threshold=0)
    # 64 KiB: one segment of 64 KiB (a quarter would be under the 1 MiB floor)
    assert allreduce(64 << 10, always) == pytest.approx((64 << 10) * 1e-9 + 2e-4
                                                       + (64 << 10) / 1e8)
    # one rank per host: the ring across hosts
    assert allreduce(4 * MIB, Cluster(2, 1, LINK, shm)) == pytest.approx(2e-4 + 4 * MIB / 1e8)


def test_fusion_takes_what_is_ready_at_the_cycle_and_the_last_at_once():
    engine = Engine(per_collective=0.0, per_rank=0.0, per_tensor=0.0, cycle_time=1e-3)
    # gradients ready at 0.2, 0.5 and 1.5 ms; a ring of 2 with 0.5 ms a message: 1 ms a buffer
    work = Workload(forward=0.2e-3, backward=[(0.0, 100), (0.3e-3, 100), (1.0e-3, 100)],
                    optimizer=0.0)
    link = Link(alpha=0.5e-3, bandwidth=math.inf)
    step = simulate_step(work, Cluster(2, 1, link, SharedMemory(0.0, 0.0)), engine)
    # the first two wait for the tick at 1 ms and go together; the last goes when the engine
    # is free again (2 ms), nothing else being pending
    assert step.buffers == [(pytest.approx(1e-3), pytest.approx(2e-3), 200),
                            (pytest.approx(2e-3), pytest.approx(3e-3), 100)]
    assert step.time == pytest.approx(3e-3)


def test_fusion_threshold_splits_the_buffers():
    engine = Engine(0.0, 0.0, 0.0, fusion_threshold=100, cycle_time=1e-3)
    work = Workload(forward=0.0, backward=[(0.0, 60), (0.0, 60), (0.0, 30)], optimizer=0.0)
    link = Link(alpha=0.0, bandwidth=1e6)       # a ring of 2: a byte a microsecond
    buffers = simulate_step(work, Cluster(2, 1, link, SharedMemory(0.0, 0.0)), engine).buffers
    assert [b for *_, b in buffers] == [60, 90]
    assert buffers[1][0] == pytest.approx(60e-6)      # one after the other


def test_a_step_overlaps_backward_and_stretches_on_shared_cores():
    work = Workload(forward=1.0, backward=[(1.0, 100), (1.0, 100)], optimizer=1.0)
    engine = Engine(per_collective=0.0, per_rank=0.0, per_tensor=0.0, cycle_time=1.0)
    link = Link(alpha=0.25, bandwidth=math.inf)     # a ring of 2: 0.5 s a buffer
    shm = SharedMemory(0.0, 0.0)
    # gradients ready at 2 and 3 s; the first reduced 2-2.5 s, the last 3-3.5 s; optimizer
    step = simulate_step(work, Cluster(2, 1, link, shm), engine)
    assert step.time == pytest.approx(4.5)
    assert step.exposed_communication == pytest.approx(0.5)
    # one rank alone: 4 s of compute and no collective
    assert efficiency(work, Cluster(2, 1, link, shm), engine) == pytest.approx(4.0 / 4.5)
    # 2 ranks on 1 core: compute takes twice as long, ready at 4 and 6 s; 6.5 + 2
    assert simulate_step(work, Cluster(2, 1, link, shm, cores=1), engine).time == \
        pytest.approx(8.5)
    # the engine's costs: 0.1 s a tensor (on the backward thread), 0.2 s a collective
    costly = Engine(per_collective=0.2, per_rank=0.0, per_tensor=0.1, cycle_time=1.0)
    # ready at 2.1 and 3.2; first 3.0 (tick) to 3.7, last 3.7 to 4.4; + 1
    assert simulate_step(work, Cluster(2, 1, link, shm), costly).time == pytest.approx(5.4)


def test_engine_cost_grows_with_the_ranks_rank_0_hears_from():
    engine = Engine(per_collective=30e-6, per_rank=2e-6, per_tensor=0.0)
    assert engine.collective(2) == pytest.approx(30e-6)
    assert engine.collective(64) == pytest.approx(30e-6 + 62 * 2e-6)


def test_fits_recover_the_parameters_of_exact_data():
    assert fit.least_squares([1, 2, 3], [5, 7, 9]) == pytest.approx((3.0, 2.0))
    with pytest.raises(ValueError, match="2 sizes"):
        fit.least_squares([4, 4], [1, 2])
    engine = Engine(per_collective=40e-6, per_rank=0.0, per_tensor=0.0)
    sizes = [4, 1 << 20, 4 << 20, 16 << 20]
    # the negotiation across the link 150 µs (110 more than on one host), 80 µs a message
    params = {"link": {"allreduce": {str(s): 150e-6 + 2 * 80e-6 + s / 1.2e8 for s in sizes}
                       | {str(256 << 10): 0.5e-3}},     # within the token bucket's burst
              "link_negotiation": {"allreduce": {"4": 150e-6}}}
    got = fit.link(params, engine)
    assert got.alpha == pytest.approx(80e-6) and got.bandwidth == pytest.approx(1.2e8)
    assert got.negotiation == pytest.approx(110e-6)
    cluster = Cluster(2, 1, got, SharedMemory(0.0, 0.0))
    assert cluster.collective(engine) == pytest.approx(150e-6)
    assert Cluster(1, 2, got, SharedMemory(0.0, 0.0)).collective(engine) == \
        pytest.approx(40e-6)


def test_resnet_layer_tables():
    r101 = resnet_layers((3, 4, 23, 3))
    assert len(r101) == 314
    assert sum(math.prod(s) for s, _ in r101) == 44_549_160        # torchvision's resnet101
    r50 = resnet_layers((3, 4, 6, 3))
    # ResNet-50's 4.09 G multiply-adds per 224x224 image
    assert sum(f for _, f in r50) / 2 == pytest.approx(4.09e9, rel=0.01)


def test_the_gpu_workload_spreads_one_documented_step_over_the_layers():
    work = gpus.resnet101(images_per_second=128.0)
    assert work.compute == pytest.approx(64 / 128.0)
    assert sum(t for t, _ in work.backward) == pytest.approx(2 / 3 * 0.5)
    assert work.gradient_bytes == 4 * 44_549_160
    assert work.backward[0][1] == 4 * 1000      # the classifier's bias is ready first
    nolap = predict.without_overlap(work)
    assert nolap.compute == pytest.approx(work.compute)
    assert all(t == 0.0 for t, _ in nolap.backward[1:])


def test_hooks_cost_per_gradient_and_per_byte():
    engine = Engine(per_collective=0.0, per_rank=0.0, per_tensor=1e-5, per_gradient_byte=1e-10)
    assert engine.hook(1_000_000) == pytest.approx(1e-5 + 1e-4)
    # on the backward thread: forward 1 s, then 1 s + 1.01e-4 s per gradient of 1 MB
    work = Workload(forward=1.0, backward=[(1.0, 1_000_000)], optimizer=0.0)
    alone = Cluster(1, 1, LINK, SharedMemory(0.0, 0.0))
    assert simulate_step(work, alone, engine).time == pytest.approx(2.0 + 1e-5 + 1e-4)
    # GPUs: the same per gradient, the slot written in device memory
    on_gpu = gpus.engine(engine)
    assert on_gpu.per_tensor == 1e-5
    assert on_gpu.per_gradient_byte == pytest.approx(2 / 732e9)


def test_cores_run_the_busy_threads_of_every_rank_in_turn():
    shm = SharedMemory(alpha=0.0, per_byte=0.01)
    two_on_two = Cluster(hosts=1, local=2, inter=LINK, shm=shm, cores=2)
    assert two_on_two.rate(1) == 1.0 and two_on_two.rate(2) == 0.5
    four_on_two = Cluster(hosts=1, local=4, inter=LINK, shm=shm, cores=2)
    assert four_on_two.rate(1) == 0.5 and four_on_two.rate(2) == 0.25
    gpus_ = Cluster(hosts=1, local=2, inter=LINK, shm=shm, cores=None)
    assert gpus_.rate(2) == 1.0
    # one host: the whole allreduce is memory work (100 bytes x 0.01 s = 1 s of a core)
    assert allreduce_parts(100, two_on_two) == (pytest.approx(1.0), 0.0)
    engine = Engine(per_collective=0.0, per_rank=0.0, per_tensor=0.0, cycle_time=1.0)
    work = Workload(forward=1.0, backward=[(1.0, 100), (1.0, 100)], optimizer=0.0)
    # own cores: first gradient at 2 s, reduced 2-3; the second at 3, reduced 3-4
    assert simulate_step(work, gpus_, engine).time == pytest.approx(4.0)
    # 2 ranks on 2 cores: from 2 s the first buffer's 1 s of work and the second layer's 1 s
    # of compute share the rank's core, both done at 4; the second buffer alone, 4-5
    step = simulate_step(work, two_on_two, engine)
    assert step.backward_end == pytest.approx(4.0)
    assert step.buffers == [(pytest.approx(2.0), pytest.approx(4.0), 100),
                            (pytest.approx(4.0), pytest.approx(5.0), 100)]
    assert step.time == pytest.approx(5.0)
    # 4 ranks on 2 cores: every phase twice as long (5 s of a core's work per rank, 4 ranks on
    # 2 cores: 10 s)
    assert simulate_step(work, four_on_two, engine).time == pytest.approx(10.0)
    # waiting on the link takes no core: 2 ranks on 2 cores across 2 hosts, 1 s a buffer
    wire = Cluster(hosts=2, local=1, inter=Link(alpha=0.5, bandwidth=math.inf), shm=shm,
                   cores=2)
    assert simulate_step(work, wire, engine).time == pytest.approx(4.0)


def test_the_hierarchical_allreduce_works_in_memory_and_waits_on_the_link():
    shm = SharedMemory(alpha=0.0, per_byte=1e-9)
    cluster = Cluster(hosts=2, local=2, inter=LINK, shm=shm, cores=2)   # 4 ranks, stretch 2
    work, wait = allreduce_parts(4 * MIB, cluster)
    # 4 segments of 1 MiB, each 1 MiB x 1 ns of memory work on a core of its own
    assert work == pytest.approx(4 * MIB * 1e-9)
    # the rest of the pipelined time (first segment's local stage, 4 link stages) is waiting
    local, cross = 2 * MIB * 1e-9, 2e-4 + MIB / 1e8
    assert work * 2 + wait == pytest.approx(local + 4 * cross)
    assert allreduce(4 * MIB, cluster) == pytest.approx(local + 4 * cross)


def test_fits_read_the_step_cpu_measurements():
    params = {"one_host": {"2": {"allreduce": {"4": 50e-6}}, "4": {"allreduce": {"4": 90e-6}}},
              "step_cpu": {"2": {"per_gradient_s": 15e-6, "per_byte_s": 4e-11,
                                 "engine_per_byte_s": 7e-11},
                           "4": {"per_gradient_s": 14e-6, "per_byte_s": 4e-11,
                                 "engine_per_byte_s": 1e-10}}}
    engine = fit.engine(params)
    assert engine.per_collective == pytest.approx(50e-6)
    assert engine.per_rank == pytest.approx(20e-6)
    assert engine.per_tensor == 15e-6 and engine.per_gradient_byte == 4e-11
    slots = fit.slots(params)
    assert slots[2] == SharedMemory(alpha=0.0, per_byte=7e-11)
    assert slots[4].per_byte == 1e-10


def test_on_shared_cores_a_ring_step_takes_at_least_a_round_of_the_ranks():
    # 2 messages of 1e6 / 2 bytes: each at least 1 ms instead of the link's 100 µs
    assert ring_allreduce(1e6, 2, LINK, least_step=1e-3) == pytest.approx(2e-3 + 1e6 / 1e8)
    assert ring_allreduce(1e6, 2, LINK, least_step=1e-5) == ring_allreduce(1e6, 2, LINK)
    engine = Engine(per_collective=60e-6, per_rank=70e-6, per_tensor=0.0)
    shm = SharedMemory(0.0, 1e-10)
    cluster = points.layout("4x16", LINK, shm, engine)
    # this machine's 64 ranks: a negotiation among them, 60 + 62 x 70 µs, is the round
    assert cluster.ranks == 64 and cluster.cores == points.CORES
    assert cluster.round == pytest.approx(60e-6 + 62 * 70e-6)
    # 16 MiB hierarchically: 4 segments of 4 MiB, each across 4 hosts in 6 ring steps
    seg = 4 * MIB
    local = seg * 1e-10 * 32
    cross = 6 * cluster.round + 1.5 * seg / 1e8
    assert allreduce(16 * MIB, cluster) == pytest.approx(local + 4 * max(local, cross))
    # GPUs: processors of their own, no round
    assert gpus.cluster(512, 25, LINK, 1.25e8).round == 0.0
