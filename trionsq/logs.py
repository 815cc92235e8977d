"""Daemon logging in NSQ's format (`[nsqd] 2006/01/02 15:04:05.000000 INFO: msg` on stderr) and
NSQ's level names (debug < info < warn < error < fatal) on top of stdlib `logging`."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

__all__ = [
    "LEVELS",
    "NSQFormatter",
    "parse_log_level",
    "set_log_level",
    "setup_logging",
]

#: NSQ level name -> stdlib level ("warning" accepted as an alias of "warn").
LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}

# What Go's lg.LogLevel.String() prints in front of each message.
_LEVEL_NAMES = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
}


def parse_log_level(name: str) -> str:
    """Normalise an NSQ level name (any case; ``warning`` -> ``warn``); `ValueError` if unknown."""
    key = name.lower()
    if key not in LEVELS:
        raise ValueError(f"invalid log level '{name}' (debug, info, warn, error, fatal)")
    return "warn" if key == "warning" else key


class NSQFormatter(logging.Formatter):
    """``<prefix>YYYY/MM/DD HH:MM:SS.uuuuuu LEVEL: message`` in local time, like Go's
    ``log.New(os.Stderr, prefix, Ldate|Ltime|Lmicroseconds)`` with nsq's level names."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        level = _LEVEL_NAMES.get(record.levelno) or record.levelname
        text = f"{self.prefix}{stamp}.{micros:06d} {level}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _NSQHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marker class so `setup_logging` can replace its own handler when called again."""


def setup_logging(
    name: str, prefix: str, level: str, stream: TextIO | None = None
) -> logging.Logger:
    """Configure logger ``name`` (``trionsq.nsqd``, ...) to write NSQ-format lines to stderr (or
    ``stream``) at NSQ level ``level``; idempotent. Returns the logger."""
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        if isinstance(handler, _NSQHandler):
            logger.removeHandler(handler)
    handler = _NSQHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(NSQFormatter(prefix))
    logger.addHandler(handler)
    set_log_level(name, level)
    return logger


def set_log_level(name: str, level: str) -> None:
    """Change logger ``name``'s NSQ level at runtime (e.g. ``PUT /config/log_level``)."""
    logging.getLogger(name).setLevel(LEVELS[parse_log_level(level)])
