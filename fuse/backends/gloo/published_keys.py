"""The rendezvous keys one Gloo group publishes, dropped once every member has connected.

A group's members publish their TCP addresses under ``gloo/<epoch>/g<group>/<rank>``, where the
epoch counts the backends made *in this process*.  A new process of the same rank in the same
job (a forked test harness, as Horovod's CI runs ``horovodrun pytest --forked``; a worker that
re-executes itself) counts from 0 again, so while the old keys stay in the store its peers could
read the old process's address and fail with "Connection refused".  Horovod's rendezvous server
forgets a scope once its ranks have connected; here each rank deletes the keys it wrote after a
barrier of the new group (every member has made its context, so has read them, by then; right
after the peer proof was not enough: a rank could still be waiting for a key its peer had
already deleted).
"""

from __future__ import annotations


class PublishedKeys:
    """Wraps a rendezvous store, noting every key set through it; ``drop()`` deletes them."""

    def __init__(self, store) -> None:
        self._store = store
        self._keys: list[str] = []

    def set(self, key: str, value: bytes) -> None:
        self._store.set(key, value)
        self._keys.append(key)

    def get(self, key: str, timeout: float = 30.0) -> bytes:
        return self._store.get(key, timeout)

    def try_get(self, key: str) -> bytes | None:
        return self._store.try_get(key)

    def wait(self, keys, timeout: float = 30.0) -> None:
        self._store.wait(keys, timeout)

    def drop(self) -> None:
        """Delete the keys this rank published (stores without delete keep them)."""
        delete = getattr(self._store, "delete", None)
        if delete is None:
            return
        for key in self._keys:
            delete(key)
        self._keys.clear()
