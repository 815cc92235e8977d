"""A command whose size, count or body is cut short by the client closing its side: each
is a fatal error naming what could not be read (docs/protocol.md §1.3 body errors)."""

from __future__ import annotations

import socket
import struct

import pytest

from .conftest import Connect


def _i(n: int) -> bytes:
    return struct.pack(">i", n)


CASES = [
    (b"IDENTIFY\n\x00\x00", "E_BAD_BODY", "IDENTIFY failed to read body size"),
    (b"IDENTIFY\n" + _i(10) + b"{}", "E_BAD_BODY", "IDENTIFY failed to read body"),
    (b"AUTH\n\x00\x00", "E_BAD_BODY", "AUTH failed to read body size"),
    (b"AUTH\n" + _i(10) + b"abc", "E_BAD_BODY", "AUTH failed to read body"),
    (b"PUB {t}\n\x00\x00", "E_BAD_MESSAGE", "PUB failed to read message body size"),
    (b"PUB {t}\n" + _i(10) + b"12345", "E_BAD_MESSAGE", "PUB failed to read message body"),
    (b"DPUB {t} 10\n\x00", "E_BAD_MESSAGE", "DPUB failed to read message body size"),
    (b"DPUB {t} 10\n" + _i(10) + b"123", "E_BAD_MESSAGE", "DPUB failed to read message body"),
    (b"MPUB {t}\n\x00\x00", "E_BAD_BODY", "MPUB failed to read body size"),
    (b"MPUB {t}\n" + _i(100) + b"\x00", "E_BAD_BODY", "MPUB failed to read message count"),
    (
        b"MPUB {t}\n" + _i(100) + _i(2) + _i(1) + b"a" + b"\x00",
        "E_BAD_MESSAGE",
        "MPUB failed to read message(1) body size",
    ),
    (
        b"MPUB {t}\n" + _i(100) + _i(1) + _i(10) + b"abc",
        "E_BAD_MESSAGE",
        "MPUB failed to read message body",
    ),
]


@pytest.mark.parametrize(
    ("data", "code", "text"), CASES, ids=[text.replace(" ", "_") for _, _, text in CASES]
)
def test_truncated_command_is_fatal(
    connect: Connect, topic: str, data: bytes, code: str, text: str
) -> None:
    conn = connect()
    conn.send(data.replace(b"{t}", topic.encode()))
    conn.sock.shutdown(socket.SHUT_WR)
    conn.expect_fatal(code, text)
