"""The worker side of :func:`fuse.run`: ``python -m fuse.runner.run_task [ADDR PORT]``.

Fetches the pickled function from the launcher's store, runs it, and stores its result or its
exception under ``runfunc_result/<rank>`` (see :mod:`fuse.runner._payload`).  A worker whose
function raised also writes the traceback to ``errors/<rank>`` and exits with code 1.
"""

from __future__ import annotations

import json
import os
import sys

from ._payload import (FUNC_KEY, PATH_KEY, RESULT_KEY, dumps_payload, env_rank,
                       error_payload, sign, verify)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from fuse.cluster.store import HTTPStore
    if len(argv) >= 2:
        addr, port = argv[0], int(argv[1])
    else:
        addr = (os.environ.get("FUSE_GLOO_RENDEZVOUS_ADDR")
                or os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"])
        port = int(os.environ.get("FUSE_GLOO_RENDEZVOUS_PORT")
                   or os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    store = HTTPStore(addr, port, timeout=30.0)
    key = store.secret or b""       # the job's secret signs the payloads too
    rank = env_rank()

    paths = store.try_get(PATH_KEY)
    if paths:  # the caller's import path, so functions pickled by reference can be imported
        for entry in json.loads(paths.decode()):
            if entry and entry not in sys.path and os.path.isdir(entry):
                sys.path.append(entry)

    import cloudpickle
    failure: BaseException | None = None
    try:
        blob = store.get(FUNC_KEY, 60.0)
        func, args, kwargs = cloudpickle.loads(verify(key, blob, "the function"))
        payload: tuple = ("ok", func(*args, **kwargs))
    except Exception as exc:  # SystemExit/KeyboardInterrupt end the process as they would
        payload, failure = error_payload(exc), exc
    data, payload = dumps_payload(payload)
    rank = _final_rank(rank)
    # The error is stored before the peers hear of it: a launcher that stops this process as
    # soon as a peer fails of the news (a Spark barrier stage does) still finds it.
    store.set(RESULT_KEY.format(rank=rank), sign(key, data))
    if failure is not None:
        _tell_peers(failure)
    if payload[0] == "error":
        store.set(f"errors/{rank}", payload[4].encode("utf-8", "replace"))
        sys.stderr.write(payload[4])
        return 1
    return 0


def _final_rank(launched_as: int) -> int:
    """The rank the function ended with: an elastic job's may differ from the launcher's."""
    job_state = sys.modules.get("fuse.job.state")   # loaded only if the function used fuse
    config = job_state.last_config() if job_state is not None else None
    return config.rank if config is not None and config.elastic else launched_as


def _tell_peers(exc: BaseException) -> None:
    """If the function started fuse, let the other ranks fail with this rank's message."""
    lifecycle = sys.modules.get("fuse.worker.lifecycle")
    if lifecycle is not None:
        lifecycle.report_failure(exc)


if __name__ == "__main__":
    sys.exit(main())
