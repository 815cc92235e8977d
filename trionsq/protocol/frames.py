"""Server-to-client frames: ``[4-byte size][4-byte frame type][data]`` (docs/protocol.md §1.2).

Encoders for the server, and an incremental `FrameDecoder` for clients.
"""

from __future__ import annotations

import struct

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2

OK = b"OK"
HEARTBEAT = b"_heartbeat_"
CLOSE_WAIT = b"CLOSE_WAIT"

_FRAME_HEADER = struct.Struct(">Ii")


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """``[size = len(data) + 4][frame_type][data]``."""
    return _FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    """A response frame (type 0)."""
    return _FRAME_HEADER.pack(len(data) + 4, FRAME_TYPE_RESPONSE) + data


def encode_error(data: bytes) -> bytes:
    """An error frame (type 1); `data` is ``b"<E_CODE> <text>"``."""
    return _FRAME_HEADER.pack(len(data) + 4, FRAME_TYPE_ERROR) + data


#: Pre-encoded frames the server sends often.
OK_FRAME = encode_response(OK)
HEARTBEAT_FRAME = encode_response(HEARTBEAT)
CLOSE_WAIT_FRAME = encode_response(CLOSE_WAIT)


class FrameDecodeError(ValueError):
    """The byte stream is not a valid sequence of frames."""


class FrameDecoder:
    """Incremental frame decoder: `feed` bytes, then call `next_frame` until it returns None.

    Each frame is returned as ``(frame_type, data)``. A frame still arriving is collected in
    chunks and joined once it is complete, so a large frame costs no quadratic copying.
    """

    __slots__ = ("_buf", "_chunks", "_chunks_len", "_max_size", "_need", "_pos")

    def __init__(self, max_frame_size: int = 64 * 1024 * 1024) -> None:
        self._buf = b""
        self._pos = 0
        self._max_size = max_frame_size
        # Bytes received while waiting for at least `_need` bytes after `_pos`.
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        self._need = 0

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._need:
            self._chunks.append(data)
            self._chunks_len += len(data)
            if len(self._buf) - self._pos + self._chunks_len < self._need:
                return
            self._buf = b"".join((self._buf[self._pos :], *self._chunks))
            self._chunks.clear()
            self._chunks_len = 0
            self._need = 0
        elif self._pos < len(self._buf):
            self._buf = self._buf[self._pos :] + data
        else:
            self._buf = data
        self._pos = 0

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next complete frame, or None until more bytes are fed."""
        if self._need:
            return None
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 8:
            return None
        size, frame_type = _FRAME_HEADER.unpack_from(buf, pos)
        if size < 4 or size > self._max_size:
            raise FrameDecodeError(f"invalid frame size {size}")
        end = pos + 4 + size
        if len(buf) < end:
            self._need = 4 + size
            return None
        self._pos = end
        return frame_type, buf[pos + 8 : end]

    def frames(self) -> list[tuple[int, bytes]]:
        """Every complete frame buffered so far."""
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned in a frame."""
        return len(self._buf) - self._pos + self._chunks_len
