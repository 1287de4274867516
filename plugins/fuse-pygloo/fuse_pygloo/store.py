"""fuse's rendezvous store, in the shape pygloo's ``rendezvous.CustomStore`` calls.

``pygloo.rendezvous.CustomStore(obj)`` wraps any Python object with ``set(key, value)``,
``get(key) -> bytes`` and ``wait(keys)``; Gloo's ``connectFullMesh`` publishes each rank's TCP
address through it.  This adapter sends those calls to the store the launcher gives every
worker (``fuse.cluster.store``: HTTP with the job's secret, or a shared directory), under a
prefix of its own per connection so that groups and re-initialisations never read each
other's addresses.  Gloo's keys are bare ("0", "rank_1"), hence the prefix.
"""

from __future__ import annotations

from typing import Sequence


class StoreBridge:
    """``set``/``get``/``wait`` on ``store`` under ``prefix``; waits give up after
    ``timeout`` seconds with fuse's error naming the missing keys."""

    def __init__(self, store, prefix: str, timeout: float):
        self._store = store
        self._prefix = prefix
        self._timeout = float(timeout)

    def _key(self, key: str) -> str:
        return self._prefix + str(key)

    def set(self, key: str, value: bytes) -> bool:
        self._store.set(self._key(key), bytes(value))
        return True

    def get(self, key: str) -> bytes:
        return self._store.get(self._key(key), self._timeout)

    def wait(self, keys: Sequence[str], *_ignored) -> bool:
        # Gloo may pass its own timeout after the keys; fuse's (FUSE_GLOO_TIMEOUT_SECONDS) rules.
        self._store.wait([self._key(k) for k in keys], self._timeout)
        return True

    def del_keys(self, keys: Sequence[str]) -> bool:
        delete = getattr(self._store, "delete", None)
        if delete is not None:
            for key in keys:
                delete(self._key(key))
        return True
