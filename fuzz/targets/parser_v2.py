"""V2 command parser (trionsq.protocol.parser.CommandParser) fed arbitrary bytes in arbitrary
splits.

What must hold:
* only `ProtocolError` escapes `feed`/`next_command`/`eof`;
* the commands (and the error, if any) do not depend on how the stream is split: the input fed
  in one piece and in the split given by the first byte yield the same result;
* `buffered` never exceeds the bytes fed (nothing is preallocated from a declared size) and a
  body is never longer than its limit;
* every command re-encoded with trionsq.protocol.commands' encoders parses back equal (where
  the command is representable: no parameter ends in ``\\r``);
* taking runs of FIN with `take_fins` first (as nsqd does) yields the same commands and error;
* a framing parser (given `new_id_runs`, as nsqd's) yields the same commands, errors and bodies,
  each PUB, DPUB and MPUB body as message frames with IDs taken in order;
* the last two with the parser's per-message loops in Python and compiled (_speedups.c).
"""

from __future__ import annotations

import struct

from trionsq.protocol import commands as c
from trionsq.protocol import parser
from trionsq.protocol.commands import Command
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.parser import CommandParser

from ..common import check, drive_parser, split_input

MAX_MSG = 1024
MAX_BODY = 4096
_SIZE = struct.Struct(">i")


def _parse(chunks: list[bytes]) -> tuple[list[Command], tuple[str, str] | None]:
    return drive_parser(CommandParser(max_msg_size=MAX_MSG, max_body_size=MAX_BODY), chunks)


#: The parser's per-message loops: in Python, and compiled where they are built.
_COMPILED = [False] + ([True] if parser.COMPILED_FRAME_MPUB else [])


def _framed(chunks: list[bytes], compiled: bool) -> tuple[list[Command], tuple[str, str] | None]:
    taken = [0]

    def new_id_runs(count: int) -> list[tuple[bytes, int, int]]:
        # Runs of one to three IDs, as when a clock tick's sequence runs out.
        runs = []
        for n in range(taken[0], taken[0] + count, 3):
            length = min(3, taken[0] + count - n)
            runs.append((b"%013x" % (n >> 12), n & 0xFFF, (n & 0xFFF) + length))
        taken[0] += count
        return runs

    framing = CommandParser(max_msg_size=MAX_MSG, max_body_size=MAX_BODY, new_id_runs=new_id_runs)
    parser.use_compiled_loops(compiled)
    try:
        return drive_parser(framing, chunks)
    finally:
        parser.use_compiled_loops(True)


def _taking_fins(
    chunks: list[bytes], compiled: bool
) -> tuple[list[Command], tuple[str, str] | None]:
    """As `drive_parser`, but taking runs of FIN with `take_fins` first, as nsqd's command
    loop does (each expanded to the command `next_command` returns for it)."""
    fins_first = CommandParser(max_msg_size=MAX_MSG, max_body_size=MAX_BODY)
    out: list[Command] = []
    parser.use_compiled_loops(compiled)
    try:
        for chunk in chunks:
            fins_first.feed(chunk)
            while True:
                if fins := fins_first.take_fins():
                    out += [Command(b"FIN", (i,), None) for i in fins]
                elif (cmd := fins_first.next_command()) is not None:
                    out.append(cmd)
                else:
                    break
        fins_first.eof()
    except ProtocolError as err:
        return out, (err.code, err.text)
    finally:
        parser.use_compiled_loops(True)
    return out, None


def _unframed(cmd: Command, next_id: list[int]) -> Command:
    """A framed command as the plain parser returns it; checks each frame's ID and header."""
    if cmd.name not in (b"PUB", b"DPUB", b"MPUB"):
        return cmd
    assert isinstance(cmd.body, list)
    bodies = []
    for frame in cmd.body:
        size, frame_type, _ts, attempts = struct.unpack_from(">IiqH", frame)
        check((size, frame_type, attempts) == (len(frame) - 4, 2, 0), "bad frame header")
        check(frame[18:34] == b"%016x" % next_id[0], "IDs out of order")
        next_id[0] += 1
        bodies.append(frame[34:])
    return cmd._replace(body=bodies if cmd.name == b"MPUB" else bodies[0])


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
    for compiled in _COMPILED:
        kind = "compiled" if compiled else "python"
        fins_first = _taking_fins(chunks, compiled)
        check(fins_first == (commands, error), f"take_fins ({kind}) changes the commands")
        framed, framed_error = _framed(chunks, compiled)
        next_id = [0]
        check(
            [_unframed(f, next_id) for f in framed] == commands,
            f"framing ({kind}) changes the commands",
        )
        check(
            framed_error == error,
            f"framing ({kind}) changes the error: {framed_error} vs {error}",
        )
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
