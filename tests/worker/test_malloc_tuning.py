"""fuse.worker.malloc_tuning: freed memory stays in the process (glibc), unless the user chose;
fuse.init() applies it, and FUSE_MALLOC_TRIM_THRESHOLD=0 turns it off."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fuse.worker import malloc_tuning

# Rounds of: allocate 30 blocks of 1 MiB, touch every page, free them all; the minor page faults
# per round after the first.  Run in a fresh interpreter, so malloc's state is its own, after
# a first step that may tune malloc (TUNE_DIRECTLY or TUNE_BY_INIT).
ROUNDS = textwrap.dedent("""
    import ctypes, json, resource, sys
    {tune}
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    faults = []
    for _ in range(6):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [libc.malloc(1 << 20) for _ in range(30)]
        for b in blocks:
            ctypes.memset(b, 1, 1 << 20)
        for b in reversed(blocks):
            libc.free(b)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(json.dumps({{"tuned": tuned, "faults": faults[1:]}}))
""")
TUNE_DIRECTLY = """
from fuse.worker import malloc_tuning
tuned = malloc_tuning.keep_freed_memory(int(sys.argv[1]))
"""
# a one-rank job, as a script that calls fuse.init() and nothing else about malloc
TUNE_BY_INIT = """
import fuse
fuse.init()
fuse.shutdown()
tuned = None
"""


def rounds(trim_threshold: int, tune: str = TUNE_DIRECTLY, env: dict | None = None) -> dict:
    """ROUNDS' result, in an environment without malloc settings of the user's own (nor
    fuse's: ``env`` adds some)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (*malloc_tuning.USER_SETTINGS, "GLIBC_TUNABLES")
             and not k.startswith(("FUSE_", "HOROVOD_"))}
    code = ROUNDS.format(tune=tune.strip())
    out = subprocess.run([sys.executable, "-c", code, str(trim_threshold)], check=True,
                         capture_output=True, text=True, env={**clean, **(env or {})},
                         timeout=120)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(malloc_tuning.glibc() is None, reason="the tuning is for glibc's malloc")
def test_freed_blocks_are_reused_instead_of_faulted_back_in():
    tuned = rounds(128 << 20)
    assert tuned["tuned"] is True
    # 30 MiB a round is 7680 pages: with the tuning none of them comes back as a fresh page
    assert max(tuned["faults"]) < 200, tuned
    # the control: glibc's own thresholds hand the 30 MiB back to the kernel every round
    untouched = rounds(0)
    assert untouched["tuned"] is False
    assert min(untouched["faults"]) > 5000, untouched


@pytest.mark.skipif(malloc_tuning.glibc() is None, reason="the tuning is for glibc's malloc")
def test_init_tunes_malloc_unless_the_threshold_is_zero():
    # the same rounds after fuse.init(): its default keeps the freed blocks ...
    by_default = rounds(0, TUNE_BY_INIT)
    assert max(by_default["faults"]) < 200, by_default
    # ... and FUSE_MALLOC_TRIM_THRESHOLD=0 leaves glibc's own thresholds, which give them back
    turned_off = rounds(0, TUNE_BY_INIT, {"FUSE_MALLOC_TRIM_THRESHOLD": "0"})
    assert min(turned_off["faults"]) > 5000, turned_off


@pytest.mark.parametrize("env", [{"MALLOC_TRIM_THRESHOLD_": "1000"},
                                 {"MALLOC_MMAP_THRESHOLD_": "65536"},
                                 {"MALLOC_TOP_PAD_": "0"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=100"}])
def test_a_setting_of_the_users_own_is_left_alone(env):
    assert malloc_tuning.user_tuned_malloc(env)
    assert malloc_tuning.keep_freed_memory(128 << 20, env) is False


def test_other_tunables_and_zero():
    assert not malloc_tuning.user_tuned_malloc({"GLIBC_TUNABLES": "glibc.rtld.nns=2"})
    assert malloc_tuning.keep_freed_memory(0, {}) is False
