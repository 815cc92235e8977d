"""Incremental, sans-IO parser of V2 commands (client -> nsqd).

Theory of operation: `feed` appends received bytes; `next_command` returns the next complete
`Command`, None when more bytes are needed, or raises `ProtocolError` carrying the NSQ error
code, text and fatality. Checks run in nsqd's order (reference §1.3): for each command, the
checks nsqd makes before it reads the body (parameter count, names, numbers) raise as soon as
the line is complete, without waiting for a body that may never come. An optional
`check_line(name, params)` hook lets the daemon add its own pre-body checks (connection state).

Bytes are kept as the immutable `bytes` received (slicing is cheaper than a bytearray here);
a body still arriving is collected in chunks and joined once, so a large MPUB costs no
quadratic copying.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .commands import Command
from .errors import (
    E_BAD_BODY,
    E_BAD_MESSAGE,
    E_BAD_TOPIC,
    E_INVALID,
    ProtocolError,
)
from .names import is_valid_topic_name

_INT32 = struct.Struct(">i")
_unpack_int32 = _INT32.unpack_from

DEFAULT_MAX_MSG_SIZE = 1024 * 1024
DEFAULT_MAX_BODY_SIZE = 5 * 1024 * 1024
#: A command line longer than this without a newline is rejected (nsqd's bufio reader size
#: is 16 KiB; a longer line fails to read and the connection is closed).
MAX_LINE_LENGTH = 16 * 1024

CheckLine = Callable[[bytes, tuple[bytes, ...]], None]

# Per body-carrying command: (kind of body, error code for body problems).
_PUB, _MPUB, _DPUB, _IDENTIFY, _AUTH = range(5)
_BODY_KIND = {
    b"PUB": _PUB,
    b"MPUB": _MPUB,
    b"DPUB": _DPUB,
    b"IDENTIFY": _IDENTIFY,
    b"AUTH": _AUTH,
}


def parse_uint(text: bytes) -> int | None:
    """Unsigned decimal as Go's strconv.ParseUint(s, 10, 64) accepts it, else None."""
    if not text or not text.isdigit() or not text.isascii():
        return None
    value = int(text)
    return value if value < (1 << 64) else None


def _topic_check(cmd: str, topic: bytes, code_prefix: str = "") -> None:
    try:
        name = topic.decode("ascii")
    except UnicodeDecodeError:
        name = None
    if name is None or not is_valid_topic_name(name):
        shown = topic.decode("utf-8", "replace")
        raise ProtocolError(E_BAD_TOPIC, f'{code_prefix}{cmd} topic name "{shown}" is not valid')


def _pre_body_checks(name: bytes, params: tuple[bytes, ...]) -> int | None:
    """nsqd's checks made before a body is read. Returns the DPUB defer for DPUB."""
    if name == b"PUB":
        if len(params) < 1:
            raise ProtocolError(E_INVALID, "PUB insufficient number of parameters")
        _topic_check("PUB", params[0])
    elif name == b"MPUB":
        if len(params) < 1:
            raise ProtocolError(E_INVALID, "MPUB insufficient number of parameters")
        # nsqd repeats the code in this message's text (reference §1.3, MPUB quirk).
        _topic_check("MPUB", params[0], "E_BAD_TOPIC ")
    elif name == b"DPUB":
        if len(params) < 2:
            raise ProtocolError(E_INVALID, "DPUB insufficient number of parameters")
        _topic_check("DPUB", params[0])
        if parse_uint(params[1]) is None:
            raise ProtocolError(
                E_INVALID, f"DPUB could not parse timeout {params[1].decode('utf-8', 'replace')}"
            )
    elif name == b"AUTH" and params:
        raise ProtocolError(E_INVALID, "AUTH invalid number of parameters")
    return None


class CommandParser:
    """Turns a byte stream into `Command`s. See the module docstring."""

    __slots__ = (
        "_buf",
        "_chunks",
        "_chunks_len",
        "_need",
        "_pending",
        "_pos",
        "check_line",
        "max_body_size",
        "max_msg_size",
    )

    def __init__(
        self,
        max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        check_line: CheckLine | None = None,
    ) -> None:
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.check_line = check_line
        self._buf = b""
        self._pos = 0
        # Bytes received while waiting for at least `_need` buffered bytes.
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        self._need = 0
        # A command whose line is parsed and checked, waiting for its body.
        self._pending: tuple[bytes, tuple[bytes, ...]] | None = None

    def feed(self, data: bytes) -> None:
        if self._need:
            self._chunks.append(data)
            self._chunks_len += len(data)
            if len(self._buf) - self._pos + self._chunks_len < self._need:
                return
            self._buf = b"".join((self._buf[self._pos :], *self._chunks))
            self._chunks.clear()
            self._chunks_len = 0
            self._need = 0
            self._pos = 0
        elif self._pos < len(self._buf):
            self._buf = self._buf[self._pos :] + data
            self._pos = 0
        else:
            self._buf = data
            self._pos = 0

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos + self._chunks_len

    def _wait_for(self, total: int) -> None:
        """Ask `feed` to accumulate chunks until `total` bytes follow `_pos`."""
        self._need = total

    def next_command(self) -> Command | None:
        if self._need:
            return None
        buf = self._buf
        pos = self._pos
        if self._pending is None:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if len(buf) - pos > MAX_LINE_LENGTH:
                    raise ProtocolError(E_INVALID, "command line too long")
                return None
            end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl  # strip a trailing \r
            parts = buf[pos:end].split(b" ")
            name = parts[0]
            params = tuple(parts[1:])
            kind = _BODY_KIND.get(name)
            if kind is None:
                self._pos = nl + 1
                if self.check_line is not None:
                    self.check_line(name, params)
                return Command(name, params, None)
            self._pos = pos = nl + 1
            if self.check_line is not None:
                self.check_line(name, params)
            _pre_body_checks(name, params)
            self._pending = (name, params)
        else:
            name, params = self._pending
            kind = _BODY_KIND[name]
        # A body follows: [4-byte size][size bytes].
        if len(buf) - pos < 4:
            self._wait_for(4)
            return None
        (size,) = _unpack_int32(buf, pos)
        self._check_body_size(kind, name, size)
        if len(buf) - pos - 4 < size:
            self._wait_for(4 + size)
            return None
        body = buf[pos + 4 : pos + 4 + size]
        self._pos = pos + 4 + size
        self._pending = None
        if kind == _MPUB:
            return Command(name, params, self._split_mpub(body))
        return Command(name, params, body)

    def _check_body_size(self, kind: int, name: bytes, size: int) -> None:
        if kind == _PUB or kind == _DPUB:
            cmd = "PUB" if kind == _PUB else "DPUB"
            if size <= 0:
                raise ProtocolError(E_BAD_MESSAGE, f"{cmd} invalid message body size {size}")
            if size > self.max_msg_size:
                raise ProtocolError(
                    E_BAD_MESSAGE, f"{cmd} message too big {size} > {self.max_msg_size}"
                )
        elif kind == _MPUB:
            if size <= 0:
                raise ProtocolError(E_BAD_BODY, f"MPUB invalid body size {size}")
            if size > self.max_body_size:
                raise ProtocolError(E_BAD_BODY, f"MPUB body too big {size} > {self.max_body_size}")
        else:
            cmd = name.decode()
            if size > self.max_body_size:
                raise ProtocolError(
                    E_BAD_BODY, f"{cmd} body too big {size} > {self.max_body_size}"
                )
            if size <= 0:
                raise ProtocolError(E_BAD_BODY, f"{cmd} invalid body size {size}")

    def _split_mpub(self, body: bytes) -> list[bytes]:
        """Split an MPUB body into message bodies, with nsqd's checks and messages."""
        if len(body) < 4:
            raise ProtocolError(E_BAD_BODY, "MPUB failed to read message count")
        (count,) = _unpack_int32(body, 0)
        if count <= 0 or count > (self.max_body_size - 4) // 5:
            raise ProtocolError(E_BAD_BODY, f"MPUB invalid message count {count}")
        max_msg = self.max_msg_size
        out = []
        append = out.append
        pos = 4
        n = len(body)
        for i in range(count):
            if n - pos < 4:
                raise ProtocolError(E_BAD_MESSAGE, f"MPUB failed to read message({i}) body size")
            (size,) = _unpack_int32(body, pos)
            if size <= 0:
                raise ProtocolError(E_BAD_MESSAGE, f"MPUB invalid message({i}) body size {size}")
            if size > max_msg:
                raise ProtocolError(E_BAD_MESSAGE, f"MPUB message too big {size} > {max_msg}")
            pos += 4
            if n - pos < size:
                raise ProtocolError(E_BAD_MESSAGE, "MPUB failed to read message body")
            append(body[pos : pos + size])
            pos += size
        return out
