"""The timeline writer: a Chrome trace (chrome://tracing, Perfetto) of what the engine does.

Only rank 0 writes, as in Horovod: the coordinator sees negotiation and, being a member of the
global set, executes every global collective.  The engine records events into a C++ buffer
(``fuse/engine/csrc/timeline.h``) without the GIL; a daemon thread here drains that buffer every
``INTERVAL`` seconds and appends it to the file.

File format: a JSON array (Chrome's "JSON Array Format") that is valid JSON after every write.
The file always ends in ``"\\n]\\n"``; each append overwrites that tail with ``",\\n" + events +
"\\n]\\n"`` in one positioned write, so a reader that opens the file between two writes (even
while the job runs) can ``json.load`` it.  A killed job leaves a valid file holding everything
up to the last drain.

``FUSE_TIMELINE=path`` starts it at ``init()``; ``FUSE_TIMELINE=DYNAMIC`` (any case) starts
nothing, and ``start_timeline(path)`` / ``stop_timeline()`` switch it at run time.  Unlike
Horovod, ``start_timeline`` works whatever FUSE_TIMELINE says (Horovod raises ValueError unless
the variable is set); starting again while running closes the current file and opens the new one.
"""

from __future__ import annotations

import os
import threading

INTERVAL = 0.1  # seconds between drains
_TAIL = b"\n]\n"


class TimelineWriter:
    def __init__(self, engine, path: str, mark_cycles: bool, backend: str):
        self._engine = engine
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._lock = threading.Lock()   # one flush at a time (writer thread vs stop)
        self._stop = threading.Event()
        self._empty = True
        self._end = 0                   # where the tail starts
        engine.timeline_drain()         # leftovers of an earlier timeline
        engine.timeline_start(bool(mark_cycles), backend)
        self._flush()
        self._thread = threading.Thread(target=self._run, name="fuse-timeline", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            try:
                self._flush()
            except OSError:             # disk full, file removed: stop writing, keep training
                return

    def _flush(self) -> None:
        with self._lock:
            if self._fd < 0:
                return
            chunk = self._engine.timeline_drain()
            if not chunk and not (self._empty and self._end == 0):
                return
            head = b"[\n" if self._end == 0 else (b"" if self._empty or not chunk else b",\n")
            data = head + chunk + _TAIL
            os.pwrite(self._fd, data, self._end)
            self._end += len(data) - len(_TAIL)
            if chunk:
                self._empty = False

    def stop(self) -> None:
        """Stop recording, write what is left, close the file (valid JSON).  Idempotent."""
        self._engine.timeline_stop()
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
        self._flush()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
