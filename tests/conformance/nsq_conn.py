"""A small blocking NSQ V2 client for the conformance suite: raw commands in, frames out.

It speaks only what the tests need, encodes with `trionsq.protocol` and never hides a
server reply: every `expect_*` helper fails the test with what actually arrived.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import zlib
from collections import deque
from typing import Any

from trionsq.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    Message,
    decode_message,
    encode_command,
)
from trionsq.protocol import commands as _cmd

# ConnectionClosed is re-exported: tests import it from here
from .blocking_socket import ConnectionClosed as ConnectionClosed
from .blocking_socket import recv_before

#: Default time to wait for a frame the test expects.
DEFAULT_TIMEOUT = 5.0

_FRAME_NAMES = {FRAME_TYPE_RESPONSE: "response", FRAME_TYPE_ERROR: "error"}


def describe(frame: tuple[int, bytes]) -> str:
    frame_type, data = frame
    if frame_type == FRAME_TYPE_MESSAGE:
        try:
            msg = decode_message(data)
        except ValueError:
            return f"malformed message frame {data[:60]!r}"
        return f"message id={msg.id!r} attempts={msg.attempts} body={msg.body[:40]!r}"
    name = _FRAME_NAMES.get(frame_type, f"type-{frame_type}")
    return f"{name} frame {data[:200]!r}"


class NSQConn:
    """One TCP connection to nsqd, magic already sent.

    Heartbeat response frames (`_heartbeat_`) are skipped by `read_frame` and answered with
    NOP when `answer_heartbeats` is true; `read_raw_frame` returns them. Message frames that
    arrive while a response or an error is awaited are kept and handed out by
    `read_message` first.
    """

    def __init__(
        self,
        address: tuple[str, int],
        *,
        magic: bytes | None = MAGIC_V2,
        timeout: float = DEFAULT_TIMEOUT,
        answer_heartbeats: bool = True,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.answer_heartbeats = answer_heartbeats
        self.heartbeats = 0
        self.closed_by_server = False
        self.pending: deque[Message] = deque()
        self._decoder = FrameDecoder()
        self._inflater: Any = None
        self._deflater: Any = None
        self._snappy: Any = None
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if magic is not None:
            self.send(magic)

    # -- sending ---------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Send bytes; a server that already closed (after a fatal error) is not an error
        here: the test reads the error frame and the close next."""
        if self._deflater is not None:
            data = self._deflater.compress(data) + self._deflater.flush(zlib.Z_SYNC_FLUSH)
        elif self._snappy is not None:
            data = self._snappy.compress(data)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def command(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        """Send a raw (possibly malformed) command."""
        self.send(encode_command(name, *params, body=body))

    def identify(self, **fields: Any) -> None:
        self.send(_cmd.identify(fields))

    def negotiate(self, **fields: Any) -> dict[str, Any]:
        """IDENTIFY with feature_negotiation and return the JSON reply."""
        fields.setdefault("feature_negotiation", True)
        self.identify(**fields)
        return self.expect_json()

    def sub(self, topic: str, channel: str) -> None:
        """SUB and expect OK."""
        self.send(_cmd.sub(topic, channel))
        self.expect_response(b"OK")

    def pub(self, topic: str, body: bytes) -> None:
        """PUB and expect OK."""
        self.send(_cmd.pub(topic, body))
        self.expect_response(b"OK")

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        """MPUB and expect OK."""
        self.send(_cmd.mpub(topic, bodies))
        self.expect_response(b"OK")

    def dpub(self, topic: str, defer_ms: int, body: bytes) -> None:
        """DPUB and expect OK."""
        self.send(_cmd.dpub(topic, defer_ms, body))
        self.expect_response(b"OK")

    def rdy(self, count: int) -> None:
        self.send(_cmd.rdy(count))

    def fin(self, message_id: bytes) -> None:
        self.send(_cmd.fin(message_id))

    def req(self, message_id: bytes, timeout_ms: int) -> None:
        self.send(_cmd.req(message_id, timeout_ms))

    def touch(self, message_id: bytes) -> None:
        self.send(_cmd.touch(message_id))

    def nop(self) -> None:
        self.send(_cmd.nop())

    def cls(self) -> None:
        self.send(_cmd.cls())

    def auth(self, secret: bytes) -> None:
        self.send(_cmd.auth(secret))

    # -- receiving -------------------------------------------------------------------

    def _recv(self, deadline: float) -> None:
        try:
            data = recv_before(self.sock, deadline, 262144)
        except ConnectionClosed:
            self.closed_by_server = True
            raise
        if self._inflater is not None:
            data = self._inflater.decompress(data)
        self._decoder.feed(data)

    def read_raw_frame(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next frame, heartbeats included. Raises TimeoutError or ConnectionClosed."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                return frame
            self._recv(deadline)

    def read_frame(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next frame that is not a heartbeat."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self.read_raw_frame(max(0.0, deadline - time.monotonic()))
            if frame == (FRAME_TYPE_RESPONSE, HEARTBEAT):
                self.heartbeats += 1
                if self.answer_heartbeats:
                    self.nop()
                continue
            return frame

    def _read_reply(self, what: str, timeout: float | None) -> tuple[int, bytes]:
        """The next response or error frame, keeping messages that arrive first."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise AssertionError(f"expected {what}, got nothing (timeout)") from None
            except ConnectionClosed as exc:
                raise AssertionError(f"expected {what}, connection closed ({exc})") from None
            if frame[0] == FRAME_TYPE_MESSAGE:
                self.pending.append(decode_message(frame[1]))
                continue
            return frame

    def expect_response(self, expected: bytes, timeout: float | None = None) -> None:
        frame = self._read_reply(f"response {expected!r}", timeout)
        assert frame == (FRAME_TYPE_RESPONSE, expected), (
            f"expected response {expected!r}, got {describe(frame)}"
        )

    def expect_json(self, timeout: float | None = None) -> dict[str, Any]:
        frame = self._read_reply("JSON response", timeout)
        assert frame[0] == FRAME_TYPE_RESPONSE, f"expected JSON response, got {describe(frame)}"
        try:
            value = json.loads(frame[1])
        except ValueError:
            raise AssertionError(f"expected JSON response, got {describe(frame)}") from None
        assert isinstance(value, dict), f"expected a JSON object, got {value!r}"
        return value

    def expect_error(self, code: str, text: str | None = None, timeout: float | None = None) -> str:
        """Expect an error frame with `code`; returns the text after the code (and checks it
        equals `text` when given)."""
        frame = self._read_reply(f"error {code}", timeout)
        assert frame[0] == FRAME_TYPE_ERROR, f"expected error {code}, got {describe(frame)}"
        data = frame[1].decode("utf-8", "replace")
        got_code, _, got_text = data.partition(" ")
        assert got_code == code, f"expected error {code}, got {data!r}"
        if text is not None:
            assert got_text == text, f"error {code}: expected text {text!r}, got {got_text!r}"
        return got_text

    def expect_fatal(self, code: str, text: str | None = None) -> str:
        """Expect an error frame and then the server closing the connection."""
        got = self.expect_error(code, text)
        self.expect_closed()
        return got

    def read_message(self, timeout: float | None = None) -> Message:
        if self.pending:
            return self.pending.popleft()
        try:
            frame = self.read_frame(timeout)
        except TimeoutError:
            raise AssertionError("expected a message, got nothing (timeout)") from None
        except ConnectionClosed as exc:
            raise AssertionError(f"expected a message, connection closed ({exc})") from None
        assert frame[0] == FRAME_TYPE_MESSAGE, f"expected a message, got {describe(frame)}"
        return decode_message(frame[1])

    def read_messages(self, n: int, timeout: float | None = None) -> list[Message]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        out: list[Message] = []
        while len(out) < n:
            try:
                out.append(self.read_message(max(0.0, deadline - time.monotonic())))
            except AssertionError as exc:
                raise AssertionError(f"got {len(out)} of {n} messages: {exc}") from None
        return out

    def try_read_message(self, timeout: float) -> Message | None:
        """A message if one arrives within `timeout`, else None (other frames fail)."""
        if self.pending:
            return self.pending.popleft()
        try:
            frame = self.read_frame(timeout)
        except TimeoutError:
            return None
        except ConnectionClosed as exc:
            raise AssertionError(f"connection closed while waiting ({exc})") from None
        assert frame[0] == FRAME_TYPE_MESSAGE, f"expected a message, got {describe(frame)}"
        return decode_message(frame[1])

    def expect_closed(self, timeout: float | None = None) -> None:
        """Expect the server to close the connection, sending nothing more first."""
        if self.closed_by_server and not self._decoder.buffered:
            return
        try:
            frame = self.read_frame(timeout)
        except TimeoutError:
            raise AssertionError("expected the server to close the connection") from None
        except ConnectionClosed:
            return
        raise AssertionError(f"expected the connection closed, got {describe(frame)}")

    def expect_nothing(self, seconds: float) -> None:
        """Expect no frame (heartbeats aside) for `seconds`, and the connection open."""
        assert not self.pending, f"unexpected message {self.pending[0]!r}"
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                frame = self.read_frame(remaining)
            except TimeoutError:
                return
            except ConnectionClosed as exc:
                raise AssertionError(f"expected nothing, connection closed ({exc})") from None
            raise AssertionError(f"expected nothing, got {describe(frame)}")

    # -- compression -----------------------------------------------------------------

    def read_frame_exact(self, timeout: float | None = None) -> tuple[int, bytes]:
        """Read one frame without reading any byte past it (for the IDENTIFY reply that
        precedes a compressed stream)."""
        assert not self._decoder.buffered, "bytes already buffered"
        header = self._recv_exact(8, timeout)
        size, frame_type = struct.unpack(">Ii", header)
        return frame_type, self._recv_exact(size - 4, timeout)

    def _recv_exact(self, n: int, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        buf = b""
        while len(buf) < n:
            buf += recv_before(self.sock, deadline, n - len(buf))
        return buf

    def recv_exact(self, n: int, timeout: float | None = None) -> bytes:
        """Exactly `n` raw bytes from the socket (nothing must be buffered)."""
        assert not self._decoder.buffered, "bytes already buffered"
        return self._recv_exact(n, timeout)

    def start_deflate(self, level: int) -> None:
        """From now on, both directions are raw DEFLATE streams (docs/protocol.md §1.3 IDENTIFY)."""
        self._inflater = zlib.decompressobj(-15)
        self._deflater = zlib.compressobj(level, zlib.DEFLATED, -15)

    def start_snappy(self) -> None:
        """From now on, both directions are in the snappy framing format (python-snappy's
        stream classes, which interoperate with Go's golang/snappy)."""
        import snappy

        self._inflater = snappy.StreamDecompressor()
        self._snappy = snappy.StreamCompressor()

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> NSQConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect(conns: list[NSQConn], n: int, timeout: float = DEFAULT_TIMEOUT) -> list[list[Message]]:
    """Read messages from several connections until `n` arrived in total; returns one list
    per connection."""
    out: list[list[Message]] = [[] for _ in conns]
    deadline = time.monotonic() + timeout
    while sum(map(len, out)) < n:
        if time.monotonic() > deadline:
            got = [len(x) for x in out]
            raise AssertionError(f"expected {n} messages in total, got {got}")
        for i, conn in enumerate(conns):
            msg = conn.try_read_message(0.02)
            while msg is not None:
                out[i].append(msg)
                msg = conn.try_read_message(0.0)
    return out
