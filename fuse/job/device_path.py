"""This process's GPU backend: loaded on the first device collective, its executor installed in
the engine, torn down at shutdown.

Device tensors are negotiated by the one coordinator with every other tensor; the engine runs
their responses on the :class:`fuse.engine.device.DeviceExecutor` installed here.  When no GPU
backend can run (no CuPy, no CUDA device), :func:`get` returns None and :func:`why_not` says
why: the framework adapter then stages device tensors through host memory.
"""

from __future__ import annotations

import threading

from fuse.engine.device import DeviceExecutor

_executor: DeviceExecutor | None = None
_unavailable: str | None = None
_lock = threading.Lock()


def get() -> DeviceExecutor | None:
    """The device executor of this process, installed in the current engine; None (see
    :func:`why_not`) when the GPU backend cannot run here."""
    global _executor, _unavailable
    from fuse.job import state
    with _lock:
        if _executor is None and _unavailable is None:
            from fuse.backends import load_device_backend
            cfg = state.config()
            try:
                cls = load_device_backend(cfg.gpu_backend)
                _executor = DeviceExecutor(cls(cfg), cfg)
            except Exception as err:   # no CuPy / no device: device tensors are staged
                _unavailable = f"{type(err).__name__}: {err}"
        if _executor is not None:
            engine = state.engine()
            if engine.device_executor is not _executor:    # a new engine (init again, re-form)
                engine.install_device_executor(_executor)
    return _executor


def why_not() -> str | None:
    """Why :func:`get` returned None, once it has."""
    return _unavailable


def reset() -> None:
    """Forget the GPU backend (at shutdown; a later init loads it again)."""
    global _executor, _unavailable
    with _lock:
        executor, _executor, _unavailable = _executor, None, None
    if executor is not None:
        executor.close()
