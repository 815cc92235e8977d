"""A small blocking client for nsqlookupd's TCP protocol V1, for the conformance suite.

The V1 protocol (docs/protocol.md §6.1): the client sends the magic ``"  V1"``, then commands of
one line each; IDENTIFY is followed by ``[4-byte size][JSON]``. Every reply, success or
error, is ``[4-byte big-endian size][data]`` with **no** frame type; errors read
``"<CODE> <text>"`` and nsqlookupd closes the connection after sending one.

Nothing here hides a server reply: every `expect_*` helper fails the test with what
actually arrived.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid
from typing import Any

# ConnectionClosed is re-exported: tests import it from here
from .blocking_socket import ConnectionClosed as ConnectionClosed
from .blocking_socket import recv_before

MAGIC_V1 = b"  V1"

#: Default time to wait for a reply the test expects.
DEFAULT_TIMEOUT = 5.0

_ERROR_CODES = (b"E_INVALID", b"E_BAD_BODY", b"E_BAD_TOPIC", b"E_BAD_CHANNEL", b"E_BAD_PROTOCOL")


def peer_info(**overrides: Any) -> dict[str, Any]:
    """An IDENTIFY body like the one nsqd sends (docs/protocol.md §5), with a unique
    ``broadcast_address`` and ``hostname`` so that a test can find its own producer in
    /lookup and /nodes of a shared nsqlookupd, and so that tombstoning it (node =
    ``broadcast_address:http_port``) touches no other test's producer."""
    tag = uuid.uuid4().hex[:12]
    info: dict[str, Any] = {
        "broadcast_address": f"conf-{tag}.invalid",
        "hostname": f"conf-host-{tag}",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0-conformance",
    }
    info.update(overrides)
    return info


def format_address(sockname: tuple[Any, ...]) -> str:
    """``ip:port`` as Go's net.Addr.String() writes it (IPv6 hosts in brackets)."""
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class LookupdConn:
    """One TCP connection to nsqlookupd, magic already sent (unless `magic` is None)."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        magic: bytes | None = MAGIC_V1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.closed_by_server = False
        #: The IDENTIFY body nsqlookupd accepted (set by `identify_as`).
        self.peer: dict[str, Any] | None = None
        #: The raw bytes of the last reply `expect_json` decoded.
        self.last_json_raw = b""
        self._buf = b""
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._local = format_address(self.sock.getsockname())
        if magic is not None:
            self.send(magic)

    @property
    def remote_address(self) -> str:
        """How nsqlookupd sees this connection: its ``remote_address`` (and peer id),
        assuming no NAT between the test and the daemon (still known after `close`)."""
        return self._local

    # -- sending ---------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Send bytes; a server that already closed (after a fatal error) is not an error
        here: the test reads the error and the close next."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def command(self, *words: str | bytes) -> None:
        """Send one command line: the words joined by single spaces, then ``\\n``."""
        line = b" ".join(w.encode() if isinstance(w, str) else w for w in words)
        self.send(line + b"\n")

    def send_identify(self, body: bytes | dict[str, Any]) -> None:
        """``IDENTIFY\\n[4-byte size][body]`` (a dict is sent as compact JSON)."""
        if isinstance(body, dict):
            body = json.dumps(body, separators=(",", ":")).encode()
        self.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)

    def identify_as(self, info: dict[str, Any]) -> dict[str, Any]:
        """IDENTIFY with `info`, expect the JSON reply and return it."""
        self.send_identify(info)
        reply = self.expect_json()
        self.peer = dict(info)
        return reply

    def ping(self) -> None:
        """PING and expect OK."""
        self.command("PING")
        self.expect_response(b"OK")

    def register(self, topic: str, channel: str | None = None) -> None:
        """REGISTER and expect OK."""
        self.command("REGISTER", topic, *([channel] if channel is not None else []))
        self.expect_response(b"OK")

    def unregister(self, topic: str, channel: str | None = None) -> None:
        """UNREGISTER and expect OK."""
        self.command("UNREGISTER", topic, *([channel] if channel is not None else []))
        self.expect_response(b"OK")

    def shutdown_write(self) -> None:
        """Half-close: the server reads EOF but can still answer."""
        self.sock.shutdown(socket.SHUT_WR)

    # -- receiving -------------------------------------------------------------------

    def _recv(self, deadline: float) -> None:
        try:
            data = recv_before(self.sock, deadline, 65536)
        except ConnectionClosed:
            self.closed_by_server = True
            raise
        self._buf += data

    def read_raw(self, n: int, timeout: float | None = None) -> bytes:
        """Exactly `n` bytes. Raises TimeoutError or ConnectionClosed."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self._buf) < n:
            self._recv(deadline)
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def read_response(self, timeout: float | None = None) -> bytes:
        """The data of the next ``[size][data]`` reply. Raises TimeoutError or
        ConnectionClosed."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        (size,) = struct.unpack(">i", self.read_raw(4, max(0.0, deadline - time.monotonic())))
        assert 0 <= size < 16 * 1024 * 1024, f"implausible reply size {size}"
        return self.read_raw(size, max(0.0, deadline - time.monotonic()))

    def _reply(self, what: str, timeout: float | None) -> bytes:
        try:
            return self.read_response(timeout)
        except TimeoutError:
            raise AssertionError(f"expected {what}, got nothing (timeout)") from None
        except ConnectionClosed as exc:
            got = f"; unread bytes {self._buf!r}" if self._buf else ""
            raise AssertionError(f"expected {what}, connection closed ({exc}){got}") from None

    def expect_response(self, expected: bytes, timeout: float | None = None) -> None:
        data = self._reply(f"reply {expected!r}", timeout)
        assert data == expected, f"expected reply {expected!r}, got {data[:300]!r}"

    def expect_json(self, timeout: float | None = None) -> dict[str, Any]:
        """The next reply, decoded as a JSON object (and not an error)."""
        data = self._reply("JSON reply", timeout)
        assert not data.startswith(_ERROR_CODES), f"expected a JSON reply, got {data!r}"
        try:
            value = json.loads(data)
        except ValueError:
            raise AssertionError(f"expected a JSON reply, got {data[:300]!r}") from None
        assert isinstance(value, dict), f"expected a JSON object, got {value!r}"
        self.last_json_raw = data
        return value

    def expect_error(self, code: str, text: str | None = None, timeout: float | None = None) -> str:
        """Expect the reply ``"<code> <text>"``; returns the text after the code (and
        checks it equals `text` when given)."""
        data = self._reply(f"error {code}", timeout).decode("utf-8", "replace")
        got_code, _, got_text = data.partition(" ")
        assert got_code == code, f"expected error {code}, got {data!r}"
        if text is not None:
            assert got_text == text, f"error {code}: expected text {text!r}, got {got_text!r}"
        return got_text

    def expect_fatal(self, code: str, text: str | None = None) -> str:
        """Expect an error reply and then the server closing the connection."""
        got = self.expect_error(code, text)
        self.expect_closed()
        return got

    def expect_closed(self, timeout: float | None = None) -> None:
        """Expect the server to close the connection, sending nothing more first."""
        if self.closed_by_server and not self._buf:
            return
        try:
            data = self.read_raw(1, timeout)
        except TimeoutError:
            raise AssertionError("expected the server to close the connection") from None
        except ConnectionClosed:
            if not self._buf:
                return
            data = self._buf
        raise AssertionError(f"expected the connection closed, got {data + self._buf!r}")

    def expect_nothing(self, seconds: float) -> None:
        """Expect no reply for `seconds`, and the connection still open."""
        try:
            data = self.read_raw(1, seconds)
        except TimeoutError:
            return
        except ConnectionClosed as exc:
            raise AssertionError(f"expected nothing, connection closed ({exc})") from None
        raise AssertionError(f"expected nothing, got {data + self._buf!r}")

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> LookupdConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
