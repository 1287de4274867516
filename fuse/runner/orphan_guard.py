"""Run a worker's command so that its whole process tree dies with the launcher.

``python -I -S orphan_guard.py LAUNCHER_PID -- COMMAND...``: the launcher starts this script as
the leader of a new process group; the script runs COMMAND in that group and waits for it.
The kernel tells it when the launcher dies, even by SIGKILL (``PR_SET_PDEATHSIG``); it then
signals the whole group, so a shell that does not ``exec`` (``bash -c "python train.py; echo
done"``) takes its Python workers, their data loaders and anything else they started along.
A parent-death signal set on COMMAND itself would reach only the shell.

The other way round, COMMAND dies with this script: its parent-death signal is SIGKILL, so a
guard killed by SIGKILL (which it cannot handle) takes COMMAND along instead of leaving it
training on, re-parented to init, where it would rejoin an elastic job beside the worker the
launcher starts in its place.  Whatever COMMAND started is in the group, which the launcher
signals when it sees the guard die.

When the launcher stops the job it signals the group itself (this script included): the
script then only waits for COMMAND, and ends the way it ended (its exit status, or the same
signal), which is what the launcher reports.

It imports nothing of fuse (it runs as a plain script, before anything else), and stays a
sleeping process: one per local worker, about 10 MB.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
GRACE_S = 1.0       # between SIGTERM and SIGKILL to the group once the launcher is gone


def _orphaned(launcher: int) -> bool:
    return os.getppid() != launcher


def _take_the_group_down(signum=None, frame=None) -> None:
    """The launcher is gone: SIGTERM to the group, and SIGKILL after a grace period to
    whatever is left (this process included)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, lambda *_: os.killpg(0, signal.SIGKILL))
    os.killpg(0, signal.SIGTERM)
    signal.setitimer(signal.ITIMER_REAL, GRACE_S)


def main(argv: list) -> int:
    launcher, command = int(argv[1]), argv[3:]
    assert argv[2] == "--" and command, "usage: orphan_guard.py LAUNCHER_PID -- COMMAND..."

    def on_term(signum, frame):
        # the launcher's own SIGTERM went to the whole group: only wait for the command
        if _orphaned(launcher):
            _take_the_group_down()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the launcher forwards what it gets
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        print(f"fuse orphan guard: prctl failed (errno {ctypes.get_errno()})", file=sys.stderr)
    if _orphaned(launcher):         # it died before the kernel could watch it for us
        _take_the_group_down()
    guard = os.getpid()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)    # kept across exec
        if os.getppid() != guard:       # the guard died before the kernel could watch it
            os._exit(128 + signal.SIGKILL)
        try:
            os.execvp(command[0], command)
        except OSError as err:
            print(f"{command[0]}: {err.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    while True:
        _, status = os.waitpid(pid, 0)      # retried after a signal handler ran (PEP 475)
        if os.WIFEXITED(status):
            return os.WEXITSTATUS(status)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)  # end as the command did, for the launcher
            os.kill(os.getpid(), sig)
            return 128 + sig


if __name__ == "__main__":
    sys.exit(main(sys.argv))
