"""CommandParser's memory while a body arrives: what it holds grows with the bytes received,
never with the size declared, whatever the sizes of the reads; a read it is done with is let
go; and a body cut anywhere (around `SMALL_READ` most of all) parses to the same command."""

from __future__ import annotations

import gc
import random
import struct
import sys

import pytest

from trionsq.protocol import Command, CommandParser, ProtocolError
from trionsq.protocol.parser import SMALL_READ

MIB = 1024 * 1024


def size(n: int) -> bytes:
    return struct.pack(">i", n)


def held(parser: CommandParser) -> int:
    """The allocated size of every bytes-like object reachable from `parser` (through lists,
    tuples and dicts), each counted once: what the parser pins, however it keeps it."""
    total = 0
    seen: set[int] = set()
    stack = list(gc.get_referents(parser))
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, bytes | bytearray):
            total += sys.getsizeof(obj)
        elif isinstance(obj, memoryview):
            stack.append(obj.obj)
        elif isinstance(obj, list | tuple | dict):
            stack.extend(obj.values() if isinstance(obj, dict) else obj)
    return total


def drain(parser: CommandParser) -> list[Command]:
    out = []
    while (cmd := parser.next_command()) is not None:
        out.append(cmd)
    return out


def distinct(data: bytes) -> bytes:
    """A new bytes object equal to `data` (as each read from a socket is)."""
    return bytes(bytearray(data))


@pytest.mark.parametrize(
    "line, declared",
    [(b"PUB t", MIB), (b"MPUB t", 5 * MIB), (b"IDENTIFY", 5 * MIB), (b"DPUB t 10", MIB)],
)
def test_a_declared_size_allocates_nothing(line: bytes, declared: int) -> None:
    parser = CommandParser()
    parser.feed(line + b"\n" + size(declared) + b"abc")
    assert drain(parser) == []
    assert held(parser) < 1024
    assert parser.buffered <= 7


@pytest.mark.parametrize("piece", [2, 3, 100, SMALL_READ - 1, SMALL_READ, 10_000, 65_536])
def test_a_body_in_pieces_costs_about_its_bytes(piece: int) -> None:
    """Old behaviour: one object per read, ~17x the bytes for 2-byte reads (each read is a
    bytes object and a list slot); the parser must hold about what was fed, at most the
    bytearray's growth margin (1/8) more."""
    parser = CommandParser()
    parser.feed(b"PUB t\n" + size(MIB))
    assert drain(parser) == []
    fed = 0
    while fed < 200_000:
        parser.feed(distinct(b"x" * piece))
        fed += piece
        assert parser.next_command() is None
    assert parser.buffered == 4 + fed
    assert held(parser) <= fed * 1.15 + 4096


def test_mixed_small_and_large_reads_cost_about_their_bytes() -> None:
    rng = random.Random(7)
    parser = CommandParser()
    parser.feed(b"PUB t\n" + size(MIB))
    fed = 0
    while fed < 300_000:
        n = rng.choice([1, 2, 50, 700, SMALL_READ - 1, SMALL_READ, 20_000])
        parser.feed(distinct(b"y" * n))
        fed += n
        assert parser.next_command() is None
    assert held(parser) <= fed * 1.15 + 4096


def test_only_the_unconsumed_tail_of_a_read_is_kept_while_a_body_is_awaited() -> None:
    parser = CommandParser()
    parser.feed(b"NOP\n" * 10_000 + b"PUB t\n" + size(MIB) + b"x" * 10)
    assert len(drain(parser)) == 10_000
    assert parser.buffered == 14
    assert held(parser) < 1024  # not the 40 KB read


def test_a_consumed_read_is_let_go() -> None:
    parser = CommandParser()
    parser.feed(b"NOP\n" * 10_000)
    assert len(drain(parser)) == 10_000
    assert held(parser) < 256


def test_an_mpub_awaiting_its_next_message_keeps_only_that_message() -> None:
    parser = CommandParser()
    bodies = [bytes([65 + i]) * 1000 for i in range(20)]
    wire = b"MPUB t\n" + size(5 * MIB) + size(1000) + b"".join(size(1000) + b for b in bodies)
    parser.feed(wire[:-500])  # the last message is half there
    assert drain(parser) == []
    # the 19 complete messages (kept as bodies) and the half message, not the whole read twice
    assert held(parser) < 19 * 1100 + 600 + 1024


def _cuts(data: bytes, pieces: list[int]) -> list[bytes]:
    out, pos, i = [], 0, 0
    while pos < len(data):
        n = pieces[i % len(pieces)]
        out.append(distinct(data[pos : pos + n]))
        pos += n
        i += 1
    return out


def _parse(chunks: list[bytes]) -> tuple[list[Command], str | None]:
    parser = CommandParser()
    out: list[Command] = []
    for chunk in chunks:
        parser.feed(chunk)
        try:
            out += drain(parser)
        except ProtocolError as err:
            return out, err.text
    assert parser.buffered == 0
    return out, None


def _stream() -> bytes:
    rng = random.Random(11)
    body = rng.randbytes(3 * SMALL_READ + 123)
    messages = [rng.randbytes(n) for n in (1, SMALL_READ - 3, 2 * SMALL_READ, 77)]
    mpub = size(len(messages)) + b"".join(size(len(m)) + m for m in messages)
    return b"".join(
        [
            b"PUB t\n" + size(len(body)) + body,
            b"NOP\n",
            b"MPUB t\n" + size(len(mpub)) + mpub,
            b"IDENTIFY\n" + size(2) + b"{}",
            b"PUB t\n" + size(1) + b"z",
            b"DPUB t 5\n" + size(SMALL_READ) + body[:SMALL_READ],
            b"FIN 0123456789abcdef\n",
        ]
    )


@pytest.mark.parametrize(
    "pieces",
    [
        [1],
        [2],
        [3, 1],
        [SMALL_READ - 1],
        [SMALL_READ],
        [SMALL_READ + 1],
        [1, SMALL_READ, 2, SMALL_READ - 1],
        [65_536],
        [7, 5000, 13, 4095, 4097],
    ],
)
def test_a_stream_cut_into_any_reads_parses_the_same(pieces: list[int]) -> None:
    data = _stream()
    whole, error = _parse([data])
    assert error is None and len(whole) == 7
    assert _parse(_cuts(data, pieces)) == (whole, None)


def test_a_stream_cut_at_every_boundary_in_two_parses_the_same() -> None:
    data = _stream()
    whole = _parse([data])
    for cut in range(0, len(data), 97):
        assert _parse([data[:cut], data[cut:]]) == whole, cut
