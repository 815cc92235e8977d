"""V2 command parser (trionsq.protocol.parser.CommandParser) fed arbitrary bytes in arbitrary
splits.

What must hold:
* only `ProtocolError` escapes `feed`/`next_command`/`eof`;
* the commands (and the error, if any) do not depend on how the stream is split: the input fed
  in one piece and in the split given by the first byte yield the same result;
* `buffered` never exceeds the bytes fed (nothing is preallocated from a declared size) and a
  body is never longer than its limit;
* every command re-encoded with trionsq.protocol.commands' encoders parses back equal (where
  the command is representable: no parameter ends in ``\\r``).
"""

from __future__ import annotations

import struct

from trionsq.protocol import commands as c
from trionsq.protocol.commands import Command
from trionsq.protocol.parser import CommandParser

from ..common import check, drive_parser, split_input

MAX_MSG = 1024
MAX_BODY = 4096
_SIZE = struct.Struct(">i")


def _parse(chunks: list[bytes]) -> tuple[list[Command], tuple[str, str] | None]:
    return drive_parser(CommandParser(max_msg_size=MAX_MSG, max_body_size=MAX_BODY), chunks)


def _encode(cmd: Command) -> bytes:
    if isinstance(cmd.body, list):
        if len(cmd.params) == 1:
            return c.mpub(cmd.params[0], cmd.body)
        parts = [_SIZE.pack(len(cmd.body))]
        for b in cmd.body:
            parts += [_SIZE.pack(len(b)), b]
        return c.encode_command(cmd.name, *cmd.params, body=b"".join(parts))
    return c.encode_command(cmd.name, *cmd.params, body=cmd.body)


def _representable(cmd: Command) -> bool:
    tokens = (cmd.name, *cmd.params)
    return not tokens[-1].endswith(b"\r")


def test_one_input(data: bytes) -> None:
    _, chunks = split_input(data)
    whole = b"".join(chunks)
    commands, error = _parse(chunks)
    commands_whole, error_whole = _parse([whole] if whole else [])
    check(commands == commands_whole, "commands depend on the split")
    check(error == error_whole, f"error depends on the split: {error} vs {error_whole}")
    for cmd in commands:
        if isinstance(cmd.body, bytes):
            check(len(cmd.body) <= MAX_BODY, "body over the limit")
        elif isinstance(cmd.body, list):
            check(all(0 < len(b) <= MAX_MSG for b in cmd.body), "MPUB message size")
        if not _representable(cmd):
            continue
        again, err = _parse([_encode(cmd)])
        check(err is None and again == [cmd], f"{cmd!r} re-encoded parses as {again!r} {err}")


def seeds() -> list[bytes]:
    mid = b"0123456789abcdef"
    session = b"".join(
        [
            c.identify({"client_id": "x", "feature_negotiation": True, "heartbeat_interval": 1000}),
            c.auth(b"secret"),
            c.sub("topic", "chan#ephemeral"),
            c.pub("topic", b"hello"),
            c.mpub("topic", [b"a", b"bb", b"ccc"]),
            c.dpub("topic", 1500, b"later"),
            c.rdy(10),
            c.fin(mid),
            c.req(mid, 100),
            c.touch(mid),
            c.nop(),
            c.cls(),
        ]
    )
    out = [bytes([sel]) + session for sel in (0, 1, 5, 42)]
    out += [
        b"\x00" + c.pub("t", b"x" * 2000),
        b"\x07PUB t\n\xff\xff\xff\xff",
        b"\x03MPUB t\n\x00\x00\x00\x10\x00\x00\x00\x02\x00\x00\x00\x01a",
        b"\x00" + b"A" * 17000,
        b"\x02NOP\r\nDPUB t 99999999999999999999999\n",
    ]
    return out
