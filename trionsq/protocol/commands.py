"""Client-to-server V2 commands: encoders (for clients, tests, fuzzers) and the `Command` event.

A command is one line, ``NAME[ PARAM...]\\n``, optionally followed by a length-prefixed body
(docs/protocol.md §1.3).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

MAGIC_V2 = b"  V2"

_SIZE = struct.Struct(">i")

#: Every command nsqd's V2 protocol knows.
COMMAND_NAMES = (
    b"IDENTIFY",
    b"AUTH",
    b"SUB",
    b"PUB",
    b"MPUB",
    b"DPUB",
    b"RDY",
    b"FIN",
    b"REQ",
    b"TOUCH",
    b"NOP",
    b"CLS",
)


class Command(NamedTuple):
    """A parsed command. `body` is bytes for IDENTIFY/AUTH/PUB/DPUB and a list of message
    bodies for MPUB; None for commands without a body."""

    name: bytes
    params: tuple[bytes, ...]
    body: bytes | list[bytes] | None = None


def encode_command(name: bytes, *params: bytes, body: bytes | None = None) -> bytes:
    line = b" ".join((name, *params)) + b"\n"
    if body is None:
        return line
    return line + _SIZE.pack(len(body)) + body


def _b(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def identify(data: dict[str, Any]) -> bytes:
    return encode_command(b"IDENTIFY", body=json.dumps(data).encode())


def auth(secret: bytes) -> bytes:
    return encode_command(b"AUTH", body=secret)


def sub(topic: str | bytes, channel: str | bytes) -> bytes:
    return encode_command(b"SUB", _b(topic), _b(channel))


def pub(topic: str | bytes, body: bytes) -> bytes:
    return encode_command(b"PUB", _b(topic), body=body)


def dpub(topic: str | bytes, defer_ms: int, body: bytes) -> bytes:
    return encode_command(b"DPUB", _b(topic), str(defer_ms).encode(), body=body)


def mpub(topic: str | bytes, bodies: Iterable[bytes]) -> bytes:
    bodies = list(bodies)
    parts = [_SIZE.pack(len(bodies))]
    for b in bodies:
        parts.append(_SIZE.pack(len(b)))
        parts.append(b)
    return encode_command(b"MPUB", _b(topic), body=b"".join(parts))


def rdy(count: int) -> bytes:
    return b"RDY %d\n" % count


def fin(message_id: bytes) -> bytes:
    return b"FIN " + message_id + b"\n"


def req(message_id: bytes, timeout_ms: int) -> bytes:
    return b"REQ " + message_id + b" %d\n" % timeout_ms


def touch(message_id: bytes) -> bytes:
    return b"TOUCH " + message_id + b"\n"


def nop() -> bytes:
    return b"NOP\n"


def cls() -> bytes:
    return b"CLS\n"
