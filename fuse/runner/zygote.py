"""A warm parent for an agent's rank processes: it imports the heavy modules once (torch takes
3-10 s to import in a container) and forks each rank's Python process from itself, so a rank
starts in a fraction of a second instead of paying the import again.

The agent starts it (:meth:`Zygote.start`: ``python -m fuse.runner.zygote``, a fresh process, so
no thread of the agent is ever forked) as soon as it runs, and announces itself to the driver
only once the zygote has imported its modules: a joining pod is not given ranks (and the job is
not re-formed for it) while it would still be importing.

Only a command this zygote can run the way Python would is forked: the same interpreter (the
command's ``python`` is the agent's own on the worker's PATH) with ``[-u] [-B] script args``,
``-m module args`` or ``-c code args``; anything else is started as a new process, as before.

The protocol (one ``AF_UNIX``/``SOCK_SEQPACKET`` socket pair): the zygote sends ``ready`` once
imported; each request is a JSON ``{"argv", "env", "cwd"}`` with three descriptors (the rank's
stdout and stderr pipes, and a status pipe); the zygote answers ``{"pid": ...}``, and when that
child ends it writes its exit code (negative: the signal, as :mod:`subprocess` says) to the
status pipe.  The zygote dies with the agent, and each child with the zygote (PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
from typing import Mapping, Sequence

__all__ = ["Zygote", "python_command", "preload_modules"]

_MAX_MESSAGE = 1 << 20


def preload_modules(environ: Mapping[str, str]) -> list[str]:
    """What the zygote imports: ``FUSE_AGENT_PRELOAD``, comma-separated (unset, empty or
    ``none``: no zygote).  fuse's image sets ``fuse.torch,torch._dynamo``: torch imports the
    latter (with sympy, ~800 modules, 6 s) the first time an optimizer is made, so without it a
    new rank's first step would pay that while the others wait."""
    names = [n.strip() for n in environ.get("FUSE_AGENT_PRELOAD", "").split(",") if n.strip()]
    return [] if names == ["none"] else names


def python_command(argv: Sequence[str], env: Mapping[str, str]) -> list[str] | None:
    """``argv`` without its interpreter and options when it is this interpreter running a
    script, ``-m module`` or ``-c code`` (what the zygote can run); None otherwise."""
    if not argv:
        return None
    exe = shutil.which(argv[0], path=env.get("PATH")) if os.sep not in argv[0] else argv[0]
    if exe is None or not _same_python(exe):
        return None
    rest = list(argv[1:])
    while rest and rest[0] in ("-u", "-B"):     # unbuffered/no-bytecode: true of the zygote too
        rest.pop(0)
    if not rest:
        return None
    if rest[0] in ("-m", "-c"):
        return rest if len(rest) >= 2 else None
    return None if rest[0].startswith("-") else rest


def _same_python(exe: str) -> bool:
    """The same interpreter *and* environment: a virtual environment's python is a symlink to
    the system's, so compare the unresolved paths' directories, then the files."""
    mine = os.path.abspath(sys.executable)
    exe = os.path.abspath(exe)
    if os.path.dirname(exe) != os.path.dirname(mine):
        return False
    try:
        return os.path.samefile(exe, mine)
    except OSError:
        return False


# -- the agent's side -----------------------------------------------------------------------
class Zygote:
    """The agent's handle on its zygote process."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket, modules: list[str]):
        self.proc, self.sock, self.modules = proc, sock, modules
        self.ready = False
        self.why_not: str | None = None

    @classmethod
    def start(cls, modules: Sequence[str]) -> "Zygote":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        proc = subprocess.Popen([sys.executable, "-m", "fuse.runner.zygote",
                                 str(theirs.fileno()), *modules],
                                stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()],
                                preexec_fn=die_with_parent)
        theirs.close()
        return cls(proc, ours, list(modules))

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the imports; False (and ``why_not``) if the
        zygote failed or is too slow: the agent then starts plain processes."""
        self.sock.settimeout(timeout)
        try:
            msg = self.sock.recv(_MAX_MESSAGE)
        except OSError as err:
            msg = b""
            self.why_not = f"not ready within {timeout:g} s ({err})"
        finally:
            self.sock.settimeout(None)
        if msg == b"ready":
            self.ready = True
        else:
            self.why_not = self.why_not or (msg.decode(errors="replace") or "it exited")
            self.close()
        return self.ready

    def fork(self, args: list[str], env: Mapping[str, str], cwd: str | None = None):
        """Fork a rank running ``args`` (see :func:`python_command`) with ``env``: returns
        (pid, stdout reader, stderr reader, status reader); OSError if the zygote is gone."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        try:
            request = json.dumps({"argv": args, "env": dict(env), "cwd": cwd}).encode()
            socket.send_fds(self.sock, [request], [out_w, err_w, st_w])
            self.sock.settimeout(30.0)
            answer = json.loads(self.sock.recv(_MAX_MESSAGE) or b"{}")
            self.sock.settimeout(None)
        except (OSError, ValueError):
            for fd in (out_r, err_r, st_r):
                os.close(fd)
            raise OSError("the agent's zygote is gone") from None
        finally:
            for fd in (out_w, err_w, st_w):
                os.close(fd)
        if "pid" not in answer:
            for fd in (out_r, err_r, st_r):
                os.close(fd)
            raise OSError(f"the agent's zygote could not fork: {answer.get('error')}")
        return answer["pid"], os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"), st_r

    def close(self) -> None:
        self.ready = False
        try:
            self.sock.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()


def die_with_parent() -> None:
    """Before exec (or in a forked child): die when the parent does."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)      # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- the zygote's side ------------------------------------------------------------------------
def _serve(sock: socket.socket) -> tuple[dict, list[int]] | None:
    """Fork a child per request until the agent closes the socket.  Returns in a child, with
    its request and descriptors; None in the zygote when it is done."""
    statuses: dict[int, int] = {}       # child pid -> its status pipe
    while True:
        readable, _, _ = select.select([sock], [], [], 0.1)
        _reap(statuses)
        if not readable:
            continue
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 3)
        except OSError:
            msg, fds = b"", []
        if not msg:
            return None             # the agent is gone
        try:
            request = json.loads(msg)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except (ValueError, OSError) as err:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": str(err)}).encode())
            continue
        if pid == 0:
            sock.close()
            for fd in statuses.values():
                os.close(fd)
            return request, fds
        os.close(fds[0])
        os.close(fds[1])
        statuses[pid] = fds[2]
        sock.send(json.dumps({"pid": pid}).encode())


def _reap(statuses: dict[int, int]) -> None:
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = statuses.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, str(os.waitstatus_to_exitcode(status)).encode())
            except OSError:
                pass
            os.close(fd)


def _become_rank(request: dict, fds: list[int]) -> None:
    """In the forked child: the rank's descriptors, environment and arguments, as if Python had
    been started with them; then run its code (its exceptions and SystemExit end the process
    as Python's would)."""
    die_with_parent()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    out, err, status = fds
    os.close(status)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (null, out, err):
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    os.environ.clear()
    os.environ.update(request["env"])
    if request.get("cwd"):
        os.chdir(request["cwd"])
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if "torch" in sys.modules and threads.isdigit() and int(threads) > 0:
        # OpenMP read the zygote's environment when torch was imported: give the rank its own
        # budget (fuse's thread budget, as a started process would get it)
        sys.modules["torch"].set_num_threads(int(threads))
    import runpy
    args = request["argv"]
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        script = args[0]
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


def main(argv: Sequence[str]) -> None:
    sock = socket.socket(fileno=int(argv[0]))
    die_with_parent()
    failed = []
    for name in argv[1:]:
        try:
            importlib.import_module(name)
        except Exception as err:        # the agent falls back to plain processes
            failed.append(f"{name}: {type(err).__name__}: {err}")
    if failed:
        sock.send(("could not import " + "; ".join(failed)).encode())
        return
    sock.send(b"ready")
    got = _serve(sock)
    if got is not None:
        _become_rank(*got)


if __name__ == "__main__":
    main(sys.argv[1:])
