"""Helpers shared by the fuzz targets: deterministic input splitting, driving a command parser
over split input, and the FuzzFailure error."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Protocol, TypeVar

from trionsq.protocol.errors import ProtocolError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class StreamParser(Protocol[T_co]):
    """A sans-IO command parser: V2's `CommandParser` or lookup V1's `LookupParser`."""

    @property
    def buffered(self) -> int: ...

    def feed(self, data: bytes) -> None: ...
    def next_command(self) -> T_co | None: ...
    def eof(self) -> None: ...


class FuzzFailure(AssertionError):
    """A property a target asserts does not hold."""


def check(condition: bool, what: str) -> None:
    """Raise `FuzzFailure` unless `condition` holds (not `assert`: it must survive -O)."""
    if not condition:
        raise FuzzFailure(what)


def drive_parser(
    parser: StreamParser[T], chunks: Iterable[bytes]
) -> tuple[list[T], tuple[str, str] | None]:
    """Feed `chunks` to `parser`, taking every command after each; then EOF. The commands and
    the ``(code, text)`` of the `ProtocolError` that ended the stream, if any. Checks that only
    ``E_`` codes are raised and that the parser never buffers more than it was fed."""
    out: list[T] = []
    fed = 0
    try:
        for chunk in chunks:
            parser.feed(chunk)
            fed += len(chunk)
            while (cmd := parser.next_command()) is not None:
                out.append(cmd)
            check(parser.buffered <= fed, "buffered more than fed")
        parser.eof()
    except ProtocolError as err:
        check(err.code.startswith("E_"), f"error code {err.code!r}")
        return out, (err.code, err.text)
    return out, None


def split_input(data: bytes) -> tuple[int, list[bytes]]:
    """``(selector, chunks)``: the first byte selects options and the chunking of the rest, so
    one input means one exact sequence of writes. Selector 0 feeds everything at once, 1 byte by
    byte, others pseudo-random chunk sizes seeded by the selector."""
    if not data:
        return 0, []
    selector, rest = data[0], data[1:]
    if selector % 8 == 0 or not rest:
        return selector, [rest] if rest else []
    if selector % 8 == 1:
        return selector, [rest[i : i + 1] for i in range(len(rest))]
    rng = random.Random(selector)
    chunks = []
    i = 0
    while i < len(rest):
        n = rng.randint(1, 1 + (selector % 32) * 2)
        chunks.append(rest[i : i + n])
        i += n
    return selector, chunks
