"""The layers a V2 connection can be upgraded to after IDENTIFY (docs/protocol.md §1.3), on either
side (nsqd and `trionsq.client`): snappy and deflate stream wrappers, and the TLS fields of a
connection's stats (`tls_stats`; nsqd's TLS context is built in nsqd/tls_config.py).

`SnappyStream` and `DeflateStream` are `trio.abc.Stream`s over another stream (a socket or a
`trio.SSLStream`). Each `send_all` is compressed and flushed as one unit: the daemon already
batches a whole flush of the output buffer into one `send_all`, so compression costs one call
per flush, nothing per message. `receive_some` decompresses incrementally, whatever the
chunking, and returns b"" only at the end of the stream; input that cannot be decoded raises
`TransportError` (a `trio.BrokenResourceError`), which ends that connection only. They run
under any async library that gives them its `checkpoint` (the client passes anyio's, so they
stack on asyncio streams too); Trio's is the default.

Wire formats, as Go nsqd's (golang/snappy, compress/flate):

* snappy: the snappy *framing* format (stream identifier ``sNaPpY``, CRC32C-masked chunks of at
  most 64 KiB of data). The peer's chunks are checked as golang/snappy's Reader checks them (the
  stream identifier first, no chunk longer than 76,494 bytes, reserved unskippable chunk types
  refused, skippable and padding chunks dropped) before python-snappy decodes and verifies
  them; a chunk is decoded only once complete, so memory per connection stays bounded.
* deflate: raw DEFLATE (no zlib header) with a sync flush per write, at the negotiated level.
  The peer's stream ending (its final block) reads as the end of the connection, as Go's flate
  reader returns io.EOF there.
"""

from __future__ import annotations

import ssl
import zlib
from collections.abc import Awaitable, Callable

import snappy  # type: ignore[import-untyped]
import trio

__all__ = [
    "RECEIVE_SIZE",
    "DeflateStream",
    "SnappyStream",
    "TransportError",
    "tls_stats",
]

#: How much the wrappers read from the stream beneath at a time.
RECEIVE_SIZE = 65536


class TransportError(trio.BrokenResourceError):
    """The peer's compressed stream cannot be decoded: the connection cannot go on."""


class _Busy:
    """One task at a time per direction, as for trio's own streams."""

    __slots__ = ("_busy", "_what")

    def __init__(self, what: str) -> None:
        self._what = what
        self._busy = False

    def __enter__(self) -> None:
        if self._busy:
            raise trio.BusyResourceError(f"another task is already {self._what} on this stream")
        self._busy = True

    def __exit__(self, *exc: object) -> None:
        self._busy = False


# -- snappy ---------------------------------------------------------------------------------

_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_CHUNK_COMPRESSED = 0x00
_CHUNK_UNCOMPRESSED = 0x01
_CHUNK_STREAM_IDENTIFIER = 0xFF
_CHECKSUM_SIZE = 4
#: golang/snappy's maxBlockSize: the most data one chunk carries.
_MAX_BLOCK_SIZE = 65536
#: golang/snappy's Reader buffer (maxEncodedLenOfMaxBlockSize + checksumSize): a longer chunk of
#: any type is ErrUnsupported.
_MAX_CHUNK_LENGTH = 76490 + _CHECKSUM_SIZE


def _corrupt(detail: str = "") -> TransportError:
    return TransportError("snappy: corrupt input" + (f" ({detail})" if detail else ""))


def _unsupported() -> TransportError:
    return TransportError("snappy: unsupported input")


class SnappyDecoder:
    """Sans-IO decoder of the snappy framing format: `feed` bytes in any chunking, get the
    decoded bytes of every chunk completed so far."""

    __slots__ = ("_buf", "_decompressor", "_seen_identifier")

    def __init__(self) -> None:
        self._buf = b""
        self._seen_identifier = False
        self._decompressor = snappy.StreamDecompressor()

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        n = len(buf)
        pos = 0
        chunks: list[bytes] = []
        while n - pos >= 4:
            chunk_type = buf[pos]
            length = buf[pos + 1] | buf[pos + 2] << 8 | buf[pos + 3] << 16
            if not self._seen_identifier and chunk_type != _CHUNK_STREAM_IDENTIFIER:
                raise _corrupt("no stream identifier")
            if length > _MAX_CHUNK_LENGTH:
                raise _unsupported()
            end = pos + 4 + length
            if end > n:
                break
            if chunk_type in (_CHUNK_COMPRESSED, _CHUNK_UNCOMPRESSED):
                if length < _CHECKSUM_SIZE:
                    raise _corrupt()
                if chunk_type == _CHUNK_UNCOMPRESSED and length - _CHECKSUM_SIZE > _MAX_BLOCK_SIZE:
                    raise _corrupt()
                chunks.append(buf[pos:end])
            elif chunk_type == _CHUNK_STREAM_IDENTIFIER:
                if buf[pos:end] != _STREAM_IDENTIFIER:
                    raise _corrupt("bad stream identifier")
                self._seen_identifier = True
            elif chunk_type <= 0x7F:
                raise _unsupported()  # reserved unskippable chunk types 0x02-0x7f
            # 0x80-0xfe: reserved skippable chunks and padding, dropped
            pos = end
        self._buf = buf[pos:]
        if not chunks:
            return b""
        try:
            # Whole chunks behind a stream identifier: python-snappy decodes and checks them
            # (CRC32C) without keeping anything back.
            decoded: bytes = self._decompressor.decompress(_STREAM_IDENTIFIER + b"".join(chunks))
        except Exception as err:  # cramjam raises OSError, or ValueError for some input
            text = str(err)
            raise (TransportError(text) if text.startswith("snappy:") else _corrupt(text)) from None
        return decoded

    def eof(self) -> None:
        """The stream beneath ended: an error when it ended inside a chunk."""
        if self._buf:
            raise _corrupt("stream ended inside a chunk")


class SnappyStream(trio.abc.Stream):
    """A stream whose both directions are in the snappy framing format."""

    def __init__(
        self,
        transport_stream: trio.abc.Stream,
        checkpoint: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint,
    ) -> None:
        self.transport_stream = transport_stream
        self._checkpoint = checkpoint
        self._compressor = snappy.StreamCompressor()
        self._decoder = SnappyDecoder()
        self._pending = b""
        self._sending = _Busy("sending")
        self._receiving = _Busy("receiving")

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        with self._sending:
            payload = self._compressor.compress(bytes(data)) if data else b""
            await self.transport_stream.send_all(payload)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        with self._receiving:
            if not self._pending:
                while True:
                    data = await self.transport_stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        self._decoder.eof()
                        return b""
                    decoded = self._decoder.feed(bytes(data))
                    if decoded:
                        self._pending = decoded
                        break
            else:
                await self._checkpoint()
            out = self._pending
            if max_bytes is not None and len(out) > max_bytes:
                self._pending = out[max_bytes:]
                return out[:max_bytes]
            self._pending = b""
            return out

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


# -- deflate --------------------------------------------------------------------------------


class DeflateStream(trio.abc.Stream):
    """A stream whose both directions are raw DEFLATE, each write sync-flushed."""

    def __init__(
        self,
        transport_stream: trio.abc.Stream,
        level: int,
        checkpoint: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint,
    ) -> None:
        self.transport_stream = transport_stream
        self._checkpoint = checkpoint
        self.level = level
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)
        # The last receive_some filled its limit: zlib may hold decoded output back even
        # with no input left (fuzz finding), so the next one asks it before reading.
        self._full = False
        self._sending = _Busy("sending")
        self._receiving = _Busy("receiving")

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        with self._sending:
            compressor = self._compressor
            payload = (
                compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH) if data else b""
            )
            await self.transport_stream.send_all(payload)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    @property
    def ended(self) -> bool:
        """The peer's DEFLATE stream ended with its final block (an EOF before it is Go's
        flate reader's "unexpected EOF")."""
        return self._decompressor.eof

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        # max_length bounds each call's output: a small, highly compressed input (a
        # "decompression bomb") is decoded max_bytes at a time, the rest kept back by zlib.
        limit = max_bytes or RECEIVE_SIZE
        with self._receiving:
            decompressor = self._decompressor
            tail = decompressor.unconsumed_tail
            full, self._full = self._full, False
            if tail or full:
                await self._checkpoint()
            while True:
                # The peer's DEFLATE stream ended (its final block). Checked even with input
                # left: zlib may keep bytes after the final block in unconsumed_tail, and
                # decompressing them again yields nothing, forever (fuzz finding).
                if decompressor.eof:
                    return b""
                if not tail and not full:
                    data = await self.transport_stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        return b""
                    tail = bytes(data)
                try:
                    out = decompressor.decompress(tail, limit)
                except zlib.error as err:
                    raise TransportError(f"flate: corrupt input - {err}") from None
                if out:
                    self._full = len(out) >= limit
                    return out
                full = False
                tail = decompressor.unconsumed_tail

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


# -- TLS (the server's context: nsqd/tls_config.py) -------------------------------------------

# Go's prettyConnectionState: the cipher suites it names (IANA id -> Go's name); any other
# suite, TLS 1.3's included, is "Unknown <id>".
_GO_CIPHER_NAMES = {
    0x0005: "TLS_RSA_WITH_RC4_128_SHA",
    0x000A: "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    0x002F: "TLS_RSA_WITH_AES_128_CBC_SHA",
    0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
    0xC007: "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    0xC009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    0xC00A: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    0xC011: "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    0xC012: "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    0xC013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    0xC014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    0xC02F: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    0xC02B: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
}
_GO_VERSION_NAMES = {
    "TLSv1": "TLS1.0",
    "TLSv1.1": "TLS1.1",
    "TLSv1.2": "TLS1.2",
    "TLSv1.3": "TLS1.3",
}
_VERSION_NUMBERS = {"TLSv1": 0x0301, "TLSv1.1": 0x0302, "TLSv1.2": 0x0303, "TLSv1.3": 0x0304}
# OpenSSL cipher name -> IANA id (the same in every context), from get_ciphers().
_cipher_ids: dict[str, int] = {}


def _cipher_id(context: ssl.SSLContext, name: str) -> int | None:
    if name not in _cipher_ids:
        _cipher_ids.update((c["name"], c["id"] & 0xFFFF) for c in context.get_ciphers())
    return _cipher_ids.get(name)


def tls_stats(stream: trio.SSLStream[trio.abc.Stream] | None) -> dict[str, object]:
    """ClientV2Stats' TLS fields of a connection, named as Go names them."""
    if stream is None:
        return {
            "tls": False,
            "tls_cipher_suite": "",
            "tls_version": "",
            "tls_negotiated_protocol": "",
            "tls_negotiated_protocol_is_mutual": False,
        }
    cipher = stream.cipher()
    version = stream.version() or ""
    suite = ""
    if cipher is not None:
        number = _cipher_id(stream.context, cipher[0])
        suite = (
            _GO_CIPHER_NAMES.get(number, f"Unknown {number}")
            if number is not None
            else f"Unknown {cipher[0]}"
        )
    return {
        "tls": True,
        "tls_cipher_suite": suite,
        "tls_version": _GO_VERSION_NAMES.get(
            version, f"Unknown {_VERSION_NUMBERS.get(version, 0)}"
        ),
        # No ALPN is offered; Go's NegotiatedProtocolIsMutual is deprecated and always true.
        "tls_negotiated_protocol": stream.selected_alpn_protocol() or "",
        "tls_negotiated_protocol_is_mutual": True,
    }
