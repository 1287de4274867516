"""The example kv backend's collectives, with ranks as threads over a FileStore.

Imports the package from its source directory, so it runs without installing it.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from fuse.config import Config
from fuse.cluster.store import FileStore
from paths_util import support

sys.path.insert(0, support("fuse_kvbackend"))
import fuse_kvbackend as kv  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def run_ranks(size, body, tmp_path, monkeypatch):
    """Run ``body(rank, backend)`` on ``size`` thread-ranks sharing a FileStore; results by rank."""
    monkeypatch.setenv("FUSE_RENDEZVOUS_DIR", str(tmp_path / "store"))
    monkeypatch.delenv("FUSE_GLOO_RENDEZVOUS_ADDR", raising=False)
    monkeypatch.delenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", raising=False)
    results, errors = [None] * size, []

    def worker(rank):
        try:
            cfg = Config.from_env({}, rank=rank, size=size, gloo_timeout_seconds=20.0)
            backend = kv.KVBackend(cfg)
            results[rank] = body(rank, backend)
            backend.close()
        except BaseException as err:  # reported below, with the rank
            errors.append((rank, err))

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


@pytest.mark.parametrize("op,expect", [
    ("sum", lambda xs: np.sum(xs, axis=0)),
    ("min", lambda xs: np.min(xs, axis=0)),
    ("max", lambda xs: np.max(xs, axis=0)),
    ("product", lambda xs: np.prod(xs, axis=0)),
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "float16", "uint8"])
def test_allreduce(op, expect, dtype, tmp_path, monkeypatch):
    size = 3
    inputs = [(np.arange(6) % 4 + r + 1).astype(dtype) for r in range(size)]

    def body(rank, backend):
        group = backend.create_group(range(size), 0)
        buf = inputs[rank].copy()
        group.allreduce(buf, dtype, op)
        return buf

    out = run_ranks(size, body, tmp_path, monkeypatch)
    want = expect(np.stack(inputs)).astype(dtype)
    for buf in out:
        np.testing.assert_array_equal(buf, want)


def test_allreduce_bfloat16(tmp_path, monkeypatch):
    values = [np.array([1.5, -2.0, 3.0e10, np.nan], dtype=np.float32),
              np.array([0.25, 8.0, 1.0e10, 1.0], dtype=np.float32)]

    def body(rank, backend):
        group = backend.create_group([0, 1], 0)
        buf = kv.f32_to_bf16(values[rank])
        group.allreduce(buf, "bfloat16", "sum")
        return kv.bf16_to_f32(buf)

    a, b = run_ranks(2, body, tmp_path, monkeypatch)
    np.testing.assert_array_equal(a, b)
    assert a[0] == 1.75 and a[1] == 6.0
    assert abs(a[2] - 4.0e10) / 4.0e10 < 1e-2
    assert np.isnan(a[3])


def test_bf16_rounding():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.5, np.inf], dtype=np.float32)
    bits = kv.f32_to_bf16(x)
    assert bits.dtype == np.uint16
    # 1 + 2**-8 is halfway between 1 and 1 + 2**-7: ties go to even (1.0)
    np.testing.assert_array_equal(kv.bf16_to_f32(bits),
                                  np.array([1.0, 1.0, 1.015625, -3.5, np.inf], np.float32))


def test_allgatherv_broadcast_alltoallv_barrier_exchange(tmp_path, monkeypatch):
    size = 3

    def body(rank, backend):
        out = {}
        out["exchange"] = backend.exchange(f"hello {rank}".encode())
        group = backend.create_group(range(size), 0)
        send = np.full(rank + 1, rank, dtype=np.uint8)
        recv = np.zeros(6, dtype=np.uint8)
        group.allgatherv(send, recv, [1, 2, 3])
        out["allgatherv"] = recv
        buf = np.arange(5, dtype=np.uint8) * (rank + 1)
        group.broadcast(buf, 1)
        out["broadcast"] = buf
        # member r sends d + 1 bytes of value 10 * r + d to member d
        sendbytes = [d + 1 for d in range(size)]
        sendbuf = np.concatenate([np.full(d + 1, 10 * rank + d, np.uint8) for d in range(size)])
        recvbytes = [rank + 1] * size
        recvbuf = np.zeros(sum(recvbytes), np.uint8)
        group.alltoallv(sendbuf, sendbytes, recvbuf, recvbytes)
        out["alltoallv"] = recvbuf
        group.barrier()
        # reducescatter through the Group default (allreduce, then move the block)
        rs = np.arange(6, dtype=np.float32) + rank
        group.reducescatter(rs, [2, 2, 2], "float32", "sum")
        out["reducescatter"] = rs[:2].copy()
        return out

    results = run_ranks(size, body, tmp_path, monkeypatch)
    for rank, out in enumerate(results):
        assert out["exchange"] == [b"hello 0", b"hello 1", b"hello 2"]
        np.testing.assert_array_equal(out["allgatherv"], [0, 1, 1, 2, 2, 2])
        np.testing.assert_array_equal(out["broadcast"], np.arange(5) * 2)
        want = np.concatenate([np.full(rank + 1, 10 * s + rank) for s in range(size)])
        np.testing.assert_array_equal(out["alltoallv"], want)
        total = sum(np.arange(6, dtype=np.float32) + r for r in range(size))
        np.testing.assert_array_equal(out["reducescatter"], total[2 * rank:2 * rank + 2])


def test_subgroup_and_many_rounds(tmp_path, monkeypatch):
    """Groups are independent namespaces; sequence numbers keep consecutive collectives apart."""

    def body(rank, backend):
        sums = []
        if rank in (0, 2):
            group = backend.create_group([2, 0], 7)
            assert (group.rank, group.size) == ([0, 2].index(rank), 2)
            for i in range(20):
                buf = np.array([i + rank], dtype=np.int64)
                group.allreduce(buf, "int64", "sum")
                sums.append(int(buf[0]))
        world = backend.create_group(range(3), 0)
        world.barrier()
        return sums

    results = run_ranks(3, body, tmp_path, monkeypatch)
    assert results[0] == results[2] == [2 * i + 2 for i in range(20)]
    assert results[1] == []


def test_single_process_needs_no_store(monkeypatch):
    monkeypatch.delenv("FUSE_RENDEZVOUS_DIR", raising=False)
    monkeypatch.delenv("FUSE_GLOO_RENDEZVOUS_ADDR", raising=False)
    monkeypatch.delenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", raising=False)
    backend = kv.KVBackend(Config.from_env({}))
    assert backend.exchange(b"x") == [b"x"]
    group = backend.create_group([0], 0)
    buf = np.arange(3.0)
    group.allreduce(buf, "float64", "sum")
    group.barrier()
    np.testing.assert_array_equal(buf, np.arange(3.0))


def test_missing_peer_times_out_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSE_RENDEZVOUS_DIR", str(tmp_path))
    monkeypatch.setenv("FUSE_KV_TIMEOUT_SECONDS", "0.5")
    backend = kv.KVBackend(Config.from_env({}, rank=0, size=2))
    group = backend.create_group([0, 1], 0)
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[1\]"):
        group.barrier()


def test_failed_peer_error_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSE_RENDEZVOUS_DIR", str(tmp_path))
    FileStore(str(tmp_path)).set("errors/1", b"ZeroDivisionError: boom")
    backend = kv.KVBackend(Config.from_env({}, rank=0, size=2))
    group = backend.create_group([0, 1], 0)
    with pytest.raises(RuntimeError, match="rank 1 failed: ZeroDivisionError: boom"):
        group.barrier()


def test_old_keys_are_deleted(monkeypatch):
    """With a store that can delete, a member removes its keys of the previous collective."""
    from fuse.cluster.store import HTTPStore, KVStoreServer

    server = KVStoreServer("127.0.0.1", 0).start()
    try:
        stores = [HTTPStore("127.0.0.1", server.port, secret=server.secret) for _ in range(2)]
        groups = [kv.KVGroup(stores[r], [0, 1], r, "t", 20.0) for r in range(2)]
        errors = []

        def worker(r):
            try:
                for _ in range(5):
                    groups[r].barrier()
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        assert sorted(server.keys(kv.ROOT)) == ["fuse_kv/t/4/0", "fuse_kv/t/4/1"]
    finally:
        server.stop()
