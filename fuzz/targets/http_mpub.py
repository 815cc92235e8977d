"""nsqd's HTTP /mpub body parsers (trionsq.nsqd.http_api._text_messages and
_binary_messages) over arbitrary bodies; the first byte picks the mode and the size limits.

What must hold:
* only `HTTPError` with status 413 escapes;
* text mode: every message is non-empty, has no ``\\n``, is within max_msg_size, and the
  messages are the body's non-empty lines in order;
* binary mode: every message is within [1, max_msg_size], and re-encoding the messages
  (count, then size-prefixed messages) gives a prefix of the body that parses back equal.
"""

from __future__ import annotations

import struct

from trionsq.http_common import HTTPError
from trionsq.nsqd.http_api import _binary_messages, _text_messages

from ..common import check

_LIMITS = ((1024 * 1024, 5 * 1024 * 1024), (64, 256), (4, 1024), (100, 64))


def _encode(messages: list[bytes]) -> bytes:
    parts = [struct.pack(">I", len(messages))]
    for msg in messages:
        parts += [struct.pack(">I", len(msg)), msg]
    return b"".join(parts)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    selector, body = data[0], data[1:]
    max_msg, max_body = _LIMITS[(selector >> 1) % len(_LIMITS)]
    try:
        if selector & 1:
            messages = _binary_messages(body, max_msg, max_body)
            check(all(0 < len(m) <= max_msg for m in messages), "binary message size")
            encoded = _encode(messages)
            check(body.startswith(encoded), "re-encoded messages are not the body")
            check(_binary_messages(encoded, max_msg, max_body) == messages, "re-parse")
        else:
            messages = _text_messages(body, max_msg)
            check(all(m and b"\n" not in m and len(m) <= max_msg for m in messages), "text msg")
            check(messages == [x for x in body.split(b"\n") if x], "text messages")
    except HTTPError as err:
        check(err.status == 413, f"status {err.status}")


def seeds() -> list[bytes]:
    return [
        b"\x00one\ntwo\r\n\nthree",
        b"\x02" + b"x" * 100 + b"\nshort",
        b"\x01" + _encode([b"a", b"bb", b"ccc"]),
        b"\x03" + _encode([b"a" * 64]),
        b"\x05" + _encode([b"a" * 5]),
        b"\x01\x00\x00\x00\x02\x00\x00\x00\x01a",
        b"\x01\xff\xff\xff\xff",
    ]
