"""Run a worker function on real workers through ``fuse.run``: the one helper behind the torch,
TensorFlow and MXNet test folders' ``run_job``. Each folder passes what differs (its own
environment knobs and its per-worker set-up); the rest lives here once."""

from __future__ import annotations

import os

SUPPORT = os.path.dirname(os.path.abspath(__file__))


def clean_env(folder: str, extra=None, framework_env=None) -> dict:
    """The caller's environment without fuse/Horovod knobs, on Gloo, one thread per worker (four
    processes share two cores while the tests run), ``folder`` and this one on PYTHONPATH so the
    workers import that folder's worker modules and this helper, then the framework's knobs, then
    the test's own."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env["FUSE_BACKEND"] = "gloo"
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.update(framework_env or {})
    env["PYTHONPATH"] = os.pathsep.join([folder, SUPPORT] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def run_on_workers(fn, np_, env, args=(), kwargs=None, timeout=150, setup=None):
    """``fn(*args, **kwargs)`` on ``np_`` workers; their results in rank order. A worker that
    hangs past ``timeout`` seconds dumps its stacks and exits, so the test fails with them."""
    import fuse
    return fuse.run(_entry, args=(fn, tuple(args), dict(kwargs or {}), timeout, setup),
                    np=np_, env=env)


def _entry(fn, args, kwargs, timeout, setup):
    import faulthandler
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        if setup is not None:
            setup()
        return fn(*args, **kwargs)
    finally:
        faulthandler.cancel_dump_traceback_later()


def assert_clean(results, at_least):
    """Every rank reported no failures and at least ``at_least`` checks done (workers return
    ``{"failures": [...], "done": [...]}``)."""
    for rank, res in enumerate(results):
        assert not res["failures"], f"rank {rank}: " + "\n".join(res["failures"])
        assert len(res["done"]) >= at_least, res["done"]
