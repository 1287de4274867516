"""Durable commits: an elastic job's committed state on disk, where the same job started again
finds it.

``FUSE_ELASTIC_CHECKPOINT_DIR=<dir>`` makes every ``state.commit()`` durable (``commit(durable=
False)`` skips one); without it ``commit(durable=True)`` is an error that names the variable.
Rank 0 writes what the commit saved (``Snapshot.saved()``: picklable) to
``<dir>/fuse-elastic-state.pkl``: to a temporary file first, flushed to disk, then renamed over
the last one, so a job killed mid-write leaves the previous durable commit whole.  When the
elastic loop first enters the training function in a process, rank 0 loads that file, if there
is one, into the state (``Snapshot.load_saved``) and the usual sync hands it to every worker:
a job whose every worker, or whose launcher, died resumes from its last durable commit when it
is started again with the same command.  Every rank holds the same committed state (it is
synced whenever the job re-forms), so rank 0's copy is the job's.
"""

from __future__ import annotations

import os
import pickle

DIR_ENV = "FUSE_ELASTIC_CHECKPOINT_DIR"
FILE_NAME = "fuse-elastic-state.pkl"
FORMAT = 1


def directory(environ=os.environ) -> str | None:
    return environ.get(DIR_ENV) or None


def wanted(durable: bool | None, environ=os.environ) -> bool:
    """Whether a commit asked as ``durable`` (None: as the environment says) goes to disk."""
    if durable is None:
        return directory(environ) is not None
    if durable and directory(environ) is None:
        raise ValueError(f"state.commit(durable=True) needs {DIR_ENV}: the directory where the "
                         "committed state is written (and found again when the job restarts)")
    return bool(durable)


def path(environ=os.environ) -> str:
    return os.path.join(directory(environ), FILE_NAME)


def write(saved, environ=os.environ) -> None:
    """Write ``saved`` (what the commit saved) atomically."""
    os.makedirs(directory(environ), exist_ok=True)
    final = path(environ)
    tmp = f"{final}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        pickle.dump({"format": FORMAT, "state": saved}, f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    try:
        fd = os.open(os.path.dirname(final), os.O_RDONLY)
        try:
            os.fsync(fd)        # the rename itself survives a crash of the machine too
        finally:
            os.close(fd)
    except OSError:
        pass


def read(environ=os.environ):
    """The last durable commit's saved state, or None when there is none (or no directory)."""
    if directory(environ) is None:
        return None
    try:
        with open(path(environ), "rb") as f:
            data = pickle.load(f)
    except FileNotFoundError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path(environ)} is not a fuse elastic checkpoint of format {FORMAT}")
    return data["state"]
