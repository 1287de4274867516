"""Shared helpers for the multi-process engine tests (tests/collectives, tests/engine, tests/worker).

Every test starts a real job: ``run_job`` runs a module-level function on N worker processes
through ``fuse.run`` (real Gloo backend, real control channel), and ``run_script`` starts a
script under ``fuserun`` when a test needs the launcher's exit code or a worker's stderr.

Workers check their own results: each rank can rebuild every rank's input from (name, rank),
computes the expected output with numpy, and records mismatches in a :class:`Checker`, which
raises one AssertionError listing all of them at the end (so every rank still issues the same
collectives after a wrong result, and the report shows the whole picture).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import textwrap
import zlib

import numpy as np

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # the bf16 cases are left out; test_bfloat16_available fails
    ml_dtypes = None
    BFLOAT16 = None

BASE_DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32",
               "float64", "bool"]
DTYPES = BASE_DTYPES + (["bfloat16"] if BFLOAT16 is not None else [])
FLOAT_DTYPES = ["float16", "float32", "float64"] + (["bfloat16"] if BFLOAT16 is not None else [])

# relative tolerance per float dtype: results should be exact or one rounding away
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12}

WORKER_TIMEOUT = 100  # seconds; a hung worker is killed (SIGALRM) after dumping its stacks


def dtype_of(name: str) -> np.dtype:
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def dname(dtype) -> str:
    return np.dtype(dtype).name


# ------------------------------------------------------------------------- launching

def job_env(extra: dict | None = None) -> dict:
    """The caller's environment without fuse/Horovod knobs (so a developer's FUSE_* settings
    cannot change what a test means), on the Gloo backend, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env["FUSE_BACKEND"] = "gloo"
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def _entry(fn, timeout, args, kwargs):
    # Runs in the worker: never hang forever, and show where we were if we would have.
    faulthandler.dump_traceback_later(max(timeout - 3, 1), exit=False)
    signal.alarm(timeout)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()


def run_job(fn, np_: int, env: dict | None = None, args=(), kwargs=None,
            timeout: int = WORKER_TIMEOUT, hosts: str | None = None):
    """``fn(*args, **kwargs)`` on ``np_`` real workers; their results in rank order.
    ``hosts`` ("localhost:2,127.0.0.1:2") gives the workers the launcher's host identities
    (local names only: every worker still runs on this machine)."""
    import fuse
    return fuse.run(_entry, args=(fn, timeout, tuple(args), dict(kwargs or {})), np=np_,
                    env=job_env(env), hosts=hosts)


def run_script(tmp_path, body: str, np_: int, env: dict | None = None, args=(),
               timeout: float = 90) -> subprocess.CompletedProcess:
    """``fuserun -np N python script.py args...``; returns the finished process (text)."""
    path = tmp_path / "job_script.py"
    path.write_text(textwrap.dedent(body))
    argv = [sys.executable, "-m", "fuse.runner.launch", "-np", str(np_), sys.executable,
            str(path), *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=job_env(env), cwd=str(tmp_path))


def rank_lines(text: str, rank: int, stream: str = "stderr") -> list[str]:
    """The lines fuserun forwarded from ``rank``'s ``stream`` (prefix ``[R]<stream>:``)."""
    prefix = f"[{rank}]<{stream}>:"
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


# ------------------------------------------------------------------------- data

def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def rank_array(dtype, shape, rank: int, tag="", op: str = "sum") -> np.ndarray:
    """Rank ``rank``'s input for tensor ``tag``: small integer values, so that a reduction over
    up to 3 ranks (with scale factors 0.5/2) is exact in every dtype, bool and bf16 included.
    Different per rank, per tag and per element."""
    dtype = dtype_of(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    rng = np.random.default_rng(_seed(tag, rank, tuple(np.atleast_1d(shape)), dname(dtype), op))
    n = int(np.prod(shape, dtype=np.int64))
    if dname(dtype) == "bool":
        vals = rng.random(n) < 0.5
        return vals.reshape(shape)
    if op == "product":
        vals = rng.integers(1, 4, n)
        if not dname(dtype).startswith("uint"):
            vals = vals * np.where(rng.random(n) < 0.3, -1, 1)
    elif op in ("min", "max"):
        vals = rng.integers(-40, 41, n)
    else:
        vals = rng.integers(-20, 21, n)
    if dname(dtype).startswith("uint"):
        vals = np.abs(vals)
    return vals.astype(np.float64).astype(dtype).reshape(shape)


def scale(x: np.ndarray, factor: float) -> np.ndarray:
    """What the engine's scaling does to ``x`` (integers: in double, truncated; fp16/bf16: in
    float32, rounded back; bool: only a factor of 0 changes it)."""
    if factor == 1.0:
        return x
    name = dname(x.dtype)
    if name == "bool":
        return np.zeros_like(x) if factor == 0 else x
    if name in ("float16", "bfloat16", "float32"):
        return (x.astype(np.float32) * np.float32(factor)).astype(x.dtype)
    if name == "float64":
        return x * factor
    return np.trunc(x.astype(np.float64) * factor).astype(x.dtype)


OPS = ("average", "sum", "min", "max", "product")


def op_value(op: str):
    import fuse
    return {"average": fuse.Average, "sum": fuse.Sum, "min": fuse.Min, "max": fuse.Max,
            "product": fuse.Product}[op]


def data_kind(op: str) -> str:
    """Which kind of data ``rank_array`` should make for ``op``."""
    return op if op in ("product", "min", "max") else "sum"


def reduce_ref(inputs, op: str, prescale=1.0, postscale=1.0, divisor=None) -> np.ndarray:
    """numpy's answer for an allreduce of ``inputs`` (one per contributing rank); Average
    divides by ``divisor`` (the process set's size, joined ranks included)."""
    dtype = inputs[0].dtype
    pre = [scale(np.array(x), prescale) for x in inputs]
    if dname(dtype) == "bool":
        stack = np.stack(pre)
        acc = stack.all(0) if op in ("min", "product") else stack.any(0)
    else:
        acc = pre[0].copy()
        for x in pre[1:]:
            if op in ("sum", "average"):
                acc = (acc + x).astype(dtype)
            elif op == "product":
                acc = (acc * x).astype(dtype)
            elif op == "min":
                acc = np.minimum(acc, x)
            else:
                acc = np.maximum(acc, x)
    post = postscale
    if op == "average":
        post = postscale / (divisor or len(inputs))
    return scale(acc, post)


def split_rows(rows: int, parts: int) -> list[int]:
    """Horovod's reducescatter split: the remainder goes to the first ranks."""
    return [rows // parts + (1 if i < rows % parts else 0) for i in range(parts)]


# ------------------------------------------------------------------------- checking

class Checker:
    """Collects mismatches on one rank; :meth:`finish` raises them all at once."""

    def __init__(self, rank: int):
        self.rank = rank
        self.count = 0
        self.failures: list[str] = []

    def fail(self, what: str, detail: str) -> None:
        self.failures.append(f"{what}: {detail}")

    def true(self, cond, what: str, detail: str = "") -> None:
        self.count += 1
        if not cond:
            self.fail(what, detail or "condition is false")

    def equal(self, actual, expected, what: str) -> None:
        """Same value (plain Python objects)."""
        self.count += 1
        if actual != expected:
            self.fail(what, f"got {actual!r}, expected {expected!r}")

    def array(self, actual, expected, what: str) -> None:
        """Same dtype and shape; integers and bools exactly, floats within one rounding."""
        self.count += 1
        expected = np.asarray(expected)
        if not isinstance(actual, np.ndarray):
            self.fail(what, f"got a {type(actual).__name__}, expected a numpy array")
            return
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            self.fail(what, f"got {actual.dtype}{list(actual.shape)}, expected "
                            f"{expected.dtype}{list(expected.shape)}")
            return
        name = dname(actual.dtype)
        if name in RTOL:
            a, e = actual.astype(np.float64), expected.astype(np.float64)
            bad = ~np.isclose(a, e, rtol=RTOL[name], atol=RTOL[name])
        else:
            bad = actual != expected
        if np.any(bad):
            idx = np.argwhere(bad)[:4]
            pairs = ", ".join(f"[{','.join(map(str, i))}] {actual[tuple(i)]!r} != "
                              f"{expected[tuple(i)]!r}" for i in idx)
            self.fail(what, f"{int(np.sum(bad))} of {actual.size} elements differ: {pairs}")

    def raises(self, exc_types, fn, what: str, *, match: tuple = ()):
        """``fn()`` must raise one of ``exc_types`` whose message contains every string in
        ``match``; returns the exception (or None)."""
        self.count += 1
        try:
            fn()
        except exc_types as err:
            msg = str(err)
            missing = [m for m in match if m not in msg]
            if missing:
                self.fail(what, f"{type(err).__name__} message lacks {missing}: {msg!r}")
            return err
        except Exception as err:  # noqa: BLE001 - reported as a failure
            self.fail(what, f"raised {type(err).__name__}: {err}, expected {exc_types}")
            return err
        self.fail(what, f"did not raise {exc_types}")
        return None

    def finish(self) -> int:
        if self.failures:
            shown = "\n  ".join(self.failures[:25])
            more = f"\n  ... and {len(self.failures) - 25} more" if len(self.failures) > 25 else ""
            raise AssertionError(f"rank {self.rank}: {len(self.failures)} of {self.count} checks "
                                 f"failed:\n  {shown}{more}")
        return self.count


def assert_counts(results, minimum: int = 1) -> None:
    """Every rank returned a check count of at least ``minimum``."""
    assert all(isinstance(r, int) for r in results), results
    assert min(results) >= minimum, f"too few checks ran: {results}"
