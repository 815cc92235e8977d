"""`SyncProducer`: blocking publishes for synchronous code (scripts, WSGI/Django apps, Spark
tasks) over one connection to one nsqd that the calling thread itself writes and reads.

It owns one blocking TCP socket (TCP_NODELAY; TLS, snappy or deflate when negotiated) and one
`threading.Lock`. A publish takes the lock, reads without blocking what nsqd sent since the
last call (heartbeats, answered with NOP in front of the command; a connection nsqd closed
is replaced before anything is written), writes its command, reads frames until the answer
and releases the lock: threads take turns, one command on the wire at a time. No background
thread, no event loop. A call in a child process after ``os.fork()`` drops the inherited
socket (closing only the child's descriptor) and connects anew.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import snappy  # type: ignore[import-untyped]

from ..goerrors import dial_error, errno_text
from ..net.transport import SnappyDecoder, TransportError
from ..protocol import commands
from ..protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    OK,
    FrameDecodeError,
    FrameDecoder,
)
from .connection import parse_address
from .errors import (
    ClientError,
    ConnectionClosedError,
    NotConnectedError,
    NSQError,
    ProtocolError,
    TLSError,
)
from .options import ConnectionOptions
from .producer import check_publish

__all__ = ["PublishTimeoutError", "SyncProducer"]

log = logging.getLogger("trionsq.client")

#: How long `close` waits for a publish under way by default (seconds).
DEFAULT_CLOSE_TIMEOUT = 10.0
#: `Producer` options that mean nothing here (no pipeline, no coalescing): accepted, ignored.
_PRODUCER_ONLY = ("max_pipeline", "max_batch_count", "max_batch_bytes", "close_timeout")

_CLOSED = "SyncProducer is closed"
_UNANSWERED = (
    "SyncProducer closed before nsqd answered: the message may or may not have been published"
)
_RECEIVE_SIZE = 65536
_HEADER = struct.Struct(">Ii")
_NOP = commands.nop()


class PublishTimeoutError(ClientError, TimeoutError):
    """No answer from nsqd within a call's ``timeout``: the command was written and may still
    be published (the outcome is unknown, as with `ConnectionClosedError`), unless the text
    says it was never sent (the call waited its whole timeout for other threads' turns).
    Both a `ClientError` and a `TimeoutError`."""


class _TimedOut(Exception):
    """A read or write on the connection did not complete in time."""


class _Gone(Exception):
    """nsqd closed the connection (EOF, reset, a fatal error frame) or it broke."""


def _timeval(seconds: float | None) -> bytes:
    """SO_RCVTIMEO/SO_SNDTIMEO's struct timeval; None (and 0) is no timeout."""
    if seconds is None:
        return struct.pack("@ll", 0, 0)
    micros = max(int(seconds * 1_000_000), 1)  # 0 would mean "wait forever"
    return struct.pack("@ll", micros // 1_000_000, micros % 1_000_000)


# -- compression over the blocking socket (the codecs of net/transport.py) -----------------


class _Snappy:
    """The snappy framing format both ways."""

    __slots__ = ("_compressor", "_decoder")

    def __init__(self) -> None:
        self._compressor = snappy.StreamCompressor()
        self._decoder = SnappyDecoder()

    @property
    def ended(self) -> bool:
        return False

    def encode(self, data: bytes) -> bytes:
        encoded: bytes = self._compressor.compress(data)
        return encoded

    def decode(self, data: bytes) -> bytes:
        return self._decoder.feed(data)


class _Deflate:
    """Raw DEFLATE both ways, each write sync-flushed (as `DeflateStream`)."""

    __slots__ = ("_compressor", "_decompressor")

    def __init__(self, level: int) -> None:
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)

    @property
    def ended(self) -> bool:
        """nsqd's DEFLATE stream ended with its final block: the end of the connection."""
        return self._decompressor.eof

    def encode(self, data: bytes) -> bytes:
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> bytes:
        try:
            return self._decompressor.decompress(data)
        except zlib.error as err:
            raise TransportError(f"flate: corrupt input - {err}") from None


_Codec = _Snappy | _Deflate


# -- the connection -------------------------------------------------------------------------


class _Conn:
    """One connection after its handshake. A plain socket stays in blocking mode, its read
    and write timeouts set with SO_RCVTIMEO/SO_SNDTIMEO (no poll before each system call);
    a TLS socket runs in Python's timeout mode. Only the thread holding the producer's lock
    uses it."""

    __slots__ = ("codec", "decoder", "poll", "sock", "timeout", "tls")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.codec: _Codec | None = None
        self.decoder = FrameDecoder()
        self.poll: select.poll | None = None
        #: The timeout the socket has now: None for none, -1.0 when not known.
        self.timeout: float | None = -1.0

    def ready(self) -> None:
        """The handshake is done: from now on, timeouts as `arm` sets them."""
        if not self.tls:
            self.sock.settimeout(None)  # blocking: SO_RCVTIMEO/SO_SNDTIMEO bound the waits
        self.timeout = -1.0
        self.poll = select.poll()
        self.poll.register(self.sock, select.POLLIN)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover - closing a broken socket
            pass

    def interrupt(self) -> None:
        """Wake a thread blocked on the socket (it reads the end of the stream)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- timeouts ---------------------------------------------------------------------------

    def arm(self, deadline: float | None) -> None:
        """Bound the next reads and writes by `deadline` (a `time.monotonic` time; None: no
        bound). The socket is left alone when its timeout is already right to within 1 %:
        calls with the same timeout cost no system call for it."""
        current = self.timeout
        if deadline is None:
            if current is None:
                return
            seconds: float | None = None
        else:
            seconds = deadline - time.monotonic()
            if seconds <= 0:
                raise _TimedOut
            if current is not None and 0 <= current - seconds <= seconds * 0.01:
                return
        if self.tls:
            self.sock.settimeout(seconds)
        else:
            value = _timeval(seconds)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        self.timeout = seconds

    # -- I/O --------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self.codec is not None:
            data = self.codec.encode(data)
        try:
            self.sock.sendall(data)
        except (BlockingIOError, TimeoutError):  # SO_SNDTIMEO's EAGAIN; TLS's timeout
            raise _TimedOut from None

    def receive(self) -> bytes:
        """One blocking read, decoded (b"" when it completed no compressed chunk yet);
        `_Gone` at the end of the stream, `_TimedOut` when the timeout passed first."""
        codec = self.codec
        if codec is not None and codec.ended:
            raise _Gone
        try:
            raw = self.sock.recv(_RECEIVE_SIZE)
        except (BlockingIOError, TimeoutError):  # SO_RCVTIMEO's EAGAIN; TLS's timeout
            raise _TimedOut from None
        if not raw:
            raise _Gone
        return raw if codec is None else codec.decode(raw)

    def _receive_nowait(self) -> bytes | None:
        """What can be read without waiting (None: nothing); `_Gone` at the end of the
        stream or when the connection broke."""
        sock = self.sock
        try:
            if isinstance(sock, ssl.SSLSocket):
                if not sock.pending() and not self._readable():
                    return None
                sock.settimeout(0.0)
                self.timeout = -1.0
                raw = sock.recv(_RECEIVE_SIZE)
            else:
                if not self._readable():
                    return None
                raw = sock.recv(_RECEIVE_SIZE, socket.MSG_DONTWAIT)
        except (ssl.SSLWantReadError, BlockingIOError):
            return None
        except OSError as err:
            raise _Gone from err
        if not raw:
            raise _Gone
        codec = self.codec
        if codec is None:
            return raw
        try:
            return codec.decode(raw)
        except TransportError as err:
            raise _Gone from err

    def _readable(self) -> bool:
        assert self.poll is not None
        return bool(self.poll.poll(0))

    def drain(self) -> int:
        """Take in what nsqd sent unasked, without waiting: the number of heartbeats in it
        (to answer). `_Gone` when nsqd closed the connection, or sent a fatal error or a
        frame a producer never gets."""
        heartbeats = 0
        decoder = self.decoder
        while True:
            try:
                while (frame := decoder.next_frame()) is not None:
                    frame_type, payload = frame
                    if frame_type == FRAME_TYPE_RESPONSE and payload == HEARTBEAT:
                        heartbeats += 1
                    elif frame_type == FRAME_TYPE_ERROR:
                        error = NSQError.from_frame(payload)
                        log.warning("SyncProducer: unasked error from nsqd: %s", error)
                        if error.fatal:
                            raise _Gone from error
                    else:
                        log.warning("SyncProducer: unexpected frame %r", payload[:100])
                        raise _Gone
            except FrameDecodeError as err:
                raise _Gone from err
            data = self._receive_nowait()
            if data is None:
                return heartbeats
            decoder.feed(data)

    def exchange(self, command: bytes, deadline: float | None) -> tuple[int, bytes]:
        """Write `command`, then read until its answer: ``(frame type, payload)``.
        Heartbeats that come first are answered. `arm` was called."""
        self.send(command)
        decoder = self.decoder
        first = True
        while True:
            frame = decoder.next_frame()
            if frame is None:
                if first:
                    first = False
                else:
                    self.arm(deadline)
                decoder.feed(self.receive())
                continue
            if frame[0] == FRAME_TYPE_RESPONSE and frame[1] == HEARTBEAT:
                self.send(_NOP)
                continue
            return frame


# -- the handshake ---------------------------------------------------------------------------


class _Handshake:
    """Dial, magic, IDENTIFY, then the TLS / snappy / deflate upgrade and AUTH that nsqd's
    IDENTIFY reply asks for, all within ``connect_timeout``; the errors as the async
    `Connection`'s."""

    def __init__(self, host: str, port: int, options: ConnectionOptions) -> None:
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.options = options
        self.step = "dial"
        self.deadline = 0.0
        self.conn: _Conn | None = None

    def run(self) -> _Conn:
        opts = self.options
        try:
            self.deadline = time.monotonic() + opts.connect_timeout
            self._connect()
        except BaseException as exc:
            if self.conn is not None:
                self.conn.close()
            error = self._error(exc)
            if error is None:
                raise
            raise error from exc
        assert self.conn is not None
        return self.conn

    def _connect(self) -> None:
        opts = self.options
        sock = socket.create_connection((self.host, self.port), timeout=opts.connect_timeout)
        self.conn = conn = _Conn(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.step = "IDENTIFY"
        self._send(commands.MAGIC_V2 + commands.identify(opts.identify_body()))
        frame_type, data, left = self._read_frame(b"")
        if frame_type == FRAME_TYPE_ERROR:
            raise NSQError.from_frame(data)
        if data == OK:  # an nsqd without feature negotiation
            self._finish(left)
            return
        info = self._identify_reply(data)
        if info.get("tls_v1"):
            self.step = "TLS"
            try:
                context = opts.ssl_context_for_client()
            except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
                raise TLSError(f"{self.address}: TLS files cannot be used - {err}") from err
            self._settimeout()
            hostname = opts.tls_server_hostname or self.host
            conn.sock = context.wrap_socket(sock, server_hostname=hostname)
            conn.tls = True
            left = self._expect_ok(left)
        self.step = "compression upgrade"
        codec: _Codec | None = None
        if info.get("snappy"):
            codec = _Snappy()
        elif info.get("deflate"):
            codec = _Deflate(int(info.get("deflate_level") or opts.deflate_level))
        if codec is not None:
            conn.codec = codec
            left = self._expect_ok(codec.decode(left) if left else b"")
        if info.get("auth_required"):
            if opts.auth_secret is None:
                raise ClientError("nsqd requires AUTH and no auth_secret was given")
            self.step = "AUTH"
            secret = opts.auth_secret
            self._send(commands.auth(secret.encode() if isinstance(secret, str) else secret))
            frame_type, data, left = self._read_frame(left)
            if frame_type == FRAME_TYPE_ERROR:
                raise NSQError.from_frame(data)
            try:
                json.loads(data)
            except ValueError:
                raise ProtocolError(f"{self.address}: bad AUTH response {data[:100]!r}") from None
        self._finish(left)

    def _finish(self, left: bytes) -> None:
        assert self.conn is not None
        self.conn.ready()
        self.conn.decoder.feed(left)

    def _settimeout(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        assert self.conn is not None
        self.conn.sock.settimeout(remaining)

    def _send(self, data: bytes) -> None:
        assert self.conn is not None
        self._settimeout()
        codec = self.conn.codec
        self.conn.sock.sendall(data if codec is None else codec.encode(data))

    def _read_frame(self, buf: bytes) -> tuple[int, bytes, bytes]:
        """One frame: ``(type, data, decoded bytes left over)``."""
        conn = self.conn
        assert conn is not None
        while True:
            if len(buf) >= 8:
                size, frame_type = _HEADER.unpack_from(buf)
                if len(buf) >= 4 + size:
                    return frame_type, buf[8 : 4 + size], buf[4 + size :]
            self._settimeout()
            raw = conn.sock.recv(_RECEIVE_SIZE)
            if not raw:
                raise EOFError
            buf += raw if conn.codec is None else conn.codec.decode(raw)

    def _expect_ok(self, buf: bytes) -> bytes:
        frame_type, data, left = self._read_frame(buf)
        if frame_type == FRAME_TYPE_ERROR:
            raise NSQError.from_frame(data)
        if data != OK:
            raise ProtocolError(f"{self.address}: unexpected {self.step} response {data[:100]!r}")
        return left

    def _identify_reply(self, data: bytes) -> dict[str, Any]:
        try:
            info = json.loads(data)
            if not isinstance(info, dict):
                raise ValueError("not an object")
        except (ValueError, TypeError):
            raise ProtocolError(f"{self.address}: bad IDENTIFY response {data[:100]!r}") from None
        return info

    def _error(self, exc: BaseException) -> ClientError | None:
        """The `ClientError` for a failed handshake (None: `exc` is one, or not a connection
        failure, such as a KeyboardInterrupt), in the async `Connection`'s words."""
        if isinstance(exc, ClientError):
            return None
        if isinstance(exc, TimeoutError) and exc.errno is None:  # socket's timeout
            if self.step == "dial":
                return NotConnectedError(dial_error(self.host, self.port, None))
            timeout = self.options.connect_timeout
            return NotConnectedError(
                f"{self.address}: no answer to {self.step} within {timeout:g} s"
            )
        if isinstance(exc, EOFError):
            return NotConnectedError(f"{self.address}: connection closed during {self.step}")
        if isinstance(exc, OSError | TransportError):
            if self.step == "dial":
                return NotConnectedError(dial_error(self.host, self.port, exc))
            if self.step == "TLS":
                return TLSError(f"{self.address}: TLS handshake failed - {exc}")
            return NotConnectedError(
                f"{self.address}: connection lost during {self.step} - {errno_text(exc)}"
            )
        return None


# -- fork -----------------------------------------------------------------------------------

#: Serialises the re-making of a SyncProducer's lock in a child process (itself re-made in
#: each child: a thread of the parent may have held it at the fork).
_fork_guard = threading.Lock()
#: Forks this process descends from (counted in each child): a SyncProducer that saw fewer
#: was made before a fork. Read per call instead of ``os.getpid()``, a system call.
_forks = 0


def _after_fork_in_child() -> None:
    global _fork_guard, _forks
    _fork_guard = threading.Lock()
    _forks += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


# -- the producer ---------------------------------------------------------------------------


class SyncProducer:
    """Blocking publishes to the nsqd at `address` (``"host:port"``) for synchronous code.

    ``SyncProducer("127.0.0.1:4150", **options)`` connects before it returns, in the calling
    thread: dial, IDENTIFY, the TLS / snappy / deflate upgrade and AUTH as nsqd's IDENTIFY
    reply asks, within `connect_timeout`. Options: any `ConnectionOptions` field
    (`heartbeat_interval`, `connect_timeout`, `tls_v1`, `tls_cafile`, `snappy`, `deflate`,
    `auth_secret`, ...); the `Producer`'s `max_pipeline`, `max_batch_count`,
    `max_batch_bytes` and `close_timeout` are accepted and ignored. When nsqd cannot be
    reached it raises what ``async with Producer`` raises: `NotConnectedError` in Go's words
    (``dial tcp 127.0.0.1:4150: connect: connection refused``), `TLSError`, `ProtocolError`,
    `NSQError`; a ValueError for an address without a port.

    `publish`, `mpublish` and `dpublish` write one command and block until nsqd answers OK.
    They raise `NSQError` (with `.code`, e.g. ``E_BAD_TOPIC``, also for checks done
    locally), `ConnectionClosedError` (the connection ended after the command was written:
    the outcome is unknown; or the SyncProducer is closed), `NotConnectedError` and the
    other handshake errors (the call found no connection and could not make one), and
    `PublishTimeoutError` when no answer came within ``timeout=`` seconds (default: twice
    `heartbeat_interval`, 60 s; none when heartbeats are off or left to nsqd's default).

    Thread-safe: threads take turns on the one connection, each holding it for one write
    and its answer (no pipelining, no coalescing). Before writing, a call answers the
    heartbeats that arrived meanwhile and replaces a connection nsqd closed (restarted, or
    idle beyond twice the heartbeat interval); a connection lost after a write (with an
    unknown outcome), after a timeout or after a fatal error frame is replaced by the next
    call. No call retries.

    Use it as a context manager or call `close`. After ``os.fork()`` the child's first call
    drops the inherited connection and opens its own; the parent's is untouched.
    """

    def __init__(self, address: str, **options: Any) -> None:
        self._host, self._port = parse_address(address)  # a ValueError for a bad address
        self._address = address
        for name in _PRODUCER_ONLY:
            options.pop(name, None)
        self._options = ConnectionOptions.pick(options)
        interval = self._options.heartbeat_interval
        #: nsqd closes a connection it heard nothing on for twice the heartbeat interval.
        self._default_timeout = 2 * interval if interval > 0 else None
        self._lock = threading.Lock()
        self._forks = _forks
        self._closed = False
        self._conn: _Conn | None = None
        self._conn = self._connect()

    @property
    def address(self) -> str:
        """The nsqd address given."""
        return self._address

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def __repr__(self) -> str:
        return f"<SyncProducer {self.address}{' closed' if self.closed else ''}>"

    # -- publishing -----------------------------------------------------------------------

    def publish(self, topic: str, body: bytes, *, timeout: float | None = None) -> None:
        """Publish one message (PUB); return once nsqd answered OK."""
        check_publish(topic, (body,))
        self._call(commands.pub(topic, body), timeout)

    def mpublish(
        self, topic: str, bodies: Iterable[bytes], *, timeout: float | None = None
    ) -> None:
        """Publish several messages in one MPUB (atomically: all or none)."""
        bodies = list(bodies)
        check_publish(topic, bodies)
        self._call(commands.mpub(topic, bodies), timeout)

    def dpublish(
        self, topic: str, delay_ms: int, body: bytes, *, timeout: float | None = None
    ) -> None:
        """Publish one message that nsqd delivers after `delay_ms` milliseconds (DPUB)."""
        check_publish(topic, (body,))
        self._call(commands.dpub(topic, int(delay_ms), body), timeout)

    def _call(self, command: bytes, timeout: float | None) -> None:
        if self._closed:
            raise ConnectionClosedError(_CLOSED)
        if self._forks != _forks:
            self._after_fork()
        if timeout is None:
            timeout = self._default_timeout
        lock = self._lock
        if timeout is None:
            deadline = None
            lock.acquire()
        else:
            deadline = time.monotonic() + timeout
            if not lock.acquire(timeout=max(timeout, 0.0)):
                raise PublishTimeoutError(
                    f"{self.address}: other threads' publishes held the connection for "
                    f"{timeout:g} s: this one was not sent"
                )
        try:
            if self._closed:
                raise ConnectionClosedError(_CLOSED)
            self._exchange(command, deadline, timeout)
        finally:
            if self._closed:  # close() gave up waiting for this call
                self._drop()
            lock.release()

    def _exchange(self, command: bytes, deadline: float | None, timeout: float | None) -> None:
        """With the lock held: reconnect if needed, write `command`, await the answer."""
        conn = self._conn
        if conn is not None:
            try:
                heartbeats = conn.drain()
            except _Gone:  # nothing written yet: a new connection is safe
                self._drop()
                conn = None
            except BaseException:
                self._drop()
                raise
            else:
                if heartbeats:
                    command = _NOP * heartbeats + command
        if conn is None:
            if self._closed:  # close() gave up waiting and shut the connection down
                raise ConnectionClosedError(_CLOSED)
            conn = self._connect()
            if self._closed:  # close() gave up waiting meanwhile
                conn.close()
                raise ConnectionClosedError(_CLOSED)
            self._conn = conn
        try:
            conn.arm(deadline)
        except _TimedOut:  # spent waiting for the turn and (re)connecting
            raise PublishTimeoutError(
                f"{self.address}: no time left of {timeout:g} s to write the command: "
                "it was not sent"
            ) from None
        try:
            frame_type, payload = conn.exchange(command, deadline)
        except _TimedOut:
            self._drop()
            raise PublishTimeoutError(
                f"no answer from nsqd at {self.address} within {timeout:g} s "
                "(the message may still be published)"
            ) from None
        except (_Gone, OSError, TransportError, FrameDecodeError) as exc:
            self._drop()
            if self._closed:
                raise ConnectionClosedError(_UNANSWERED) from exc
            cause = exc.__cause__ if isinstance(exc, _Gone) else exc
            reason = f" ({errno_text(cause)})" if cause is not None else ""
            raise ConnectionClosedError(
                f"connection to {self.address} lost before nsqd answered{reason}: "
                "the message may or may not have been published"
            ) from cause
        except BaseException:  # KeyboardInterrupt, ...: the answer would be out of step
            self._drop()
            raise
        if frame_type == FRAME_TYPE_RESPONSE:
            if payload == OK:
                return
            self._drop()
            raise ProtocolError(f"{self.address}: unexpected response {payload[:100]!r}")
        if frame_type == FRAME_TYPE_ERROR:
            error = NSQError.from_frame(payload)
            if error.fatal:  # nsqd closes the connection after it
                self._drop()
            raise error
        self._drop()
        raise ProtocolError(f"{self.address}: unexpected frame type {frame_type}")

    def _connect(self) -> _Conn:
        return _Handshake(self._host, self._port, self._options).run()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _after_fork(self) -> None:
        """In a child process: forget the parent's connection (closing only this process's
        descriptor: no shutdown, no TLS close_notify) and its lock (another thread may have
        held it at the fork)."""
        with _fork_guard:
            if self._forks == _forks:
                return
            self._lock = threading.Lock()
            self._drop()
            self._forks = _forks

    # -- closing --------------------------------------------------------------------------

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Refuse new publishes, wait (at most `timeout` seconds) for the one under way,
        then close the connection. Idempotent. Later publishes raise
        ``ConnectionClosedError("SyncProducer is closed")``; one still unanswered after
        `timeout` raises `ConnectionClosedError` too (its outcome unknown)."""
        self._closed = True
        if self._forks != _forks:
            self._after_fork()
        lock = self._lock
        if lock.acquire(timeout=max(timeout, 0.0)):
            try:
                self._drop()
            finally:
                lock.release()
        else:
            conn = self._conn
            if conn is not None:
                conn.interrupt()  # the call under way wakes, fails and drops it

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
