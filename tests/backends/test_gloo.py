"""The Gloo backend with real processes: every collective × dtype × reduction against numpy.

Worlds of 2 ranks rendezvous through a KVStoreServer (HTTP, as under fuserun) and worlds of 3 ranks
through a FileStore (FUSE_RENDEZVOUS_DIR).  Each world is a pool of spawned workers that stays up
for many tests: a test sends a module-level check function to every rank, each rank runs it on
its GlooBackend and compares its own result with numpy.  A world whose check failed is replaced.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback

import numpy as np
import pytest

from fuse.backends.base import Group
from fuse.backends.gloo import GlooBackend, GlooError, _gloo, choose_address
from fuse.config import Config
from fuse.cluster.store import SECRET_ENV, FileStore, KVStoreServer

pytestmark = pytest.mark.timeout(300)

TIMEOUT = 10.0  # gloo timeout inside the worlds; a failing check must not wait longer
CTX = mp.get_context("spawn")

DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64", "bool"]
OPS = ["sum", "min", "max", "product"]


# ------------------------------------------------------------------------ worker side

def _config(rank, size, rendezvous, timeout):
    kind, where = rendezvous
    if kind == "file":
        os.environ["FUSE_RENDEZVOUS_DIR"] = where  # worker process only
        return Config.from_env({}, rank=rank, size=size, gloo_timeout_seconds=timeout)
    host, port, secret = where
    os.environ[SECRET_ENV] = secret  # worker process only, as a launcher would set it
    return Config.from_env({}, rank=rank, size=size, gloo_timeout_seconds=timeout,
                           rendezvous_addr=host, rendezvous_port=port)


def _serve(rank, size, rendezvous, commands, results):
    try:
        backend = GlooBackend(_config(rank, size, rendezvous, TIMEOUT))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
        return
    results.put((rank, True, None))
    while True:
        item = commands.get()
        if item is None:
            break
        fn, args = item
        try:
            results.put((rank, True, fn(backend, *args)))
        except BaseException:
            results.put((rank, False, traceback.format_exc()))
    backend.close()


def _rank_data(dtype, op, rank, n):
    """This rank's input: values whose reduction is exact in every dtype (even fp16/bf16)."""
    rng = np.random.default_rng(1000 * rank + n)
    if dtype == "bool":
        return rng.random(n) < 0.5
    if op == "product":
        vals = rng.integers(1, 4, n) * np.where(rng.random(n) < 0.3, -1, 1)
    else:
        vals = rng.integers(-50, 51, n)
    if dtype.startswith("uint"):
        vals = np.abs(vals)
    if dtype == "bfloat16":
        return _to_bf16(vals.astype(np.float32))
    return vals.astype(dtype)


def _to_bf16(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even (reference for the tests)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(h):
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


_NUMPY_OPS = {"sum": np.add, "min": np.minimum, "max": np.maximum, "product": np.multiply}
_BOOL_OPS = {"sum": np.logical_or, "max": np.logical_or,
             "min": np.logical_and, "product": np.logical_and}


def _expected(dtype, op, ranks, n):
    inputs = [_rank_data(dtype, op, r, n) for r in ranks]
    if dtype == "bool":
        return functools.reduce(_BOOL_OPS[op], inputs)
    if dtype == "bfloat16":
        return _to_bf16(functools.reduce(_NUMPY_OPS[op], [_from_bf16(x) for x in inputs]))
    with np.errstate(over="ignore"):
        return functools.reduce(_NUMPY_OPS[op], inputs)


def _assert_equal(got, want, what):
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)[:5]
        raise AssertionError(f"{what}: first differences at {bad.tolist()}: "
                             f"got {got[bad].tolist()} want {want[bad].tolist()}")


def check_allreduce(b, dtype, op, n):
    buf = _rank_data(dtype, op, b.rank, n)
    b.world.allreduce(buf, dtype, op)
    _assert_equal(buf, _expected(dtype, op, range(b.size), n), f"allreduce {dtype} {op} n={n}")


def check_allreduce_large(b, algorithm):
    """Several ring segments (> 1 MiB) with a size not divisible by the world."""
    b.world._set_algorithm(algorithm)
    try:
        n = 3 * 262144 + 7
        buf = np.arange(n, dtype=np.float32) * (b.rank + 1)
        b.world.allreduce(buf, "float32", "sum")
        scale = sum(range(1, b.size + 1))
        _assert_equal(buf, np.arange(n, dtype=np.float32) * scale, f"large allreduce {algorithm}")
    finally:
        b.world._set_algorithm("ring")


def check_reducescatter(b, counts, dtype, op):
    n = sum(counts)
    buf = _rank_data(dtype, op, b.rank, n)
    b.world.reducescatter(buf, counts, dtype, op)
    start = sum(counts[:b.rank])
    want = _expected(dtype, op, range(b.size), n)[start:start + counts[b.rank]]
    _assert_equal(buf[:counts[b.rank]], want, f"reducescatter {counts}")


def _block(src, dst, n):
    return ((np.arange(n) * 7 + 31 * src + 5 * dst) % 251).astype(np.uint8)


def check_allgatherv(b, sizes):
    send = _block(b.rank, 0, sizes[b.rank])
    recv = np.full(sum(sizes), 255, dtype=np.uint8)
    b.world.allgatherv(send, recv, sizes)
    want = np.concatenate([_block(r, 0, n) for r, n in enumerate(sizes)])
    _assert_equal(recv, want, f"allgatherv {sizes}")


def check_alltoallv(b, matrix):
    """matrix[i][j]: bytes rank i sends to rank j."""
    me = b.rank
    sendbytes = matrix[me]
    recvbytes = [matrix[i][me] for i in range(b.size)]
    send = np.concatenate([_block(me, j, n) for j, n in enumerate(sendbytes)])
    recv = np.full(sum(recvbytes), 255, dtype=np.uint8)
    b.world.alltoallv(send, sendbytes, recv, recvbytes)
    want = np.concatenate([_block(i, me, n) for i, n in enumerate(recvbytes)])
    _assert_equal(recv, want, f"alltoallv {matrix}")


def check_broadcast(b, root, n):
    buf = _block(root, 1, n) if b.rank == root else np.zeros(n, dtype=np.uint8)
    b.world.broadcast(buf, root)
    _assert_equal(buf, _block(root, 1, n), f"broadcast root {root}")


def check_barrier(b):
    if b.rank == 0:
        time.sleep(0.4)
    start = time.monotonic()
    b.world.barrier()
    waited = time.monotonic() - start
    if b.rank != 0 and waited < 0.25:
        raise AssertionError(f"barrier returned after {waited:.3f} s, before rank 0 arrived")


def check_exchange(b):
    got = b.exchange(f"rank {b.rank}".encode() * b.rank)
    want = [f"rank {r}".encode() * r for r in range(b.size)]
    assert got == want, got


def check_groups(b, groups):
    """groups: [(group_id, ranks)]; members build and use each group, then all meet."""
    for gid, ranks in groups:
        if b.rank not in ranks:
            continue
        g = b.create_group(ranks, gid)
        assert isinstance(g, Group)
        assert (g.rank, g.size) == (ranks.index(b.rank), len(ranks)), (g.rank, g.size)
        buf = np.array([b.rank + 1, 10 * b.rank], dtype=np.int64)
        g.allreduce(buf, "int64", "sum")
        _assert_equal(buf, np.array([sum(r + 1 for r in ranks), 10 * sum(ranks)]),
                      f"group {gid} {ranks} allreduce")
        recv = np.zeros(2 * len(ranks), dtype=np.uint8)
        g.allgatherv(np.array([b.rank, gid], dtype=np.uint8), recv, [2] * len(ranks))
        _assert_equal(recv, np.array([[r, gid] for r in ranks], dtype=np.uint8).ravel(),
                      f"group {gid} allgatherv")
        g.broadcast(buf.view(np.uint8), len(ranks) - 1)
        g.barrier()
    b.world.barrier()


class _Ops(ctypes.Structure):
    _ERR = (ctypes.c_char_p, ctypes.c_size_t)
    _fields_ = [
        ("api_version", ctypes.c_int),
        ("self", ctypes.c_void_p),
        ("allreduce", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_int, ctypes.c_int, *_ERR)),
        ("allgatherv", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                                        *_ERR)),
        ("broadcast", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_int, *_ERR)),
        ("alltoallv", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       *_ERR)),
        ("reducescatter", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_void_p, ctypes.c_int, ctypes.c_int, *_ERR)),
        ("barrier", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *_ERR)),
    ]


def _ops_of(group):
    capsule = group.native_ops()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    ops = _Ops.from_address(get(capsule, _gloo.CAPSULE_NAME.encode()))
    return capsule, ops


def _sizes(values):
    return (ctypes.c_size_t * len(values))(*values)


def check_native_ops(b):
    """The capsule's table, called as the engine calls it (ctypes drops the GIL per call)."""
    capsule, ops = _ops_of(b.world)
    assert ops.api_version == _gloo.API_VERSION == 1
    err = ctypes.create_string_buffer(512)
    me, size = b.rank, b.size

    def call(fn, *args):
        rc = fn(ops.self, *args, err, len(err))
        if rc != 0:
            raise AssertionError(f"native call failed: {err.value.decode()}")

    buf = _rank_data("float32", "sum", me, 1001)
    call(ops.allreduce, buf.ctypes.data, buf.size, 7, 0)  # FUSE_FLOAT32, FUSE_OP_SUM
    _assert_equal(buf, _expected("float32", "sum", range(size), 1001), "native allreduce")

    sizes = [3 * r + 1 for r in range(size)]
    send, recv = _block(me, 0, sizes[me]), np.zeros(sum(sizes), dtype=np.uint8)
    call(ops.allgatherv, send.ctypes.data, send.size, recv.ctypes.data, _sizes(sizes))
    _assert_equal(recv, np.concatenate([_block(r, 0, n) for r, n in enumerate(sizes)]),
                  "native allgatherv")

    buf = _block(size - 1, 1, 17) if me == size - 1 else np.zeros(17, dtype=np.uint8)
    call(ops.broadcast, buf.ctypes.data, buf.size, size - 1)
    _assert_equal(buf, _block(size - 1, 1, 17), "native broadcast")

    matrix = [[(i + 2 * j) % 4 for j in range(size)] for i in range(size)]
    sb, rb = matrix[me], [matrix[i][me] for i in range(size)]
    send = np.concatenate([_block(me, j, n) for j, n in enumerate(sb)])
    recv = np.zeros(sum(rb), dtype=np.uint8)
    call(ops.alltoallv, send.ctypes.data, _sizes(sb), recv.ctypes.data, _sizes(rb))
    _assert_equal(recv, np.concatenate([_block(i, me, n) for i, n in enumerate(rb)]),
                  "native alltoallv")

    counts = [2 + r for r in range(size)]
    buf = _rank_data("int32", "max", me, sum(counts))
    call(ops.reducescatter, buf.ctypes.data, _sizes(counts), 4, 2)  # FUSE_INT32, FUSE_OP_MAX
    start = sum(counts[:me])
    _assert_equal(buf[:counts[me]], _expected("int32", "max", range(size), sum(counts))
                  [start:start + counts[me]], "native reducescatter")

    call(ops.barrier)
    # A bad argument is reported, not thrown, and leaves the group usable.
    rc = ops.allreduce(ops.self, buf.ctypes.data, 1, 99, 0, err, len(err))
    assert rc != 0 and b"unknown dtype code 99" in err.value, err.value
    assert err.value.startswith(f"gloo allreduce failed on group rank {me} of {size}".encode())
    call(ops.barrier)
    del capsule


def check_gil_released(b):
    """While rank 0 blocks in a barrier, its other Python threads keep running."""
    if b.rank != 0:
        time.sleep(1.0)
        b.world.barrier()
        return None
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.002)

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.05)
    before = len(ticks)
    b.world.barrier()
    during = len(ticks) - before
    stop.set()
    t.join()
    if during < 100:
        raise AssertionError(f"only {during} ticks of another thread during a ~1 s barrier")
    return during


# ------------------------------------------------------------------------ test side

class World:
    """``size`` spawned ranks, each holding a GlooBackend, running check functions on demand."""

    def __init__(self, size, rendezvous):
        self.size, self.broken, self.server = size, False, None
        if rendezvous == "http":  # a fresh server per world: a new world must not read old keys
            self.server = KVStoreServer(host="127.0.0.1").start()
            rendezvous = ("http", ("127.0.0.1", self.server.port, self.server.secret.hex()))
        self.results = CTX.Queue()
        self.commands = [CTX.Queue() for _ in range(size)]
        self.procs = [CTX.Process(target=_serve, args=(r, size, rendezvous, self.commands[r],
                                                       self.results), daemon=True)
                      for r in range(size)]
        for p in self.procs:
            p.start()
        self._collect(120.0, "start-up")

    def _collect(self, timeout, what):
        deadline = time.monotonic() + timeout
        got, failures = {}, []
        while len(got) < self.size:
            try:
                rank, ok, value = self.results.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.broken = True
                missing = sorted(set(range(self.size)) - set(got))
                pytest.fail(f"{what}: ranks {missing} did not answer within {timeout} s")
            got[rank] = value
            if not ok:
                failures.append(f"--- rank {rank} ---\n{value}")
        if failures:
            self.broken = True
            pytest.fail(f"{what} failed:\n" + "\n".join(failures))
        return [got[r] for r in range(self.size)]

    def run(self, fn, *args, timeout=2 * TIMEOUT + 10):
        for q in self.commands:
            q.put((fn, args))
        return self._collect(timeout, fn.__name__)

    def close(self):
        for q in self.commands:
            q.put(None)
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        if self.server is not None:
            self.server.stop()


@pytest.fixture(scope="module")
def _worlds(tmp_path_factory):
    worlds = {}

    def get(size):
        w = worlds.get(size)
        if w is None or w.broken:
            if w is not None:
                w.close()
            if size == 2:  # HTTP rendezvous, as under fuserun
                rdv = "http"
            else:
                rdv = ("file", str(tmp_path_factory.mktemp("rendezvous")))
            w = worlds[size] = World(size, rdv)
        return w

    yield get
    for w in worlds.values():
        w.close()


@pytest.fixture(params=[2, 3], ids=["np2-http", "np3-file"])
def world(request, _worlds):
    return _worlds(request.param)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce(world, dtype, op):
    world.run(check_allreduce, dtype, op, 1001)


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_allreduce_tiny(world, n):
    world.run(check_allreduce, "float64", "sum", n)
    world.run(check_allreduce, "bfloat16", "max", n)


@pytest.mark.parametrize("algorithm", ["ring", "bcube"])
def test_allreduce_large(world, algorithm):
    world.run(check_allreduce_large, algorithm)


@pytest.mark.parametrize("dtype,op", [("float32", "sum"), ("int64", "product"),
                                      ("float16", "min"), ("bfloat16", "sum"), ("bool", "max")])
def test_reducescatter(world, dtype, op):
    counts = [5, 0, 3][:world.size]
    world.run(check_reducescatter, counts, dtype, op)
    world.run(check_reducescatter, [1000 + r for r in range(world.size)], dtype, op)


def test_allgatherv_uneven(world):
    world.run(check_allgatherv, [7, 0, 100_003][:world.size])
    world.run(check_allgatherv, [0] * world.size)
    world.run(check_allgatherv, [1 << 20] + [1] * (world.size - 1))


def test_alltoallv_uneven(world):
    n = world.size
    world.run(check_alltoallv, [[(3 * i + j * j) % 5 for j in range(n)] for i in range(n)])
    world.run(check_alltoallv, [[0] * n for _ in range(n)])
    world.run(check_alltoallv, [[70_001 * (i == 0) + j for j in range(n)] for i in range(n)])


def test_broadcast_every_root(world):
    for root in range(world.size):
        world.run(check_broadcast, root, 1 + 1000 * root)
    world.run(check_broadcast, 1, 3_000_000)


def test_barrier(world):
    world.run(check_barrier)


def test_exchange(world):
    world.run(check_exchange)


def test_groups(world):
    if world.size == 2:
        groups = [(5, [0, 1]), (6, [1]), (7, [0])]
    else:
        groups = [(5, [0, 2]), (6, [1, 2]), (7, [1]), (8, [0, 1, 2])]
    world.run(check_groups, groups)


def test_native_ops(world):
    world.run(check_native_ops)


def test_gil_released_during_collective(world):
    ticks = world.run(check_gil_released)[0]
    assert ticks >= 100


# -- failures: a dead or missing rank makes the others raise, within the timeout

def _failing_rank(rank, size, rendezvous, timeout, scenario, results):
    try:
        backend = GlooBackend(_config(rank, size, rendezvous, timeout))
        backend.world.barrier()
        if rank == size - 1:
            if scenario == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(4 * timeout)  # "hang": never join the collective
            return
        buf = np.ones(1 << 16, dtype=np.float32)
        start = time.monotonic()
        try:
            for _ in range(100_000):
                backend.world.allreduce(buf, "float32", "sum")
        except GlooError as err:
            elapsed = time.monotonic() - start
            try:
                backend.world.barrier()
                again = "no error"
            except GlooError as err2:
                again = str(err2)
            results.put((rank, elapsed, str(err), again))
            return
        results.put((rank, None, "every allreduce succeeded", ""))
    except BaseException:
        results.put((rank, None, traceback.format_exc(), ""))


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("scenario", ["kill", "hang"])
def test_dead_rank_fails_others(tmp_path, size, scenario):
    timeout = 3.0
    results = CTX.Queue()
    procs = [CTX.Process(target=_failing_rank,
                         args=(r, size, ("file", str(tmp_path)), timeout, scenario, results),
                         daemon=True) for r in range(size)]
    for p in procs:
        p.start()
    try:
        reports = [results.get(timeout=60) for _ in range(size - 1)]
    finally:
        for p in procs:
            p.kill()
            p.join()
    for rank, elapsed, message, again in reports:
        assert elapsed is not None, f"rank {rank}: {message}"
        assert f"gloo allreduce failed on group rank {rank} of {size}: " in message, message
        assert elapsed < timeout + 2.0, f"rank {rank} took {elapsed:.1f} s to fail: {message}"
        assert "gloo barrier failed" in again and "earlier failure" in again, again


def _abort_rank(rank, path, results):
    """Rank 1 goes silent with its connections open (as a peer whose host vanished: no FIN
    ever comes); rank 0 gives the world up while an allreduce waits on it."""
    try:
        config = _config(rank, 2, ("file", path), 600.0).replace(peer_timeout_seconds=600.0)
        backend = GlooBackend(config)
        backend.world.barrier()
        if rank == 1:
            results.put((rank, "silent", ""))
            threading.Event().wait()        # until the test kills this process
        failed = queue.Queue()

        def reduce():
            try:
                backend.world.allreduce(np.ones(1 << 16, dtype=np.float32), "float32", "sum")
                failed.put("the allreduce succeeded")
            except GlooError as err:
                failed.put(str(err))

        waiter = threading.Thread(target=reduce, daemon=True)
        waiter.start()
        backend.abort()
        message = failed.get()
        backend.close()             # must not wait for the collective timeout either
        results.put((rank, "aborted", message))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


def test_abort_fails_a_collective_waiting_on_a_silent_peer(tmp_path):
    # The collective timeout (the peer timeout) is 600 s: only the abort can end rank 0's
    # allreduce before the test's wait for its report (60 s) runs out.
    results = CTX.Queue()
    procs = [CTX.Process(target=_abort_rank, args=(r, str(tmp_path), results), daemon=True)
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        reports = {}
        while 0 not in reports:
            rank, what, message = results.get(timeout=60)
            reports[rank] = (what, message)
    finally:
        for p in procs:
            p.kill()
            p.join()
    what, message = reports[0]
    assert what == "aborted", message
    assert "gloo allreduce failed on group rank 0 of 2: " in message, message


def _iface_rank(rank, path, results):
    os.environ["FUSE_RENDEZVOUS_DIR"] = path
    try:
        backend = GlooBackend(Config.from_env({}, rank=rank, size=2, gloo_iface="lo",
                                              gloo_timeout_seconds=TIMEOUT))
        buf = np.array([rank + 1], dtype=np.int32)
        backend.world.allreduce(buf, "int32", "sum")
        results.put((rank, int(buf[0]), backend.address))
        backend.close()
    except BaseException:
        results.put((rank, None, traceback.format_exc()))


def test_world_on_named_interface(tmp_path):
    """FUSE_GLOO_IFACE=lo binds the device to the loopback interface."""
    results = CTX.Queue()
    procs = [CTX.Process(target=_iface_rank, args=(r, str(tmp_path), results), daemon=True)
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = sorted(results.get(timeout=60) for _ in procs)
    finally:
        for p in procs:
            p.join(5)
            p.kill()
    for rank, total, address in got:
        assert total == 3, address
        assert "127.0.0.1" in address, address


def _secret_rank(rank, path, secret, results):
    os.environ["FUSE_RENDEZVOUS_DIR"] = path
    os.environ[SECRET_ENV] = secret
    try:
        backend = GlooBackend(Config.from_env({}, rank=rank, size=2, gloo_timeout_seconds=TIMEOUT))
        buf = np.array([rank + 1], dtype=np.int32)
        backend.world.allreduce(buf, "int32", "sum")
        results.put((rank, int(buf[0]), ""))
        backend.close()
    except BaseException as err:
        results.put((rank, None, f"{type(err).__name__}: {err}"))


@pytest.mark.parametrize("same", [True, False])
def test_every_connection_proves_the_jobs_secret(tmp_path, same):
    """A peer that does not know the job's secret (as a process that connected to a Gloo
    listener in a rank's place) is refused on its connection, by name, before any of the job's
    data travels; peers that know it connect as before."""
    secrets = ["ab" * 16, "ab" * 16 if same else "cd" * 16]
    results = CTX.Queue()
    procs = [CTX.Process(target=_secret_rank, args=(r, str(tmp_path), secrets[r], results),
                         daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = sorted(results.get(timeout=60) for _ in procs)
    finally:
        for p in procs:
            p.join(5)
            p.kill()
    for rank, total, error in got:
        if same:
            assert total == 3, error
        else:
            assert total is None, f"rank {rank} reduced with a peer that has another secret"
            assert (f"connections rank {rank} holds for rank(s) [{1 - rank}]" in error
                    and "did not prove the job's secret" in error), error


def test_rendezvous_timeout_names_the_missing_keys(tmp_path):
    config = Config.from_env({}, rank=0, size=2, gloo_timeout_seconds=1.0)
    start = time.monotonic()
    with pytest.raises(GlooError, match=r"cannot connect group rank 0 of 2") as info:
        GlooBackend(config, store=FileStore(str(tmp_path)))
    assert time.monotonic() - start < 10
    assert isinstance(info.value.__cause__, TimeoutError), repr(info.value.__cause__)
    assert "gloo/" in str(info.value)


# -- one process: no store, no sockets

@pytest.fixture
def solo():
    backend = GlooBackend(Config.from_env({}))
    yield backend
    backend.close()


def test_single_process(solo):
    assert GlooBackend.is_available() == (True, "")
    assert GlooBackend.name == "gloo"
    assert solo.exchange(b"xyz") == [b"xyz"]
    buf = np.arange(5, dtype=np.int16)
    solo.world.allreduce(buf, "int16", "product")
    _assert_equal(buf, np.arange(5, dtype=np.int16), "solo allreduce")
    recv = np.zeros(3, dtype=np.uint8)
    solo.world.allgatherv(np.array([1, 2, 3], dtype=np.uint8), recv, [3])
    _assert_equal(recv, np.array([1, 2, 3], dtype=np.uint8), "solo allgatherv")
    solo.world.alltoallv(np.array([4, 5], dtype=np.uint8), [2], recv[:2], [2])
    _assert_equal(recv, np.array([4, 5, 3], dtype=np.uint8), "solo alltoallv")
    solo.world.broadcast(recv, 0)
    solo.world.barrier()
    g = solo.create_group([0], 3)
    assert (g.rank, g.size) == (0, 1) and g is not solo.world
    assert solo.create_group([0], 0) is solo.world
    assert solo.world.native_ops() is not None


def test_argument_errors(solo):
    buf = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError, match="unsupported dtype 'complex64'"):
        solo.world.allreduce(buf, "complex64", "sum")
    with pytest.raises(ValueError, match="unsupported reduction 'mean'"):
        solo.world.allreduce(buf, "float32", "mean")
    with pytest.raises(ValueError, match="whole int64 elements"):
        solo.world.allreduce(buf[:3], "int64", "sum")
    with pytest.raises(ValueError, match="recvbytes has 2 entries"):
        solo.world.allgatherv(buf, buf, [8, 8])
    with pytest.raises(ValueError, match="allgatherv: recvbuf has 8 bytes, recvbytes add up "
                       "to 16"):
        solo.world.allgatherv(np.zeros(16, np.uint8), buf[:2], [16])
    with pytest.raises(ValueError, match="alltoallv: sendbuf has 16 bytes, sendbytes add up "
                       "to 20"):
        solo.world.alltoallv(buf, [20], buf, [4])
    with pytest.raises(ValueError, match=r"reducescatter: buffer has 16 bytes, recvcounts \(times "
                       r"the float32 item size\) add up to 20"):
        solo.world.reducescatter(buf, [5], "float32", "sum")
    with pytest.raises(ValueError, match=r"invalid ranks \[1\] for a world of 1"):
        solo.create_group([1], 4)
    with pytest.raises((ValueError, BufferError), match="contiguous"):
        solo.world.allreduce(np.zeros(4)[::2], "float64", "sum")  # not contiguous


def test_closed_group_raises(solo):
    g = solo.create_group([0], 9)
    g.close()
    with pytest.raises(GlooError, match="barrier failed on group rank 0 of 1: the group is closed"):
        g.barrier()


def test_group_needs_store_for_many_ranks(monkeypatch):
    monkeypatch.delenv("FUSE_RENDEZVOUS_DIR", raising=False)
    with pytest.raises(GlooError, match="no rendezvous store"):
        GlooBackend(Config.from_env({}, rank=1, size=2))


def test_choose_address():
    cfg = Config.from_env({}, gloo_iface="lo")
    assert choose_address(cfg) == ("", "lo")
    cfg = Config.from_env({}, rendezvous_addr="127.0.0.1", rendezvous_port=1234)
    assert choose_address(cfg) == ("127.0.0.1", "")
    assert choose_address(Config.from_env({})) == ("127.0.0.1", "")


def test_device_on_missing_interface_names_it():
    with pytest.raises(GlooError, match="no-such-if0"):
        _gloo.Device(iface="no-such-if0")


# -- the reduction kernels, in-process, against numpy

def _kernel(a, b, dtype, op):
    out = np.empty_like(a)
    _gloo.reduce_local(out, a, b, dtype, op)
    return out


def test_float16_roundtrip_exhaustive():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16)
    out = _kernel(x, x, "float16", "max").view(np.uint16)
    nan = np.isnan(x)
    _assert_equal(out[~nan], bits[~nan], "half -> float -> half")
    assert np.isnan(out.view(np.float16)[nan]).all()


@pytest.mark.parametrize("op", OPS)
def test_float16_kernels_match_numpy(op):
    rng = np.random.default_rng(7)
    # an odd length: the vector kernel takes eight at a time, the tail goes element by element
    a = rng.integers(0, 1 << 16, 200_003, dtype=np.uint32).astype(np.uint16).view(np.float16)
    b = rng.integers(0, 1 << 16, 200_003, dtype=np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(all="ignore"):
        want = _NUMPY_OPS[op](a, b)
    got = _kernel(a, b, "float16", op)
    ok = ~np.isnan(want)
    _assert_equal(got.view(np.uint16)[ok], want.view(np.uint16)[ok], f"float16 {op}")
    assert np.isnan(got[~ok & ~np.isnan(a) & ~np.isnan(b)]).all()


@pytest.mark.parametrize("op", OPS)
def test_bfloat16_kernels(op):
    rng = np.random.default_rng(8)
    a = _to_bf16(rng.standard_normal(100_000).astype(np.float32) * 1e3)
    b = _to_bf16(rng.standard_normal(100_000).astype(np.float32) * 1e-2)
    want = _to_bf16(_NUMPY_OPS[op](_from_bf16(a), _from_bf16(b)))
    _assert_equal(_kernel(a, b, "bfloat16", op), want, f"bfloat16 {op}")


def test_bfloat16_rounding_edges():
    """Sums that land exactly between two bfloat16 values round to the even one."""
    a = np.array([1.0, 1.0 + 2.0 ** -7, 3.0e38, 3.0e38, np.inf, -0.0], dtype=np.float32)
    b = np.array([2.0 ** -8, 2.0 ** -8, 1.0, 3.0e38, 1.0, 0.0], dtype=np.float32)
    got = _from_bf16(_kernel(_to_bf16(a), _to_bf16(b), "bfloat16", "sum"))
    big = _from_bf16(_to_bf16(3.0e38))[()]
    want = np.array([1.0, 1.0 + 2.0 ** -6, big, np.inf, np.inf, 0.0], dtype=np.float32)
    _assert_equal(got, want, "bf16 edges")
    nan = _kernel(np.array([0x7FC1], dtype=np.uint16), np.array([0], dtype=np.uint16),
                  "bfloat16", "sum")
    assert np.isnan(_from_bf16(nan)).all()


def test_bool_kernels():
    a = np.array([0, 0, 1, 1], dtype=bool)
    b = np.array([0, 1, 0, 1], dtype=bool)
    for op, want in [("sum", [0, 1, 1, 1]), ("max", [0, 1, 1, 1]),
                     ("min", [0, 0, 0, 1]), ("product", [0, 0, 0, 1])]:
        _assert_equal(_kernel(a, b, "bool", op).view(np.uint8),
                      np.array(want, dtype=np.uint8), f"bool {op}")
