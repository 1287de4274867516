"""The rendezvous key-value store.

The launcher runs a :class:`KVStoreServer` (HTTP, like Horovod's rendezvous server); workers find
it through ``FUSE_GLOO_RENDEZVOUS_ADDR``/``_PORT`` and talk to it with :class:`HTTPStore`.
Keys are plain strings (``scope/name``), values bytes; every request carries an HMAC made with
the job's secret (``FUSE_SECRET_KEY``), and the server serves no one else.  A worker may also report its fatal error
under ``errors/<rank>`` so the launcher and the other ranks can name the cause of a failure.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import http.server
import os
import secrets
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from typing import Iterable


class StoreUnreachable(ConnectionError):
    """The launcher's store did not answer: it is gone, or this process is cut off from it."""


class StoreKeyMissing(KeyError):
    """A key the store had a moment ago is gone (its owner dropped it: the launcher forgets a
    generation's keys when it forms the next one)."""

    def __str__(self) -> str:       # KeyError's own quotes the whole message
        return str(self.args[0]) if self.args else ""


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
        if value is None:
            raise StoreKeyMissing(
                f"rendezvous: key {key!r} appeared in the store and was removed before it "
                "could be read (the launcher drops a generation's keys when it forms the "
                "next one: this worker is joining a job that has moved on)")
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


# The job's secret: made by the launcher, handed to local workers in their environment and to
# remote ones on ssh's standard input (never on a command line, which every local user can
# read in /proc); every store request proves it.
SECRET_ENV = "FUSE_SECRET_KEY"
MAX_BODY = 1 << 30          # bytes one request may store
_AUTH_HEADER = "X-Fuse-Auth"    # HMAC of the method, path and body length: checked before the body
_BODY_HEADER = "X-Fuse-Body"    # HMAC of the body: checked once it is read


def make_secret() -> bytes:
    return secrets.token_bytes(32)


def rendezvous_env(addr: str, port: int) -> dict[str, str]:
    """The variables that tell a worker where the job's store is (fuse's names and Horovod's)."""
    env = {}
    for prefix in ("FUSE_", "HOROVOD_"):
        env[prefix + "GLOO_RENDEZVOUS_ADDR"] = addr
        env[prefix + "GLOO_RENDEZVOUS_PORT"] = str(port)
    return env


def secret_from_env(environ=os.environ) -> bytes | None:
    text = environ.get(SECRET_ENV, "")
    try:
        return bytes.fromhex(text) if text else None
    except ValueError:
        raise ValueError(f"{SECRET_ENV} must be hex digits (the launcher sets it)") from None


def _mac(secret: bytes, *parts: bytes | str) -> str:
    h = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))   # unambiguous concatenation
        h.update(data)
    return h.hexdigest()


def _request_mac(secret: bytes, method: str, path: str, length: int) -> str:
    return _mac(secret, "request", method, path, str(length))


class _StoreRequestHandler(http.server.BaseHTTPRequestHandler):
    """One connection to a :class:`KVStoreServer`: PUT, GET and DELETE of one key each, every
    request proving the job's secret.  Reaches the store through ``self.server.store``."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.store: KVStoreServer = self.server.store
        self.timeout = self.store.idle_timeout      # every read on the connection
        super().setup()

    def log_message(self, *args):  # quiet: refusals are reported by store.note
        pass

    def _key(self) -> str:
        return urllib.parse.unquote(self.path.lstrip("/"))

    def _reply(self, code: int, body: bytes = b"", close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _refuse(self, code: int, why: str) -> None:
        self.store.note(f"refused {self.command} from {self.client_address[0]}: {why}")
        self._reply(code, close=True)

    def _length(self) -> int | None:
        text = self.headers.get("Content-Length", "0").strip()
        if not text.isdigit():
            self._refuse(400, f"bad Content-Length {text[:20]!r}")
            return None
        n = int(text)
        if n > self.store.max_body:
            self._refuse(413, f"a body of {n} bytes (the limit is {self.store.max_body})")
            return None
        return n

    def _authentic(self, length: int) -> bool:
        given = self.headers.get(_AUTH_HEADER, "")
        want = _request_mac(self.store.secret, self.command, self.path, length)
        if hmac.compare_digest(given.encode(), want.encode()):
            self.server.mark_proven(self.request)
            return True
        self._refuse(403, "no proof of the job's secret" if not given
                     else "a wrong proof of the job's secret")
        return False

    def do_GET(self):
        if not self._authentic(0):
            return
        value = self.store.get(self._key())
        if value is None:
            self._reply(404)
        else:
            self._reply(200, value)

    def do_PUT(self):
        length = self._length()
        if length is None or not self._authentic(length):
            return
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True    # the client went away mid-body
            return
        given = self.headers.get(_BODY_HEADER, "")
        if not hmac.compare_digest(given.encode(),
                                   _mac(self.store.secret, "body", body).encode()):
            self._refuse(403, "a body that does not match its proof")
            return
        self.store.put(self._key(), body)
        self._reply(200)

    def do_DELETE(self):
        if not self._authentic(0):
            return
        self.store.delete(self._key())
        self._reply(200)


class _LimitedHTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """The store's HTTP server: a thread per connection, at most ``max_connections`` at once.
    When that many are open, the oldest connection that has not yet made a request proving
    the job's secret is closed to make room (strangers holding connections cannot keep the
    job's ranks out)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128    # a burst of connections waits to be accepted, not retried

    def __init__(self, address, store: "KVStoreServer", max_connections: int):
        self.store = store
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._active = 0
        # connections that have not yet proved the secret, oldest first (a dict keeps order)
        self._unproven: dict = {}
        super().__init__(address, _StoreRequestHandler)

    def mark_proven(self, connection) -> None:
        """``connection`` made a request proving the job's secret: never closed to make room."""
        with self._lock:
            self._unproven.pop(connection, None)

    def _admit(self, request):
        """Count ``request`` in; returns (admitted, the connection closed to make room)."""
        with self._lock:
            full = self._active >= self.max_connections
            evict = next(iter(self._unproven)) if full and self._unproven else None
            if evict is not None:
                del self._unproven[evict]
            if not full or evict is not None:
                self._active += 1
                self._unproven[request] = None
                return True, evict
        return False, None

    def process_request(self, request, client_address):
        admitted, evict = self._admit(request)
        if evict is not None:
            self.store.note("closed the oldest connection that has not proved the job's "
                            f"secret: {self.max_connections} were open")
            try:
                evict.shutdown(socket.SHUT_RDWR)    # its thread sees the end
            except OSError:
                pass
        if not admitted:
            self.store.note(f"refused a connection from {client_address[0]}: "
                            f"{self.max_connections} already open")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._active -= 1
                self._unproven.pop(request, None)

    def handle_error(self, request, client_address):
        err = sys.exc_info()[1]
        if isinstance(err, (ConnectionError, TimeoutError)):
            return      # a worker killed mid-request, or an idle connection timed out
        self.store.note(f"bad request from {client_address[0]}: {type(err).__name__}: {err}")


class KVStoreServer:
    """A threaded HTTP key-value server: PUT /key stores the body, GET /key returns it or 404,
    DELETE /key removes it.

    Only requests that prove the job's ``secret`` (:attr:`secret`; a fresh one when not given)
    are served: anyone else gets 403 before a byte of their body is read.  Bodies are limited
    to ``max_body`` bytes, a connection that stays silent for ``idle_timeout`` seconds is
    closed, at most ``max_connections`` are served at once (when that many are open, the
    oldest one that has not proved the secret is closed to make room for a new one), and a
    bad request is reported in one line (through ``log``, default stderr; the first few
    only), never as a traceback.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, secret: bytes | None = None,
                 *, idle_timeout: float = 30.0, max_connections: int = 256,
                 max_body: int = MAX_BODY, log=None):
        self.secret = secret if secret is not None else make_secret()
        self.idle_timeout = idle_timeout
        self.max_body = max_body
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._log = log or (lambda text: print(f"fuse store: {text}", file=sys.stderr,
                                               flush=True))
        self._notes = 0
        self.refused = 0            # requests turned away (tests and diagnostics read it)
        self.on_change = None       # called (no arguments) after every stored value: a wake-up
        self.quiet_prefix = None    # ... except a value whose key starts with this
        self._server = _LimitedHTTPServer((host, port), self, max_connections)
        self.address = self._server.server_address[0]   # the address it listens on
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fuse-kvstore", daemon=True)

    def note(self, text: str) -> None:
        """Report a refused or bad request: the first few in full, then only their count."""
        with self._lock:
            self.refused += 1
            self._notes += 1
            n = self._notes
        if n <= 5:
            self._log(text)
        elif n == 6:
            self._log("more requests refused; not reporting each")

    def start(self) -> "KVStoreServer":
        self._thread.start()
        return self

    def put(self, key: str, value: bytes) -> None:
        with self._changed:
            self._data[key] = value
            self._changed.notify_all()
        callback = self.on_change   # read once: the driver clears it from its own thread
        quiet = self.quiet_prefix
        if callback is not None and not (quiet and key.startswith(quiet)):
            callback()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._data.get(key)

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def drop(self, prefix: str) -> None:
        """Forget every key that starts with ``prefix``."""
        with self._lock:
            for key in [k for k in self._data if k.startswith(prefix)]:
                del self._data[key]

    def keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return [k for k in self._data if k.startswith(prefix)]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _StoreConnection(http.client.HTTPConnection):
    """An HTTP connection to the address the store's name had the first time this process
    asked (fuse.cluster.hosts.resolve): no name service on the way of a re-form."""

    def connect(self) -> None:
        from fuse.cluster.hosts import resolve
        error: OSError = OSError(f"no address for {self.host}")
        for family, kind, proto, _name, address in resolve(self.host, self.port):
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.timeout)
                sock.connect(address)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sock = sock
                return
            except OSError as err:
                sock.close()
                error = err
        raise error


class HTTPStore(Store):
    """Client of :class:`KVStoreServer`.  ``prefix`` namespaces every key; ``secret`` is the
    job's (default: from FUSE_SECRET_KEY, as the launcher sets it).  ``timeout`` bounds each
    connection attempt and reply, ``attempts`` how often a request is tried before it fails
    with ConnectionError."""

    def __init__(self, addr: str, port: int, prefix: str = "", timeout: float = 30.0,
                 secret: bytes | None = None, attempts: int = 20):
        self.addr, self.port, self.prefix, self.timeout = addr, int(port), prefix, timeout
        self.attempts = attempts
        self.secret = secret if secret is not None else secret_from_env()
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _StoreConnection(self.addr, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _request(self, method: str, key: str, body: bytes | None = None):
        path = "/" + urllib.parse.quote(self.prefix + key)
        headers = {}
        if self.secret is not None:
            headers[_AUTH_HEADER] = _request_mac(self.secret, method, path, len(body or b""))
            if body is not None:
                headers[_BODY_HEADER] = _mac(self.secret, "body", body)
        last = None
        for attempt in range(self.attempts):  # the server may still be starting, or drop a
            # keep-alive
            try:
                conn = self._conn()
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
            except (ConnectionError, http.client.HTTPException, OSError) as err:
                last = err
                self._local.conn = None
                time.sleep(min(0.05 * (attempt + 1), 0.5))
                continue
            if resp.will_close:
                self._local.conn = None
            if status == 403:
                raise PermissionError(
                    f"the rendezvous store at {self.addr}:{self.port} refused this worker: "
                    + ("it has no job secret (FUSE_SECRET_KEY; fuserun and fuse.run set it)"
                       if self.secret is None else "its job secret is not this job's"))
            return status, data
        raise StoreUnreachable(
            f"cannot reach the rendezvous store at {self.addr}:{self.port} "
            f"({self.attempts} tries): {last}")

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
        return HTTPStore(self.addr, self.port, self.prefix + prefix, self.timeout, self.secret,
                         self.attempts)


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

    def delete(self, key: str) -> None:
        try:
            os.remove(self._file(key))
        except FileNotFoundError:
            pass

    def scoped(self, prefix: str) -> "FileStore":
        return FileStore(self.path, self.prefix + prefix)


def store_from_config(config, *, timeout: float | None = None,
                      attempts: int = 20) -> Store | None:
    """The store the launcher gave this worker, or None for a single-process job.
    ``timeout``/``attempts``: see HTTPStore (default: the Gloo timeout, at least 5 s)."""
    if config.rendezvous_addr and config.rendezvous_port > 0:
        return HTTPStore(config.rendezvous_addr, config.rendezvous_port,
                         timeout=timeout or max(config.gloo_timeout_seconds, 5.0),
                         secret=secret_from_env(), attempts=attempts)
    path = os.environ.get("FUSE_RENDEZVOUS_DIR")
    if path:
        return FileStore(path)
    return None
