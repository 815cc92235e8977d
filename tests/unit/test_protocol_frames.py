"""Server-to-client frames (docs/protocol.md §1.2): layout, and incremental decoding at any
split."""

from __future__ import annotations

import struct
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.protocol import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    OK,
    FrameDecodeError,
    FrameDecoder,
    encode_error,
    encode_frame,
    encode_response,
)
from trionsq.protocol.frames import CLOSE_WAIT_FRAME, HEARTBEAT_FRAME, OK_FRAME


def test_frame_type_values() -> None:
    assert (FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE) == (0, 1, 2)


def test_well_known_payloads() -> None:
    assert (OK, HEARTBEAT, CLOSE_WAIT) == (b"OK", b"_heartbeat_", b"CLOSE_WAIT")


def test_encode_frame_layout() -> None:
    # [4-byte BE size][4-byte BE type][data], size = len(data) + 4
    assert encode_frame(2, b"abc") == b"\x00\x00\x00\x07\x00\x00\x00\x02abc"
    assert encode_frame(0, b"") == b"\x00\x00\x00\x04\x00\x00\x00\x00"
    big = b"x" * 70000
    assert encode_frame(1, big)[:8] == struct.pack(">ii", 70004, 1)


def test_encode_response_and_error() -> None:
    assert encode_response(b"OK") == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    assert encode_error(b"E_INVALID bad") == struct.pack(">ii", 17, 1) + b"E_INVALID bad"
    assert encode_response(b"OK") == OK_FRAME
    assert struct.pack(">ii", 15, 0) + b"_heartbeat_" == HEARTBEAT_FRAME
    assert encode_response(b"CLOSE_WAIT") == CLOSE_WAIT_FRAME


FRAMES = [
    (0, b"OK"),
    (0, b"_heartbeat_"),
    (1, b"E_INVALID cannot FIN in current state"),
    (2, bytes(range(256)) * 3),
    (0, b""),
    (2, b"\x00" * 26),
    (0, b'{"max_rdy_count":2500}'),
]
STREAM = b"".join(encode_frame(t, d) for t, d in FRAMES)


def decode(chunks: list[bytes]) -> list[tuple[int, bytes]]:
    dec = FrameDecoder()
    out: list[tuple[int, bytes]] = []
    for chunk in chunks:
        dec.feed(chunk)
        out += dec.frames()
    assert dec.buffered == 0
    return out


def test_decode_whole() -> None:
    assert decode([STREAM]) == FRAMES


def test_decode_split_in_two_at_every_offset() -> None:
    for i in range(len(STREAM) + 1):
        assert decode([STREAM[:i], STREAM[i:]]) == FRAMES, i


def test_decode_byte_by_byte() -> None:
    assert decode([bytes([b]) for b in STREAM]) == FRAMES


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_decode_random_chunking(data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(STREAM)), max_size=30)))
    bounds = [0, *cuts, len(STREAM)]
    assert decode([STREAM[a:b] for a, b in pairwise(bounds)]) == FRAMES


def test_next_frame_returns_none_until_complete() -> None:
    dec = FrameDecoder()
    frame = encode_frame(2, b"payload")
    for i, b in enumerate(frame[:-1]):
        dec.feed(bytes([b]))
        assert dec.next_frame() is None
        assert dec.buffered == i + 1
    dec.feed(frame[-1:])
    assert dec.next_frame() == (2, b"payload")
    assert dec.next_frame() is None


def test_large_frame_in_many_chunks() -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB
    data = encode_frame(2, payload) + encode_response(b"OK")
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    assert decode(chunks) == [(2, payload), (0, b"OK")]


@pytest.mark.parametrize("size", [0, 3, -1, 2**31 - 1])
def test_invalid_sizes(size: int) -> None:
    dec = FrameDecoder(max_frame_size=1024 * 1024)
    dec.feed(struct.pack(">ii", size, 0))
    with pytest.raises(FrameDecodeError):
        dec.next_frame()


def test_max_frame_size_is_inclusive() -> None:
    dec = FrameDecoder(max_frame_size=10)
    dec.feed(encode_frame(0, b"123456"))  # size 10
    assert dec.next_frame() == (0, b"123456")
    dec.feed(encode_frame(0, b"1234567"))  # size 11
    with pytest.raises(FrameDecodeError):
        dec.next_frame()


def test_invalid_size_detected_from_header_alone() -> None:
    dec = FrameDecoder(max_frame_size=100)
    dec.feed(struct.pack(">ii", 101, 0))
    with pytest.raises(FrameDecodeError):
        dec.next_frame()
