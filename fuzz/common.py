"""Helpers shared by the fuzz targets: deterministic input splitting and the FuzzFailure error."""

from __future__ import annotations

import random


class FuzzFailure(AssertionError):
    """A property a target asserts does not hold."""


def check(condition: bool, what: str) -> None:
    """Raise `FuzzFailure` unless `condition` holds (not `assert`: it must survive -O)."""
    if not condition:
        raise FuzzFailure(what)


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
