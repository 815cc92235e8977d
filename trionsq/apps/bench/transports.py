"""The bench clients' connection upgrades: IDENTIFY with ``tls_v1``/``snappy``/``deflate``,
then TLS (``ssl`` on the blocking socket), snappy (python-snappy's stream classes) or raw
DEFLATE (zlib) around it, as go-nsq upgrades. Each read is decompressed in one call and each
write compressed in one call, so the client adds little per message: the daemon, which does
the same per flush, stays the bottleneck.
"""

from __future__ import annotations

import json
import socket
import ssl
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trionsq.protocol import FRAME_TYPE_RESPONSE, identify

from .common import BenchError, connect, expect_ok, read_frame

#: What the reader can ask for: plaintext, or features as nsqd negotiates them.
TRANSPORTS = ("plain", "snappy", "deflate", "tls", "tls+snappy", "tls+deflate")


@dataclass(frozen=True)
class TransportSpec:
    """A transport and what it needs: the deflate level, and for TLS the CA file to trust
    (None: the server's certificate is not verified, fine for a benchmark on loopback)."""

    name: str = "plain"
    deflate_level: int = 6
    tls_ca_file: str | None = None

    @property
    def tls(self) -> bool:
        return self.name.startswith("tls")

    @property
    def snappy(self) -> bool:
        return self.name.endswith("snappy")

    @property
    def deflate(self) -> bool:
        return self.name.endswith("deflate")


class Conn:
    """A blocking connection to nsqd, upgraded as negotiated: `recv` and `sendall` carry the
    protocol's plain bytes (recv returns b"" only at EOF); `sock` is the socket beneath."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.recv: Callable[[int], bytes] = sock.recv
        self.sendall: Callable[[bytes], Any] = sock.sendall

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def close(self) -> None:
        self.sock.close()


class _Codec:
    """recv/sendall through a compressor and a decompressor."""

    def __init__(
        self,
        recv: Callable[[int], bytes],
        sendall: Callable[[bytes], Any],
        compress: Callable[[bytes], bytes],
        decompress: Callable[[bytes], bytes],
        leftover: bytes,
    ) -> None:
        self._recv = recv
        self._sendall = sendall
        self._compress = compress
        self._decompress = decompress
        self._pending = decompress(leftover) if leftover else b""

    def recv(self, size: int) -> bytes:
        if self._pending:
            out, self._pending = self._pending, b""
            return out
        while True:
            data = self._recv(size)
            if not data:
                return b""
            out = self._decompress(data)
            if out:
                return out

    def sendall(self, data: bytes) -> None:
        self._sendall(self._compress(data))


def _snappy_codec(conn: Conn, leftover: bytes) -> _Codec:
    import snappy  # type: ignore[import-untyped]

    compressor = snappy.StreamCompressor()
    decompressor = snappy.StreamDecompressor()
    return _Codec(conn.recv, conn.sendall, compressor.compress, decompressor.decompress, leftover)


def _deflate_codec(conn: Conn, leftover: bytes, level: int) -> _Codec:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    decompressor = zlib.decompressobj(-15)

    def compress(data: bytes) -> bytes:
        return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)

    return _Codec(conn.recv, conn.sendall, compress, decompressor.decompress, leftover)


def client_context(ca_file: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    if ca_file is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def open_conn(address: tuple[str, int], spec: TransportSpec) -> tuple[Conn, bytearray]:
    """Connect, and with a transport other than plain, IDENTIFY and upgrade. Returns the
    connection and the (plain) bytes already read past the last OK."""
    sock = connect(address)
    conn = Conn(sock)
    pending = bytearray()
    if spec.name == "plain":
        return conn, pending
    if spec.name not in TRANSPORTS:
        raise BenchError(f"unknown transport {spec.name!r}")
    fields = {
        "feature_negotiation": True,
        "tls_v1": spec.tls,
        "snappy": spec.snappy,
        "deflate": spec.deflate,
        "deflate_level": spec.deflate_level,
        "user_agent": "trionsq-bench",
    }
    sock.sendall(identify(fields))
    frame_type, data = read_frame(sock, pending)
    if frame_type != FRAME_TYPE_RESPONSE:
        raise BenchError(f"IDENTIFY: {data!r}")
    reply = json.loads(data)
    for key in ("tls_v1", "snappy", "deflate"):
        if bool(reply.get(key)) != bool(fields[key]):
            raise BenchError(f"nsqd did not grant {key} (IDENTIFY reply {reply})")
    if spec.tls:
        if pending:
            raise BenchError("bytes after the IDENTIFY reply before the TLS handshake")
        host = address[0]
        tls_sock = client_context(spec.tls_ca_file).wrap_socket(sock, server_hostname=host)
        conn = Conn(tls_sock)
        expect_ok(tls_sock, "TLS upgrade", pending)
    if spec.snappy or spec.deflate:
        leftover = bytes(pending)
        pending.clear()
        if spec.snappy:
            codec = _snappy_codec(conn, leftover)
        else:
            codec = _deflate_codec(conn, leftover, reply["deflate_level"])
        conn.recv = codec.recv
        conn.sendall = codec.sendall
        expect_ok(conn, "compression upgrade", pending)
    return conn, pending


def subscribe_with(
    address: tuple[str, int], topic: str, channel: str, spec: TransportSpec
) -> tuple[Conn, bytes]:
    """Connect over `spec`, SUB; returns the connection and the bytes read past the OK."""
    conn, pending = open_conn(address, spec)
    conn.sendall(b"SUB %s %s\n" % (topic.encode(), channel.encode()))
    expect_ok(conn, "SUB", pending)
    return conn, bytes(pending)


__all__ = ["TRANSPORTS", "Conn", "TransportSpec", "client_context", "open_conn", "subscribe_with"]
