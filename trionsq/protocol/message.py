"""NSQ messages: ``[8-byte ns timestamp][2-byte attempts][16-byte hex ID][body]`` (§1.5).

The daemon keeps each queued message as one immutable `bytes` already framed for the wire
(`encode_message_frame`): the 8-byte frame header, then the message payload. Such a `bytes`
is not tracked by the garbage collector, costs no object per message, and is written to a
client with one copy, the attempts field patched in place in the output buffer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .frames import FRAME_TYPE_MESSAGE

#: Size of timestamp + attempts + ID, the smallest valid message payload.
MESSAGE_HEADER_SIZE = 26
ID_SIZE = 16

_FRAMED_HEADER = struct.Struct(">IiqH16s")
_FRAME_HEAD = struct.Struct(">IiqH")  # frame size, frame type, timestamp, attempts
_PAYLOAD_HEADER = struct.Struct(">qH16s")
#: Offsets within a framed message.
FRAMED_ATTEMPTS_OFFSET = 16
FRAMED_ID_OFFSET = 18
FRAMED_BODY_OFFSET = 34


@dataclass(slots=True)
class Message:
    """A decoded message, as a client sees it."""

    id: bytes
    timestamp: int
    attempts: int
    body: bytes


def encode_message(message_id: bytes, timestamp: int, attempts: int, body: bytes) -> bytes:
    """The message payload (also the on-disk record payload)."""
    return _PAYLOAD_HEADER.pack(timestamp, attempts, message_id) + body


def decode_message(payload: bytes) -> Message:
    if len(payload) < MESSAGE_HEADER_SIZE:
        raise ValueError(f"message payload too short ({len(payload)} < {MESSAGE_HEADER_SIZE})")
    timestamp, attempts, message_id = _PAYLOAD_HEADER.unpack_from(payload)
    return Message(message_id, timestamp, attempts, payload[MESSAGE_HEADER_SIZE:])


def encode_message_frame(message_id: bytes, timestamp: int, attempts: int, body: bytes) -> bytes:
    """A whole message frame: frame header + payload."""
    return (
        _FRAMED_HEADER.pack(
            len(body) + MESSAGE_HEADER_SIZE + 4, FRAME_TYPE_MESSAGE, timestamp, attempts, message_id
        )
        + body
    )


def encode_new_frames(ids: list[bytes], timestamp: int, bodies: list[bytes]) -> list[bytes]:
    """The frames of newly published messages (attempts 0), one ID per body.

    The publish hot path: every header before the ID is the same for bodies of one size, so
    it is packed once per size in the batch, and each frame costs two concatenations."""
    heads: dict[int, bytes] = {}
    frames: list[bytes] = []
    append = frames.append
    pack = _FRAME_HEAD.pack
    for message_id, body in zip(ids, bodies, strict=True):
        size = len(body)
        head = heads.get(size)
        if head is None:
            head = heads[size] = pack(size + 30, FRAME_TYPE_MESSAGE, timestamp, 0)
        append(head + message_id + body)
    return frames


def framed_id(frame: bytes) -> bytes:
    return frame[FRAMED_ID_OFFSET:FRAMED_BODY_OFFSET]


def framed_attempts(frame: bytes) -> int:
    return (frame[FRAMED_ATTEMPTS_OFFSET] << 8) | frame[FRAMED_ATTEMPTS_OFFSET + 1]


def framed_timestamp(frame: bytes) -> int:
    return int.from_bytes(frame[8:16], "big", signed=True)


def framed_body(frame: bytes) -> bytes:
    return frame[FRAMED_BODY_OFFSET:]


def with_attempts(frame: bytes, attempts: int) -> bytes:
    """A copy of a framed message with its attempts field set (wraps at 65536 like NSQ)."""
    attempts &= 0xFFFF
    return b"".join((frame[:16], bytes((attempts >> 8, attempts & 0xFF)), frame[18:]))
