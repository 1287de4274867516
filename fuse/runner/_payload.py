"""What :func:`fuse.run` and its workers (``fuse.runner.run_task``) exchange through the store.

The launcher stores the pickled ``(func, args, kwargs)`` under ``runfunc/func``; each worker stores
``("ok", result)`` or ``("error", exception or None, type name, message, traceback text)`` under
``runfunc_result/<rank>``.  Payloads in both directions carry an HMAC made with the job's secret
(``FUSE_SECRET_KEY``, which also guards the store), so nothing but the job can feed either side a
pickle.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import traceback

FUNC_KEY = "runfunc/func"
PATH_KEY = "runfunc/sys_path"
RESULT_KEY = "runfunc_result/{rank}"
_DIGEST = hashlib.sha256().digest_size


def sign(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest() + data


def verify(key: bytes, blob: bytes, what: str) -> bytes:
    mac, data = blob[:_DIGEST], blob[_DIGEST:]
    if len(blob) < _DIGEST or not hmac.compare_digest(
            mac, hmac.new(key, data, hashlib.sha256).digest()):
        raise RuntimeError(f"fuse.run: {what} failed its integrity check (HMAC); refusing to "
                           "unpickle it")
    return data


def env_rank(environ=os.environ) -> int:
    for var in ("FUSE_RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if environ.get(var, "").strip():
            return int(environ[var])
    raise RuntimeError("fuse.run worker: no rank in the environment "
                       "(FUSE_RANK, OMPI_COMM_WORLD_RANK or PMI_RANK)")


def type_name(cls: type) -> str:
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def error_payload(exc: BaseException) -> tuple:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    name = type_name(type(exc))
    return ("error", exc, name, str(exc), tb)


def dumps_payload(payload: tuple) -> tuple[bytes, tuple]:
    """Pickle a payload; if that fails, pickle an error payload that says why instead.
    Returns the bytes and the payload they hold (without the value, for an error's text)."""
    import cloudpickle
    try:
        return cloudpickle.dumps(payload), payload
    except Exception as err:
        if payload[0] == "error":  # the exception itself does not pickle: send its text
            payload = ("error", None) + payload[2:]
        else:
            tb = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            payload = ("error", None, type_name(type(err)),
                       f"the return value could not be pickled: {err}", tb)
        return cloudpickle.dumps(payload), payload


