"""Collectives from several user threads at once, with other threads polling.

Every Python entry point that takes the engine lock waits for it without the GIL; a thread that
held the GIL while waiting for the lock could deadlock against one that held the lock while
waiting for the GIL (seen once in ten runs before the fix, with the autotune thread).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine_util import run_job

pytestmark = pytest.mark.timeout(120)


def threaded_collectives(threads: int, steps: int) -> list[float]:
    import fuse
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    totals = [0.0] * threads
    errors: list[BaseException] = []
    done = threading.Event()

    def work(t: int) -> None:
        try:
            for i in range(steps):
                size = 4 if i % 2 else 50_000          # inline and backend paths
                x = np.full(size, float(r + 1 + t), np.float32)
                h = fuse.allreduce_async(x, name=f"thread{t}.{i % 3}", op=fuse.Sum)
                while t % 2 and not fuse.poll(h):   # odd threads spin on poll(), even ones
                    pass                            # block in synchronize()
                out = fuse.synchronize(h)
                totals[t] += float(out[0])
        except BaseException as err:  # reported to the test below
            errors.append(err)

    def poller() -> None:
        from fuse.worker import lifecycle
        engine = lifecycle.engine()
        while not done.is_set():
            engine.failed, engine.stats(), engine.process_set_ids()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    watcher = threading.Thread(target=poller)
    watcher.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    watcher.join()
    fuse.shutdown()
    if errors:
        raise errors[0]
    return totals


def test_collectives_from_several_threads_do_not_deadlock():
    threads, steps = 4, 150
    results = run_job(threaded_collectives, 2, kwargs={"threads": threads, "steps": steps})
    expected = [steps * sum(float(k + 1 + t) for k in range(2)) for t in range(threads)]
    assert results == [expected, expected], results
