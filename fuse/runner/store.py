"""The rendezvous key-value store.

The launcher runs a :class:`KVStoreServer` (HTTP, like Horovod's rendezvous server); workers find
it through ``FUSE_GLOO_RENDEZVOUS_ADDR``/``_PORT`` and talk to it with :class:`HTTPStore`.
Keys are plain strings (``scope/name``), values bytes.  A worker may also report its fatal error
under ``errors/<rank>`` so the launcher and the other ranks can name the cause of a failure.
"""

from __future__ import annotations

import http.client
import http.server
import os
import socketserver
import threading
import time
import urllib.parse
from typing import Iterable


class Store:
    """Interface the backends use for rendezvous."""

    def set(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    def try_get(self, key: str) -> bytes | None:
        raise NotImplementedError

    def get(self, key: str, timeout: float = 30.0) -> bytes:
        """Wait until ``key`` exists and return its value."""
        self.wait([key], timeout)
        value = self.try_get(key)
        assert value is not None
        return value

    def wait(self, keys: Iterable[str], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.001
        pending = list(keys)
        while pending:
            pending = [k for k in pending if self.try_get(k) is None]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"rendezvous: keys {pending[:5]} did not appear within {timeout:g} s; "
                    "are all workers running? (raise FUSE_GLOO_TIMEOUT_SECONDS if they start slowly)")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


class KVStoreServer:
    """A threaded HTTP key-value server: PUT /key stores the body, GET /key returns it or 404,
    DELETE /key removes it."""

    def __init__(self, host: str = "0.0.0.0", port: int = 0):
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _key(self) -> str:
                return urllib.parse.unquote(self.path.lstrip("/"))

            def do_GET(self):
                with store._lock:
                    value = store._data.get(self._key())
                if value is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(value)))
                self.end_headers()
                self.wfile.write(value)

            def do_PUT(self):
                n = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(n)
                store.put(self._key(), body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_DELETE(self):
                with store._lock:
                    store._data.pop(self._key(), None)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fuse-kvstore", daemon=True)

    def start(self) -> "KVStoreServer":
        self._thread.start()
        return self

    def put(self, key: str, value: bytes) -> None:
        with self._changed:
            self._data[key] = value
            self._changed.notify_all()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._data.get(key)

    def keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return [k for k in self._data if k.startswith(prefix)]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class HTTPStore(Store):
    """Client of :class:`KVStoreServer`.  ``prefix`` namespaces every key."""

    def __init__(self, addr: str, port: int, prefix: str = "", timeout: float = 30.0):
        self.addr, self.port, self.prefix, self.timeout = addr, int(port), prefix, timeout
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.addr, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _request(self, method: str, key: str, body: bytes | None = None):
        path = "/" + urllib.parse.quote(self.prefix + key)
        last = None
        for attempt in range(20):  # the server may still be starting, or drop a keep-alive
            try:
                conn = self._conn()
                conn.request(method, path, body=body)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (ConnectionError, http.client.HTTPException, OSError) as err:
                last = err
                self._local.conn = None
                time.sleep(min(0.05 * (attempt + 1), 0.5))
        raise ConnectionError(
            f"cannot reach the rendezvous store at {self.addr}:{self.port}: {last}")

    def set(self, key: str, value: bytes) -> None:
        status, _ = self._request("PUT", key, bytes(value))
        if status != 200:
            raise ConnectionError(f"rendezvous store refused key {key!r} (HTTP {status})")

    def try_get(self, key: str) -> bytes | None:
        status, body = self._request("GET", key)
        return body if status == 200 else None

    def delete(self, key: str) -> None:
        self._request("DELETE", key)

    def scoped(self, prefix: str) -> "HTTPStore":
        return HTTPStore(self.addr, self.port, self.prefix + prefix, self.timeout)


class FileStore(Store):
    """A store in a shared directory, for jobs started without fuserun (tests, schedulers)."""

    def __init__(self, path: str, prefix: str = ""):
        self.path, self.prefix = path, prefix
        os.makedirs(path, exist_ok=True)

    def _file(self, key: str) -> str:
        return os.path.join(self.path, urllib.parse.quote(self.prefix + key, safe=""))

    def set(self, key: str, value: bytes) -> None:
        tmp = self._file(key) + f".tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(bytes(value))
        os.replace(tmp, self._file(key))

    def try_get(self, key: str) -> bytes | None:
        try:
            with open(self._file(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def scoped(self, prefix: str) -> "FileStore":
        return FileStore(self.path, self.prefix + prefix)


def store_from_config(config) -> Store | None:
    """The store the launcher gave this worker, or None for a single-process job."""
    if config.rendezvous_addr and config.rendezvous_port > 0:
        return HTTPStore(config.rendezvous_addr, config.rendezvous_port,
                         timeout=max(config.gloo_timeout_seconds, 5.0))
    path = os.environ.get("FUSE_RENDEZVOUS_DIR")
    if path:
        return FileStore(path)
    return None
