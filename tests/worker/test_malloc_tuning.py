"""fuse.worker.malloc_tuning: freed memory stays in the process (glibc), unless the user chose."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fuse.worker import malloc_tuning

# Rounds of: allocate 30 blocks of 1 MiB, touch every page, free them all; the minor page faults
# per round after the first.  Run in a fresh interpreter, so malloc's state is its own.
ROUNDS = textwrap.dedent("""
    import ctypes, json, resource, sys
    from fuse.worker import malloc_tuning
    tuned = malloc_tuning.keep_freed_memory(int(sys.argv[1]))
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
    print(json.dumps({"tuned": tuned, "faults": faults[1:]}))
""")


def rounds(trim_threshold: int) -> dict:
    """ROUNDS' result, in an environment without malloc settings of the user's own."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (*malloc_tuning.USER_SETTINGS, "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", ROUNDS, str(trim_threshold)], check=True,
                         capture_output=True, text=True, env=clean, timeout=120)
    return json.loads(out.stdout)


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
