"""Message payloads and pre-framed messages (docs/protocol.md §1.5)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol import (
    FRAME_TYPE_MESSAGE,
    FrameDecoder,
    Message,
    decode_message,
    encode_message,
    encode_message_frame,
)
from trionsq.protocol.message import (
    MESSAGE_HEADER_SIZE,
    framed_attempts,
    framed_body,
    framed_id,
    framed_timestamp,
    with_attempts,
)

MID = b"0123456789abcdef"
TS = 1_700_000_000_123_456_789


def test_payload_layout() -> None:
    # [8-byte int64 ns timestamp][2-byte uint16 attempts][16-byte ID][body], big-endian
    payload = encode_message(MID, TS, 3, b"body")
    assert payload == struct.pack(">qH", TS, 3) + MID + b"body"
    assert MESSAGE_HEADER_SIZE == 26
    assert len(payload) == 26 + 4


def test_decode() -> None:
    payload = struct.pack(">qH", TS, 65535) + MID + b"hello"
    assert decode_message(payload) == Message(id=MID, timestamp=TS, attempts=65535, body=b"hello")


@given(
    st.binary(min_size=16, max_size=16),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 65535),
    st.binary(max_size=200),
)
def test_roundtrip(mid: bytes, ts: int, attempts: int, body: bytes) -> None:
    assert decode_message(encode_message(mid, ts, attempts, body)) == Message(
        mid, ts, attempts, body
    )


def test_minimum_length_is_26() -> None:
    assert decode_message(b"\x00" * 26) == Message(b"\x00" * 16, 0, 0, b"")
    with pytest.raises(ValueError):
        decode_message(b"\x00" * 25)
    with pytest.raises(ValueError):
        decode_message(b"")


def test_message_frame_layout() -> None:
    frame = encode_message_frame(MID, TS, 1, b"abc")
    payload = encode_message(MID, TS, 1, b"abc")
    # size counts the 4-byte frame type too; type 2 is a message.
    assert frame == struct.pack(">ii", len(payload) + 4, 2) + payload
    assert struct.unpack(">ii", frame[:8]) == (26 + 3 + 4, FRAME_TYPE_MESSAGE)


def test_message_frame_decodes_through_frame_decoder() -> None:
    frame = encode_message_frame(MID, TS, 7, b"x" * 1000)
    dec = FrameDecoder()
    dec.feed(frame)
    frame_type, data = dec.frames()[0]
    assert frame_type == FRAME_TYPE_MESSAGE
    assert decode_message(data) == Message(MID, TS, 7, b"x" * 1000)


def test_framed_accessors() -> None:
    frame = encode_message_frame(MID, -5, 513, b"the body")
    assert framed_id(frame) == MID
    assert framed_timestamp(frame) == -5
    assert framed_attempts(frame) == 513
    assert framed_body(frame) == b"the body"


def test_with_attempts() -> None:
    frame = encode_message_frame(MID, TS, 1, b"b")
    again = with_attempts(frame, 2)
    assert again == encode_message_frame(MID, TS, 2, b"b")
    assert frame == encode_message_frame(MID, TS, 1, b"b")  # original untouched
    assert framed_attempts(with_attempts(frame, 65535)) == 65535
    # uint16: wraps at 65536 like nsqd's counter.
    assert framed_attempts(with_attempts(frame, 65536)) == 0
    assert framed_attempts(with_attempts(frame, 65537)) == 1
    assert len(with_attempts(frame, 70000)) == len(frame)
