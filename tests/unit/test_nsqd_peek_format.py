"""nsqd's peek helpers (trionsq/nsqd/peek.py): the n soonest of a deferred heap in order, a
message as peek shows it (text or base64 body), and the ``n`` parameter."""

from __future__ import annotations

import base64
import heapq
import random

import pytest

from trionsq.nsqd.peek import _heap_smallest, message_json, parse_n
from trionsq.protocol.message import encode_message_frame


def test_heap_smallest_is_the_sorted_head_of_any_heap() -> None:
    rng = random.Random(7)
    for size in (0, 1, 2, 3, 10, 257):
        heap: list[tuple[float, int, bytes]] = []
        for seq in range(size):
            heapq.heappush(heap, (rng.choice([1.0, 2.0, rng.random() * 100]), seq, b""))
        before = list(heap)
        for n in (1, 2, 5, 300):
            assert _heap_smallest(heap, n) == sorted(heap)[:n]
        assert heap == before  # read in place, never popped


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (b"", "text"),
        (b"plain", "text"),
        ("d\u00e9j\u00e0 vu \u2713".encode(), "text"),
        (b"tab\tnewline\ncr\r", "text"),
        (b"nul\x00", "base64"),
        (b"esc\x1b[0m", "base64"),
        (b"\xff\xfe", "base64"),
        ("zero\u200bwidth".encode(), "base64"),  # a format character: not printable
    ],
)
def test_message_json_body_is_text_only_when_printable(body: bytes, encoding: str) -> None:
    frame = encode_message_frame(b"0123456789abcdef", 1_700_000_000_123_456_789, 3, body)
    shown = message_json(frame, "memory")
    assert shown == {
        "id": "0123456789abcdef",
        "timestamp": 1_700_000_000_123_456_789,
        "attempts": 3,
        "body": body.decode() if encoding == "text" else base64.b64encode(body).decode(),
        "body_encoding": encoding,
        "body_size": len(body),
        "queue": "memory",
    }
    assert message_json(frame, "deferred", 42)["deferred_until"] == 42


@pytest.mark.parametrize(
    ("raw", "n"),
    [
        (None, 10),
        ("1", 1),
        ("1000", 1000),
        ("0", None),
        ("1001", None),
        ("", None),
        ("-1", None),
        ("+5", None),
        ("5x", None),
        ("\u00b2", None),
        ("\u0661", None),
    ],
)
def test_parse_n(raw: str | None, n: int | None) -> None:
    assert parse_n(raw) == n
