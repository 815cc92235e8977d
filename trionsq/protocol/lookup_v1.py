"""Sans-IO codec of nsqlookupd's TCP protocol V1 (docs/protocol.md §6.1): the command parser, the
response encoding, IDENTIFY's JSON body as Go decodes it, and REGISTER/UNREGISTER's topic and
channel checks. No trio, no sockets, no clocks.

Theory of operation: after the 4-byte magic ``"  V1"``, the client sends lines; each is trimmed
of surrounding whitespace (Go's strings.TrimSpace) and split on single spaces, the first part
naming the command. IDENTIFY is followed by ``[4-byte signed size][JSON body]``. `feed` appends
received bytes; `next_command` returns the next complete `LookupCommand`, None when more bytes
are needed, or raises `ProtocolError`; `eof` raises the error nsqlookupd sends when the stream
ends inside an IDENTIFY body. An optional `check_line(name, params)` hook runs as soon as a line
is complete, before any body is awaited (nsqlookupd refuses a second IDENTIFY without reading
its body). Every answer, success or error, is ``[4-byte size][data]`` with no frame type.

Where Go has no limit this parser sets one: a line may not exceed `MAX_LINE_LENGTH` bytes
(``E_INVALID command line too long``); Go's nsqlookupd reads lines of any length. A negative
IDENTIFY body size, which makes Go's nsqlookupd panic, is ``E_BAD_BODY IDENTIFY failed to read
body``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from .errors import E_BAD_BODY, E_BAD_CHANNEL, E_BAD_TOPIC, E_INVALID, ProtocolError
from .names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "MAGIC_V1",
    "MAX_LINE_LENGTH",
    "CheckLine",
    "IdentifyBody",
    "LookupCommand",
    "LookupParser",
    "decode_identify",
    "encode_lookup_response",
    "register",
    "topic_and_channel",
    "unregister",
]

MAGIC_V1 = b"  V1"
#: The longest command line accepted (with its ``\n``); a valid one is under 200 bytes.
MAX_LINE_LENGTH = 64 * 1024

_SIZE = struct.Struct(">i")
_RESPONSE_SIZE = struct.Struct(">I")

# Go's unicode.IsSpace: what strings.TrimSpace removes from both ends of a line.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_ASCII_SPACE = b"\t\n\v\f\r "


class LookupCommand(NamedTuple):
    """One command: its `name`, the space-separated `params` after it (text, with any bytes
    that are not UTF-8 kept as surrogate escapes), and IDENTIFY's `body` (None for the
    others)."""

    name: str
    params: tuple[str, ...]
    body: bytes | None = None


CheckLine = Callable[[str, tuple[str, ...]], None]


def register(topic: str, channel: str | None = None) -> bytes:
    """nsqd's REGISTER line for a topic, or one of its channels."""
    return b"REGISTER " + _params(topic, channel) + b"\n"


def unregister(topic: str, channel: str | None = None) -> bytes:
    """nsqd's UNREGISTER line for a topic, or one of its channels."""
    return b"UNREGISTER " + _params(topic, channel) + b"\n"


def _params(topic: str, channel: str | None) -> bytes:
    return (topic if channel is None else f"{topic} {channel}").encode()


def encode_lookup_response(data: bytes) -> bytes:
    """A V1 answer: ``[4-byte size][data]``."""
    return _RESPONSE_SIZE.pack(len(data)) + data


def _split_line(line: bytes) -> tuple[str, tuple[str, ...]]:
    if line.isascii():
        text = line.strip(_ASCII_SPACE).decode("ascii")
    else:
        text = line.decode("utf-8", "surrogateescape").strip(_GO_SPACE)
    parts = text.split(" ")
    return parts[0], tuple(parts[1:])


class LookupParser:
    """Turns the byte stream after the magic into `LookupCommand`s (see the module
    docstring)."""

    __slots__ = ("_buf", "_chunks", "_chunks_len", "_need", "_pending", "_scanned", "check_line")

    def __init__(self, check_line: CheckLine | None = None) -> None:
        self.check_line = check_line
        self._buf = b""
        # Bytes of _buf already searched for a newline.
        self._scanned = 0
        # An IDENTIFY body still arriving, collected in chunks and joined once.
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        self._need = 0
        # An IDENTIFY line whose body is awaited.
        self._pending: tuple[str, tuple[str, ...]] | None = None

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._need:
            self._chunks.append(data)
            self._chunks_len += len(data)
            if len(self._buf) + self._chunks_len < self._need:
                return
            self._buf = b"".join((self._buf, *self._chunks))
            self._chunks.clear()
            self._chunks_len = 0
            self._need = 0
        else:
            self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed by a returned command."""
        return len(self._buf) + self._chunks_len

    def next_command(self) -> LookupCommand | None:
        """The next complete command, or None until more bytes are fed."""
        if self._need:
            return None
        if self._pending is None:
            buf = self._buf
            nl = buf.find(b"\n", self._scanned)
            if nl < 0 or nl >= MAX_LINE_LENGTH:
                if len(buf) >= MAX_LINE_LENGTH:
                    raise ProtocolError(E_INVALID, "command line too long")
                self._scanned = len(buf)
                return None
            name, params = _split_line(buf[:nl])
            self._buf = buf[nl + 1 :]
            self._scanned = 0
            if self.check_line is not None:
                self.check_line(name, params)
            if name != "IDENTIFY":
                return LookupCommand(name, params)
            self._pending = (name, params)
        buf = self._buf
        if len(buf) < 4:
            self._need = 4
            return None
        (size,) = _SIZE.unpack_from(buf)
        if size < 0:
            raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to read body")
        if len(buf) - 4 < size:
            self._need = 4 + size
            return None
        name, params = self._pending
        self._pending = None
        body = buf[4 : 4 + size]
        self._buf = buf[4 + size :]
        return LookupCommand(name, params, body)

    def eof(self) -> None:
        """The peer's stream ended after `next_command` returned None: raise the error
        nsqlookupd sends for an IDENTIFY body cut short. A partial line ends the connection
        without an answer, so nothing is raised for it."""
        if self._pending is None:
            return
        if self.buffered < 4:
            raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to read body size")
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to read body")


# -- REGISTER / UNREGISTER -------------------------------------------------------------------


def topic_and_channel(command: str, params: tuple[str, ...]) -> tuple[str, str]:
    """Go's getTopicChan: the topic and the channel ("" when not given) of REGISTER or
    UNREGISTER, with nsqlookupd's errors (names quoted as sent, not escaped)."""
    if not params:
        raise ProtocolError(E_INVALID, f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else ""
    if not is_valid_topic_name(topic):
        raise ProtocolError(E_BAD_TOPIC, f"{command} topic name '{topic}' is not valid")
    if channel and not is_valid_channel_name(channel):
        raise ProtocolError(E_BAD_CHANNEL, f"{command} channel name '{channel}' is not valid")
    return topic, channel


# -- IDENTIFY's body ---------------------------------------------------------------------------


class IdentifyBody(NamedTuple):
    """The peer information an nsqd sends in IDENTIFY (Go's PeerInfo, without the fields
    nsqlookupd sets itself)."""

    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    topology_zone: str = ""
    topology_region: str = ""


_STRING_FIELDS = (
    "remote_address",
    "hostname",
    "broadcast_address",
    "version",
    "topology_zone",
    "topology_region",
)
_INT_FIELDS = ("tcp_port", "http_port")
_FIELDS = frozenset(_STRING_FIELDS + _INT_FIELDS)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _DecodeError(ValueError):
    pass


class _Object(list[tuple[str, Any]]):
    """A JSON object's members in order, duplicates kept (Go decodes each in turn)."""


def _no_constant(name: str) -> Any:
    raise _DecodeError(f"invalid character {name!r}")


def _field_name(key: str) -> str | None:
    """The PeerInfo field a JSON key sets: an exact match, else Go's case-insensitive one."""
    if key in _FIELDS:
        return key
    folded = key.replace("\u017f", "s").lower()  # Go folds U+017F to s, U+212A to k
    return folded if folded in _FIELDS else None


def _go_string(value: str) -> str:
    """Lone surrogates (from ``\\ud800``-style escapes) become U+FFFD, as Go decodes them."""
    return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value


def decode_identify(body: bytes) -> IdentifyBody:
    """IDENTIFY's JSON body decoded as Go's encoding/json fills a PeerInfo: an object (or
    ``null``) whose keys match the fields exactly or case-insensitively, unknown keys ignored,
    ``null`` values leaving a field unset, strings for strings and integer literals in int64
    range for the ports; anything else is ``E_BAD_BODY IDENTIFY failed to decode JSON body``.
    Then nsqlookupd's ``E_BAD_BODY IDENTIFY missing fields`` unless broadcast_address,
    tcp_port, http_port and version are all set."""
    # Go replaces each byte that is not UTF-8 with U+FFFD (inside strings; elsewhere it is a
    # syntax error either way).
    text = body.decode("utf-8", "surrogateescape")
    if not text.isascii():
        text = _ESCAPED_BYTE.sub("\ufffd", text)
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_Object)
        fields = _peer_fields(value)
    except (ValueError, RecursionError):
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
    peer = IdentifyBody(**fields)
    if not peer.broadcast_address or not peer.tcp_port or not peer.http_port or not peer.version:
        raise ProtocolError(E_BAD_BODY, "IDENTIFY missing fields")
    return peer


def _peer_fields(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, _Object):
        raise _DecodeError("cannot unmarshal into PeerInfo")
    fields: dict[str, Any] = {}
    for key, item in value:
        name = _field_name(key)
        if name is None or item is None:
            continue
        if name in _INT_FIELDS:
            if type(item) is not int or not _INT64_MIN <= item <= _INT64_MAX:
                raise _DecodeError(f"cannot unmarshal {item!r} into {name}")
        elif not isinstance(item, str):
            raise _DecodeError(f"cannot unmarshal {item!r} into {name}")
        else:
            item = _go_string(item)
        if name != "remote_address":  # nsqlookupd sets it from the connection
            fields[name] = item
    return fields
