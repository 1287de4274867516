"""fuse's logger: one ``logging`` logger named "fuse", lines tagged with the rank.

FUSE_LOG_LEVEL (trace, debug, info, warning, error, fatal) sets the level; FUSE_LOG_HIDE_TIME
drops the timestamp.  Configured once, by ``fuse.init``.
"""

from __future__ import annotations

import logging
import sys

TRACE = 5
logging.addLevelName(TRACE, "TRACE")
_LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL}

logger = logging.getLogger("fuse")


def configure(level: str, rank: int, hide_time: bool) -> logging.Logger:
    for h in list(logger.handlers):
        if getattr(h, "_fuse", False):
            logger.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler._fuse = True  # type: ignore[attr-defined]
    fmt = "[fuse %(levelname)s rank %(rank)d] %(message)s"
    if not hide_time:
        fmt = "%(asctime)s " + fmt
    handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(_RankFilter(rank))
    logger.addHandler(handler)
    logger.setLevel(_LEVELS[level])
    logger.propagate = False
    return logger


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True
