"""fuserun with real worker processes (plain Python scripts; the engine is not involved)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import cluster_util
import pytest

from runner_util import alive, fuserun_argv, lines_of, run_fuserun, wait_dead

pytestmark = pytest.mark.timeout(60)

PY = sys.executable

IDENTITY = """
import json, os
keys = ["RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME",
        "GLOO_RENDEZVOUS_ADDR", "GLOO_RENDEZVOUS_PORT"]
print(json.dumps({k: os.environ.get("FUSE_" + k) for k in keys}
                 | {"HOROVOD_RANK": os.environ.get("HOROVOD_RANK"),
                    "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED")}))
"""


@pytest.mark.parametrize("np", [1, 2, 3])
def test_identity_per_rank(script, np):
    r = run_fuserun("-np", str(np), PY, script(IDENTITY))
    assert r.returncode == 0, r.stderr.decode()
    out = lines_of(r.stdout)
    assert sorted(out) == list(range(np))
    ports = set()
    for rank, lines in out.items():
        ident = json.loads(lines[0])
        assert ident["RANK"] == ident["HOROVOD_RANK"] == str(rank)
        assert ident["SIZE"] == str(np)
        assert ident["LOCAL_RANK"] == str(rank) and ident["LOCAL_SIZE"] == str(np)
        assert ident["CROSS_RANK"] == "0" and ident["CROSS_SIZE"] == "1"
        assert ident["HOSTNAME"] == "localhost"
        assert ident["GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert ident["PYTHONUNBUFFERED"] == "1"
        ports.add(ident["GLOO_RENDEZVOUS_PORT"])
    assert len(ports) == 1 and int(ports.pop()) > 0


def test_identity_with_local_hosts_flag(script):
    # two "hosts" that are both this machine: launched directly, ranks assigned host by host
    r = run_fuserun("-np", "3", "-H", "localhost:2,127.0.0.1:1", PY, script(IDENTITY))
    assert r.returncode == 0, r.stderr.decode()
    ids = {rank: json.loads(lines[0]) for rank, lines in lines_of(r.stdout).items()}
    assert [(ids[i]["HOSTNAME"], ids[i]["LOCAL_RANK"], ids[i]["LOCAL_SIZE"], ids[i]["CROSS_RANK"],
             ids[i]["CROSS_SIZE"]) for i in range(3)] == [
        ("localhost", "0", "2", "0", "2"), ("localhost", "1", "2", "0", "1"),
        ("127.0.0.1", "0", "1", "1", "2")]


def test_output_prefixing(script, tmp_path):
    path = script(r"""
        import os, sys, time
        out = sys.stdout.buffer
        out.write(b"par"); out.flush(); time.sleep(0.2)
        out.write(b"tial line\nsecond\n"); out.flush()
        out.write(b"bin \xff\xfe\x00 garbage\n"); out.flush()
        out.write(b"progress 1\rprogress 2\r\n"); out.flush()
        sys.stderr.write("to stderr\n"); sys.stderr.flush()
        out.write(b"no newline at the end"); out.flush()
    """)
    r = run_fuserun("-np", "2", "--output-filename", str(tmp_path / "logs"), PY, path)
    assert r.returncode == 0, r.stderr.decode()
    for rank in (0, 1):
        p = f"[{rank}]<stdout>:".encode()
        assert p + b"partial line\n" in r.stdout
        assert p + b"second\n" in r.stdout
        assert p + b"bin \xff\xfe\x00 garbage\n" in r.stdout
        assert p + b"progress 1\r" + p + b"progress 2\r\n" in r.stdout
        assert p + b"no newline at the end\n" in r.stdout
        assert f"[{rank}]<stderr>:to stderr\n".encode() in r.stderr
        # every stdout line carries a prefix
        assert b"]<stdout>:" not in r.stdout.replace(b"\r[", b"\n[").split(b"\n")[-1]
        raw = (tmp_path / "logs" / f"rank.{rank}" / "stdout").read_bytes()
        assert raw.startswith(b"partial line\nsecond\n") and raw.endswith(b"at the end")
        assert (tmp_path / "logs" / f"rank.{rank}" / "stderr").read_bytes() == b"to stderr\n"
    for line in r.stdout.replace(b"\r", b"\n").split(b"\n"):
        assert not line or line.startswith((b"[0]<stdout>:", b"[1]<stdout>:")), line


def test_timestamp_prefix(script):
    r = run_fuserun("-np", "1", "-prefix-timestamp", PY, script("print('hi')"))
    assert r.returncode == 0
    line = r.stdout.decode().strip()
    assert line.endswith("[0]<stdout>:hi") and line[:4].isdigit()


def test_environment_pass_through(script):
    env = dict(os.environ, FUSE_TEST_VALUE="kept value", OLDPWD="/somewhere",
               **{"BASH_FUNC_myfn%%": "() { echo hi; }"})
    path = script("""
        import json, os
        print(json.dumps({k: os.environ.get(k) for k in
              ["FUSE_TEST_VALUE", "OLDPWD", "BASH_FUNC_myfn%%", "FUSE_FUSION_THRESHOLD",
               "FUSE_CYCLE_TIME", "FUSE_BACKEND"]}))
    """)
    r = run_fuserun("-np", "2", "--fusion-threshold-mb", "2", "--cycle-time-ms", "3",
                    "--backend", "kv", PY, path, env=env)
    assert r.returncode == 0, r.stderr.decode()
    for rank, lines in lines_of(r.stdout).items():
        assert json.loads(lines[0]) == {
            "FUSE_TEST_VALUE": "kept value", "OLDPWD": None, "BASH_FUNC_myfn%%": None,
            "FUSE_FUSION_THRESHOLD": str(2 * 1024 * 1024), "FUSE_CYCLE_TIME": "3",
            "FUSE_BACKEND": "kv"}


# A worker that records its pid (and a grandchild's) and then either fails or waits.
FAILING = """
import os, signal, subprocess, sys, time
from fuse.cluster.store import HTTPStore
rank = int(os.environ["FUSE_RANK"])
piddir = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(os.path.join(piddir, f"{rank}.pid"), "w").write(f"{os.getpid()} {child.pid}")
mode = sys.argv[2]
if rank == 1:
    while len(os.listdir(piddir)) < int(os.environ["FUSE_SIZE"]):
        time.sleep(0.02)
    print("rank 1 is about to fail", file=sys.stderr, flush=True)
    if mode == "store":
        store = HTTPStore(os.environ["FUSE_GLOO_RENDEZVOUS_ADDR"],
                          int(os.environ["FUSE_GLOO_RENDEZVOUS_PORT"]))
        store.set("errors/1", b"FuseError: allreduce 'grad.w' failed: simulated engine error")
        sys.exit(3)
    if mode == "stderr":
        for i in range(30):
            print(f"stderr line {i}", file=sys.stderr)
        sys.exit(4)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""


def _pids(piddir):
    pids = []
    for name in os.listdir(piddir):
        pids += [int(x) for x in open(os.path.join(piddir, name)).read().split()]
    return pids


def test_failing_rank_with_stored_error(script, tmp_path):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    t0 = time.monotonic()
    r = run_fuserun("-np", "3", PY, script(FAILING), str(piddir), "store")
    assert time.monotonic() - t0 < 15
    err = r.stderr.decode()
    assert r.returncode == 3, err
    assert "rank 1 (host localhost) failed first: exited with code 3" in err
    assert "simulated engine error" in err
    assert len(_pids(piddir)) == 6
    assert wait_dead(_pids(piddir), 5) == []


def test_failing_rank_shows_stderr_tail(script, tmp_path):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    r = run_fuserun("-np", "2", PY, script(FAILING), str(piddir), "stderr")
    err = r.stderr.decode()
    assert r.returncode == 4, err
    assert "rank 1 (host localhost) failed first: exited with code 4" in err
    report = err[err.index("failed first"):]
    assert "last 20 lines of rank 1's stderr" in report
    assert "    stderr line 29" in report and "    stderr line 10" in report
    assert "stderr line 9\n" not in report
    assert wait_dead(_pids(piddir), 5) == []


def test_rank_killed_by_signal(script, tmp_path):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    r = run_fuserun("-np", "2", PY, script(FAILING), str(piddir), "kill")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "rank 1 (host localhost) failed first: was killed by signal SIGKILL (9)" in err
    assert "rank 1 is about to fail" in err  # the stderr tail
    assert wait_dead(_pids(piddir), 5) == []


def test_sigint_stops_everything(script, tmp_path):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    proc = subprocess.Popen(fuserun_argv("-np", "3", PY, script(FAILING), str(piddir), "wait"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while len(os.listdir(piddir)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the pid files are written; let the writes complete
    pids = _pids(piddir)
    assert len(pids) == 6 and all(alive(p) for p in pids)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 130, err.decode()
    assert b"received SIGINT" in err
    assert wait_dead(pids, 5) == []


@pytest.mark.parametrize("wrapped", [False, True], ids=["direct", "shell"])
def test_workers_die_with_a_sigkilled_launcher(script, tmp_path, wrapped):
    # "shell": the command is a shell that does not exec its Python worker (it has more to do
    # after it), so a signal to the launcher's child alone would reach only the shell
    path = script("""
        import os, time
        print(os.getpid(), flush=True)
        time.sleep(60)
    """)
    command = ["bash", "-c", f"{PY} {path}; echo done"] if wrapped else [PY, path]
    proc = subprocess.Popen(fuserun_argv("-np", "2", *command), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    pids: list[int] = []
    deadline = time.monotonic() + 15
    while len(pids) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        if "<stdout>:" in line:
            pids.append(int(line.split(":", 1)[1]))
    assert len(pids) == 2 and all(alive(p) for p in pids)
    proc.kill()                      # no chance to clean up
    proc.wait(5)
    assert wait_dead(pids, 10) == []


def test_worker_ignoring_sigterm_is_killed(script, tmp_path):
    path = script("""
        import os, signal, sys, time
        if os.environ["FUSE_RANK"] == "0":
            time.sleep(0.5)
            sys.exit(2)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(os.getpid(), flush=True)
        time.sleep(60)
    """)
    t0 = time.monotonic()
    r = run_fuserun("-np", "2", PY, path)
    took = time.monotonic() - t0
    assert r.returncode == 2
    assert 4 < took < 15  # SIGTERM, grace period, SIGKILL
    pid = int(lines_of(r.stdout)[1][0])
    assert wait_dead([pid], 2) == []


def test_command_not_found():
    r = run_fuserun("-np", "2", "/nonexistent/fuse-test-command")
    assert r.returncode == 127
    assert b"could not start /nonexistent/fuse-test-command" in r.stderr


def test_usage_errors(script):
    r = run_fuserun(PY, "x.py")
    assert r.returncode == 2 and b"-np/--num-proc is required" in r.stderr
    r = run_fuserun("-np", "5", "-H", "localhost:2", PY, "x.py")
    assert r.returncode == 2 and b"only have 2 slots" in r.stderr
    r = run_fuserun("-np", "1")
    assert r.returncode == 2 and b"no command" in r.stderr
    # raised by the elastic driver's launch code, which imports the launcher as a module while
    # ``python -m fuse.runner.launch`` runs it as __main__: still a usage message, no traceback
    r = run_fuserun("--min-np", "1", "-H", "localhost:1", "--host-discovery-script", "/bin/true",
                    PY, "x.py")
    assert r.returncode == 2 and b"not both" in r.stderr and b"Traceback" not in r.stderr


def _path_without_mpi(tmp_path) -> str:
    """PATH with every mpirun/mpiexec hidden: a directory that has one is replaced by a copy
    made of symlinks to everything else in it (.venv/bin keeps its python, ninja, ...)."""
    dirs = []
    for i, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if not os.path.isdir(d) or not any(os.path.exists(os.path.join(d, n))
                                           for n in ("mpirun", "mpiexec")):
            dirs.append(d)
            continue
        copy = tmp_path / f"path{i}"
        copy.mkdir()
        for name in os.listdir(d):
            if not name.startswith(("mpirun", "mpiexec")):
                os.symlink(os.path.join(d, name), copy / name)
        dirs.append(str(copy))
    return os.pathsep.join(dirs)


def test_mpi_without_mpirun(tmp_path):
    env = dict(os.environ, PATH=_path_without_mpi(tmp_path))
    assert subprocess.run(["sh", "-c", "command -v mpirun || command -v mpiexec"], env=env,
                          capture_output=True).returncode != 0, "an mpirun is still visible"
    r = run_fuserun("--mpi", "-np", "2", PY, "x.py", env=env)
    assert r.returncode == 1, r.stderr.decode()
    assert b"--mpi: no mpirun or mpiexec on PATH" in r.stderr
    assert b"Traceback" not in r.stderr


def test_check_build_prints_the_fuse_info_report():
    r = run_fuserun("-cb")
    assert r.returncode == 0, r.stderr.decode()
    report = r.stdout.decode()
    info = subprocess.run([PY, "-m", "fuse.info"], capture_output=True, text=True, timeout=30)
    assert info.returncode == 0, info.stderr
    assert report == info.stdout                  # the same report, not something like it
    assert report.startswith("fuse ") and "\n  engine   built\n" in report, report
    assert re.search(r"^  gloo +available", report, re.M), report


SSH_WORKER = """
import os, socket, sys, time
from fuse.cluster.store import HTTPStore
rank = os.environ["FUSE_RANK"]
s = HTTPStore(os.environ["FUSE_GLOO_RENDEZVOUS_ADDR"], int(os.environ["FUSE_GLOO_RENDEZVOUS_PORT"]))
s.set("hello/" + rank, socket.gethostname().encode())
s.wait(["hello/%d" % i for i in range(int(os.environ["FUSE_SIZE"]))], 20)
print("host", socket.gethostname(), "cross", os.environ["FUSE_CROSS_RANK"], "cwd", os.getcwd())
print("threads", os.environ.get("OMP_NUM_THREADS"), "secret", len(os.environ["FUSE_SECRET_KEY"]))
if sys.argv[1] == "fail":
    if rank == "2":  # fails once the others run (their pids recorded: the test checks them)
        while sum(n.endswith(".pid") for n in os.listdir(sys.argv[2])) < 3:
            time.sleep(0.05)
        sys.exit(6)
    open(os.path.join(sys.argv[2], rank + ".tmp"), "w").write(str(os.getpid()))
    os.rename(os.path.join(sys.argv[2], rank + ".tmp"), os.path.join(sys.argv[2], rank + ".pid"))
    time.sleep(60)
"""


def test_ssh_path(script, tmp_path):
    """Workers on network-namespace hosts reached over ssh (scripts/cluster.sh)."""
    with cluster_util.cluster(tmp_path, 3) as c:
        names, addr = c.names, c.addresses
        assert len(names) == 3 and [n[-1] for n in names] == ["1", "2", "3"], names
        base = c.fuserun(1, "-np", "4", "-H", f"{addr[0]}:1,{addr[1]}:2,{addr[2]}:1",
                         "--start-timeout", "20", PY, script(SSH_WORKER))
        r = subprocess.run(base + ["ok"], capture_output=True, timeout=60, cwd=tmp_path,
                           env=c.env)
        assert r.returncode == 0, r.stderr.decode()
        lines = lines_of(r.stdout)
        out = {k: v[0] for k, v in lines.items()}
        # each host's thread budget is its own cores / its own workers (2 on host 2), and
        # every worker got the job's secret (64 hex digits), which no command line carried
        from fuse.cluster.thread_budget import usable_cores
        cores = usable_cores()
        assert {k: v[1] for k, v in lines.items()} == {
            r: f"threads {max(1, cores // n)} secret 64"
            for r, n in ((0, 1), (1, 2), (2, 2), (3, 1))}
        assert out[0].startswith("host ") and out[0].endswith(f"cwd {tmp_path}")
        assert out[1].startswith(f"host {names[1]} cross 1"), out
        assert out[2].startswith(f"host {names[1]} cross 0"), out
        assert out[3].startswith(f"host {names[2]} cross 2"), out
        # a remote rank fails: everyone, remote ones included, is stopped
        piddir = tmp_path / "pids"
        piddir.mkdir()
        r = subprocess.run(base + ["fail", str(piddir)], capture_output=True, timeout=60,
                           cwd=tmp_path, env=c.env)
        assert r.returncode == 6, r.stderr.decode()
        assert f"rank 2 (host {addr[1]}) failed first: exited with code 6".encode() in r.stderr
        pids = [int(p.read_text()) for p in piddir.glob("*.pid")]
        assert len(pids) == 3 and wait_dead(pids, 10) == []


BLAME = """
import sys, time
import numpy as np
import fuse
fuse.init()
fuse.allreduce(np.ones(4), name="a")
if fuse.rank() == int(sys.argv[1]):
    time.sleep(0.2)
    raise ZeroDivisionError("the real cause")
fuse.allreduce(np.ones(4), name="b")    # the others fail here, because of it
"""


@pytest.mark.parametrize("culprit", [1, 0])
def test_the_rank_that_raised_is_blamed_not_its_victims(script, culprit):
    path = script(BLAME)
    for _ in range(4):      # which rank exits first varies from run to run; the report must not
        r = run_fuserun("-np", "3", PY, path, str(culprit), timeout=60)
        assert r.returncode == 1, r.stderr.decode()
        err = r.stderr.decode()
        assert f"rank {culprit} (host localhost) failed first" in err, err
        report = err[err.index("failed first"):]
        assert "ZeroDivisionError: the real cause" in report
        assert "ShutdownError" not in report
