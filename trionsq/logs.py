"""Daemon logging in NSQ's format (`[nsqd] 2006/01/02 15:04:05.000000 INFO: msg` on stderr) and
NSQ's level names (debug < info < warn < error < fatal) on top of stdlib `logging`; values
formatted as Go's fmt prints them where Go's log lines print a struct or a map (`go_struct`,
`go_value`), and a connection's failures as Go's net package words them (`go_net_error`)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable
from typing import TextIO

from .goerrors import errno_text, host_port

__all__ = [
    "CLOSED_CONNECTION",
    "LEVELS",
    "NSQFormatter",
    "go_net_error",
    "go_struct",
    "go_value",
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
        # (second, its date and time) last formatted: lines come many to a second. One
        # tuple, replaced whole: worker threads log too.
        self._stamp = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        cached = self._stamp
        if cached[0] != second:
            cached = (second, time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(second)))
            self._stamp = cached
        stamp = cached[1]
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


def go_value(value: object) -> str:
    """`value` as Go's ``%v`` prints it: ``true``/``false``, ``<nil>``, a map as
    ``map[k:v ...]`` (keys sorted, as fmt sorts them), a list as ``[a b]``, text unquoted."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: str(kv[0]))
        return "map[" + " ".join(f"{go_value(k)}:{go_value(v)}" for k, v in items) + "]"
    if isinstance(value, list | tuple):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    return str(value)


def go_struct(fields: Iterable[tuple[str, object]]) -> str:
    """A struct as Go's ``%+v`` prints it: ``{Name:value Other:value}``, in field order."""
    return "{" + " ".join(f"{name}:{go_value(value)}" for name, value in fields) + "}"


#: Go's read error on a connection closed under it.
CLOSED_CONNECTION = "use of closed network connection"


def go_net_error(stream: object, remote: str, op: str, cause: BaseException | str) -> str:
    """Go's net.OpError text for a failed ``read`` or ``write`` (`op`) on a client's
    connection (a Trio stream), as Go's log lines print it:
    ``read tcp 127.0.0.1:4150->127.0.0.1:54321: read: connection reset by peer``; `cause` is
    the exception (its OSError, however deeply wrapped, gives the reason) or the reason itself
    (``i/o timeout``, `CLOSED_CONNECTION`)."""
    if isinstance(cause, str):
        reason = cause
    else:
        os_error: BaseException | None = cause
        while os_error is not None and not isinstance(os_error, OSError):
            os_error = os_error.__cause__  # trio's errors wrap the OSError (TLS: twice)
        if isinstance(os_error, OSError) and os_error.errno:
            reason = f"{op}: {errno_text(os_error)}"
        elif type(cause).__name__ == "ClosedResourceError":  # trio's (not imported here)
            reason = CLOSED_CONNECTION
        else:
            reason = str(cause)
    while True:  # the socket beneath TLS and compression
        below = getattr(stream, "transport_stream", None)
        if below is None:
            break
        stream = below
    sock = getattr(stream, "socket", None)
    local = ""
    if sock is not None:
        try:
            name = sock.getsockname()
        except OSError:
            name = None
        if isinstance(name, tuple):
            local = host_port(name[0], name[1])
        elif name:
            local = str(name)
    return f"{op} tcp {local}->{remote}: {reason}"
