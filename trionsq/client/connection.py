"""One V2 connection to nsqd: magic, IDENTIFY, the optional TLS / snappy / deflate upgrade and
AUTH, then a reader task (frames decoded per `receive_some` batch, heartbeats answered with
NOP, responses matched in order to outstanding commands) and a writer task that sends every
buffered command in one `send_all`. It runs under asyncio or Trio (anyio), its streams from
`streams.py`."""

from __future__ import annotations

import json
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import trio

from ..goerrors import address_problem, dial_error, errno_text
from ..net.transport import DeflateStream, SnappyStream
from ..protocol import commands
from ..protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    FrameDecodeError,
    FrameDecoder,
)
from .errors import (
    ClientError,
    ConnectionClosedError,
    NotConnectedError,
    NSQError,
    ProtocolError,
    TLSError,
)
from .library import ANYIO, Event, Library, running
from .options import ConnectionOptions
from .streams import STREAM_ERRORS, AnyioStream, PrefixedStream, open_stream, start_tls

__all__ = ["Connection", "Reply", "open_stream", "parse_address"]

log = logging.getLogger("trionsq.client")

_RECEIVE_SIZE = 65536
_HEADER = struct.Struct(">Ii")
_NOP = commands.nop()
#: Non-fatal errors answering FIN/REQ/TOUCH: they match no outstanding command.
_UNMATCHED_ERRORS = (b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED")

#: What ends a running connection without being a bug: the connection or nsqd failed.
_CONNECTION_ENDED: tuple[type[BaseException], ...] = (
    *STREAM_ERRORS,
    ClientError,
    FrameDecodeError,
)

MessagesCallback = Callable[["Connection", list[bytes]], None]


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"`` or ``(host, port)`` to ``(host, port)``; ValueError, in Go's words
    (``address foo: missing port in address``), when there is no usable port."""
    if isinstance(address, tuple):
        return address
    problem = address_problem(address)
    if problem is not None:
        raise ValueError(problem)
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Reply:
    """The outcome of one command that nsqd answers: a response payload or an exception."""

    __slots__ = ("error", "event", "value")

    def __init__(self, new_event: Callable[[], Event] = anyio.Event) -> None:
        self.event = new_event()
        self.value: bytes | None = None
        self.error: BaseException | None = None

    def set(self, value: bytes) -> None:
        self.value = value
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()

    async def wait(self) -> bytes:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


async def _read_frame(stream: trio.abc.Stream, buf: bytes) -> tuple[int, bytes, bytes]:
    """One frame during the handshake: ``(type, data, bytes left over)``."""
    while True:
        if len(buf) >= 8:
            size, frame_type = _HEADER.unpack_from(buf)
            if len(buf) >= 4 + size:
                return frame_type, buf[8 : 4 + size], buf[4 + size :]
        data = await stream.receive_some(_RECEIVE_SIZE)
        if not data:
            raise EOFError
        buf += bytes(data)


class Connection:
    """A connection to one nsqd. Run `run` in a nursery (``await nursery.start(conn.run)``):
    it returns from `start` once the handshake is done, and serves until the connection ends,
    then fails outstanding commands with ConnectionClosedError. A failed handshake raises
    `NotConnectedError` (refused, reset, EOF, timed out), `TLSError`, `ProtocolError` (a reply
    outside the protocol) or `NSQError` (an error frame, e.g. ``E_AUTH_FAILED``).

    `send` buffers a command without waiting; `request` sends one nsqd answers and waits for
    its response. Commands are written in order.
    """

    def __init__(
        self,
        address: str | tuple[str, int],
        options: ConnectionOptions | None = None,
        on_messages: MessagesCallback | None = None,
    ) -> None:
        self.host, self.port = parse_address(address)
        self.address = f"{self.host}:{self.port}"
        self.options = options or ConnectionOptions()
        self.on_messages = on_messages
        self.identify_response: dict[str, Any] = {}
        self.auth_response: dict[str, Any] | None = None
        self.max_rdy_count = 2500
        self.closed = False
        self.closed_event = anyio.Event()
        self.close_reason: BaseException | None = None
        #: Consumer bookkeeping: RDY last sent, messages not yet FIN'd/REQ'd, last delivery.
        self.rdy = 0
        self.in_flight = 0
        self.last_message_time = 0.0
        #: E_FIN_FAILED answers so far: FINs nsqd did not apply (the message had timed out,
        #: or was not in flight here), so it may deliver those messages again.
        self.fin_failures = 0
        self.rdy_time = 0.0
        self._stream: trio.abc.Stream | None = None
        self._out: list[bytes] = []
        #: The primitives of the library running the connection (known once `run` starts).
        self._library: Library = ANYIO
        self._out_lot = ANYIO.new_parking_lot()
        self._replies: deque[Reply] = deque()
        self._leftover = b""
        self._sending = False
        #: The socket stream `send(now=True)` writes to directly (plain TCP only).
        self._direct: AnyioStream | None = None
        #: Reads so far (what the heartbeat watchdog watches).
        self._receives = 0
        self._cancel: anyio.CancelScope | None = None
        #: The handshake step under way (what a failure names).
        self._step = "dial"

    def __repr__(self) -> str:
        return f"<Connection {self.address}{' closed' if self.closed else ''}>"

    @property
    def outstanding(self) -> int:
        """Commands sent (or buffered) whose response has not arrived yet."""
        return len(self._replies)

    def oldest_reply(self) -> Reply | None:
        return self._replies[0] if self._replies else None

    # -- handshake ------------------------------------------------------------------------

    async def _handshake(self) -> None:
        opts = self.options
        self._step = "dial"
        stream: trio.abc.Stream = await open_stream(self.host, self.port)
        self._stream = stream
        self._step = "IDENTIFY"
        await stream.send_all(commands.MAGIC_V2 + commands.identify(opts.identify_body()))
        frame_type, data, left = await _read_frame(stream, b"")
        if frame_type == FRAME_TYPE_ERROR:
            raise NSQError.from_frame(data)
        if data == b"OK":  # an nsqd without feature negotiation
            self._leftover = left
            return
        info = self._identify_reply(data)
        if info.get("tls_v1"):
            self._step = "TLS"
            try:
                context = opts.ssl_context_for_client()
            except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
                raise TLSError(f"{self.address}: TLS files cannot be used - {err}") from err
            try:
                stream = await start_tls(stream, context, opts.tls_server_hostname or self.host)
            except (anyio.BrokenResourceError, anyio.EndOfStream) as err:
                reason = err.__cause__ or "connection lost"
                raise TLSError(f"{self.address}: TLS handshake failed - {reason}") from err
            self._stream = stream
            left = await self._expect_ok(stream, left)
        self._step = "compression upgrade"
        if info.get("snappy"):
            below = PrefixedStream(stream, left) if left else stream
            stream = SnappyStream(below, self._library.checkpoint)
            left = await self._expect_ok(stream, b"")
        elif info.get("deflate"):
            level = int(info.get("deflate_level") or opts.deflate_level)
            below = PrefixedStream(stream, left) if left else stream
            stream = DeflateStream(below, level, self._library.checkpoint)
            left = await self._expect_ok(stream, b"")
        self._stream = stream
        if info.get("auth_required"):
            if opts.auth_secret is None:
                raise ClientError("nsqd requires AUTH and no auth_secret was given")
            self._step = "AUTH"
            secret = opts.auth_secret
            await stream.send_all(
                commands.auth(secret.encode() if isinstance(secret, str) else secret)
            )
            frame_type, data, left = await _read_frame(stream, left)
            if frame_type == FRAME_TYPE_ERROR:
                raise NSQError.from_frame(data)
            try:
                self.auth_response = json.loads(data)
            except ValueError:
                raise ProtocolError(f"{self.address}: bad AUTH response {data[:100]!r}") from None
        self._leftover = left

    def _identify_reply(self, data: bytes) -> dict[str, Any]:
        """The negotiated features of an IDENTIFY reply; `ProtocolError` if it is not NSQ's
        JSON object."""
        try:
            info = json.loads(data)
            if not isinstance(info, dict):
                raise ValueError("not an object")
            self.max_rdy_count = int(info.get("max_rdy_count", 2500))
        except (ValueError, TypeError):
            raise ProtocolError(f"{self.address}: bad IDENTIFY response {data[:100]!r}") from None
        self.identify_response = info
        return info

    async def _expect_ok(self, stream: trio.abc.Stream, buf: bytes) -> bytes:
        frame_type, data, left = await _read_frame(stream, buf)
        if frame_type == FRAME_TYPE_ERROR:
            raise NSQError.from_frame(data)
        if data != b"OK":
            raise ProtocolError(f"{self.address}: unexpected {self._step} response {data[:100]!r}")
        return left

    def _handshake_error(self, exc: BaseException) -> ClientError | None:
        """The `ClientError` a failed handshake raises for `exc` (None: `exc` is one already,
        or is not a connection failure, such as a cancellation)."""
        if isinstance(exc, TimeoutError) and exc.errno is None:  # fail_after's
            if self._step == "dial":
                return NotConnectedError(dial_error(self.host, self.port, None))
            timeout = self.options.connect_timeout
            return NotConnectedError(
                f"{self.address}: no answer to {self._step} within {timeout:g} s"
            )
        if isinstance(exc, EOFError):
            return NotConnectedError(f"{self.address}: connection closed during {self._step}")
        if isinstance(exc, STREAM_ERRORS):
            if self._step == "dial":
                return NotConnectedError(dial_error(self.host, self.port, exc))
            if self._step == "TLS":
                return TLSError(f"{self.address}: TLS failed - {exc.__cause__ or exc}")
            return NotConnectedError(
                f"{self.address}: connection lost during {self._step} - {errno_text(exc)}"
            )
        return None

    # -- running --------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[Connection] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Connect, handshake, report started, then serve until the connection ends."""
        self._library = running()
        self._out_lot = self._library.new_parking_lot()
        try:
            with anyio.fail_after(self.options.connect_timeout):
                await self._handshake()
        except BaseException as exc:
            await self._abort(exc)
            error = self._handshake_error(exc)
            if error is None:
                raise
            raise error from exc
        task_status.started(self)
        reason: BaseException | None = None
        try:
            with anyio.CancelScope() as self._cancel:
                if self.closed:
                    self._cancel.cancel()
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._writer)
                    interval = self.options.heartbeat_interval
                    if interval > 0:
                        tasks.start_soon(self._watchdog, 2 * interval)
                    self._direct = self._stream if isinstance(self._stream, AnyioStream) else None
                    await self._reader()
                    tasks.cancel_scope.cancel()
        except _CONNECTION_ENDED as exc:
            reason = exc
        except BaseExceptionGroup as group:
            reason = group
            if group.subgroup(anyio.get_cancelled_exc_class()) is not None:
                await self._abort(group)
                raise
        finally:
            await self._abort(reason)

    async def _abort(self, reason: BaseException | None) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        self.closed = True
        error = ConnectionClosedError(f"connection to {self.address} closed")
        if reason is not None and not isinstance(reason, anyio.get_cancelled_exc_class()):
            error.__cause__ = reason
        while self._replies:
            self._replies.popleft().fail(error)
        stream, self._stream = self._stream, None
        if stream is not None:
            with anyio.CancelScope() as scope:  # closed at once, as aclose_forcefully
                scope.cancel()
                try:
                    await stream.aclose()
                except Exception:  # pragma: no cover - closing a broken stream
                    pass
        self.closed_event.set()

    async def _reader(self) -> None:
        stream = self._stream
        assert stream is not None
        decoder = FrameDecoder()
        replies = self._replies
        on_messages = self.on_messages
        decoder.feed(self._leftover)
        self._leftover = b""
        while True:
            messages: list[bytes] = []
            while (frame := decoder.next_frame()) is not None:
                frame_type, payload = frame
                if frame_type == FRAME_TYPE_MESSAGE:
                    messages.append(payload)
                elif frame_type == FRAME_TYPE_RESPONSE:
                    if payload == HEARTBEAT:
                        self.send(_NOP)
                    elif replies:
                        replies.popleft().set(payload)
                    else:
                        log.warning("%s: unexpected response %r", self.address, payload[:100])
                elif frame_type == FRAME_TYPE_ERROR:
                    self._on_error(payload)
                else:
                    raise FrameDecodeError(f"unknown frame type {frame_type}")
            if messages and on_messages is not None:
                self.last_message_time = anyio.current_time()
                on_messages(self, messages)
            data = await stream.receive_some(_RECEIVE_SIZE)
            if not data:
                return
            self._receives += 1
            decoder.feed(bytes(data))

    async def _watchdog(self, read_timeout: float) -> None:
        """nsqd sends a heartbeat every heartbeat_interval when it has nothing else to send:
        nothing received for two intervals means the connection is dead (a partition, a
        frozen nsqd). Looked at a twentieth of that apart, so that a read costs no timer."""
        seen = self._receives
        quiet_since = anyio.current_time()
        while True:
            await anyio.sleep(read_timeout / 20)
            now = anyio.current_time()
            if self._receives != seen:
                seen, quiet_since = self._receives, now
            elif now - quiet_since >= read_timeout:
                self.close_reason = ConnectionClosedError(
                    f"{self.address}: nothing received for {read_timeout:g} s (missed heartbeats)"
                )
                log.error("%s", self.close_reason)
                self.close()
                return

    def _on_error(self, payload: bytes) -> None:
        error = NSQError.from_frame(payload)
        if payload.startswith(_UNMATCHED_ERRORS):
            if payload.startswith(b"E_FIN_FAILED"):
                self.fin_failures += 1
            log.warning("%s: %s", self.address, error)
        elif self._replies:
            self._replies.popleft().fail(error)
        else:
            log.error("%s: %s", self.address, error)
        if error.fatal:
            # nsqd closes the connection after a fatal error: no more commands on it.
            self.close_reason = error
            self.close()

    async def _writer(self) -> None:
        stream = self._stream
        assert stream is not None
        lot = self._out_lot
        while True:
            if not self._out:
                await lot.park()
                continue
            out, self._out = self._out, []
            self._sending = True
            await stream.send_all(out[0] if len(out) == 1 else b"".join(out))
            self._sending = False

    # -- commands -------------------------------------------------------------------------

    def send(self, data: bytes, *, now: bool = False) -> None:
        """Queue a command (written by the writer task, batched with others). With `now`,
        when nothing is queued or being written, it is written at once instead: a lone
        command's round trip then waits for no task switch."""
        if self.closed:
            raise ConnectionClosedError(f"connection to {self.address} is closed")
        if now and self._direct is not None and not self._out and not self._sending:
            written = self._direct.write_now(data)
            if written == len(data):
                return
            data = data[written:]  # the rest, through the writer (nothing is ahead of it)
        self._out.append(data)
        if len(self._out) == 1:
            self._out_lot.unpark_all()

    def send_expecting(self, data: bytes, reply: Reply, *, now: bool = False) -> None:
        """Queue a command nsqd answers; `reply` gets its response or error. `now`: as
        `send`'s."""
        self.send(data, now=now)
        self._replies.append(reply)

    async def request(self, data: bytes) -> bytes:
        """Send a command nsqd answers and wait for its response (NSQError on an error)."""
        reply = Reply(self._library.new_event)
        self.send_expecting(data, reply)
        return await reply.wait()

    def close(self) -> None:
        """Close the connection now (outstanding commands fail)."""
        self.closed = True
        if self._cancel is not None:
            self._cancel.cancel()

    async def flush(self, timeout: float = 1.0) -> None:
        """Wait (at most `timeout`) until every buffered command has been written."""
        with anyio.move_on_after(timeout):
            while (self._out or self._sending) and not self.closed:
                await anyio.sleep(0.001)

    async def aclose(self) -> None:
        """Write what is buffered (briefly), then close."""
        await self.flush()
        self.close()
        await self.closed_event.wait()
