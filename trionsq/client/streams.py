"""The byte streams a client connection runs over, on asyncio or Trio (through anyio): TCP from
`open_stream`, the TLS upgrade from `start_tls`, and the snappy / deflate layers shared with
nsqd (net/transport.py).

Every layer has the `trio.abc.Stream` shape (``receive_some`` returning b"" at the end of the
stream, ``send_all``, ``aclose``) whichever library runs it, so the compression layers stack
on anyio's sockets and TLS streams under asyncio as they do under Trio."""

from __future__ import annotations

import asyncio
import socket
import ssl

import anyio
import anyio.abc
import sniffio
import trio
from anyio.streams.tls import TLSStream

__all__ = [
    "STREAM_ERRORS",
    "AnyioStream",
    "PrefixedStream",
    "open_stream",
    "start_tls",
]

#: What a broken or closed connection raises, under either library.
STREAM_ERRORS: tuple[type[BaseException], ...] = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)

_RECEIVE_SIZE = 65536


class AnyioStream(trio.abc.Stream):
    """An anyio byte stream in the `trio.abc.Stream` shape, with `write_now` on a plain TCP
    socket."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.anyio_stream = stream
        self._socket: socket.socket | None = None
        self._transport: asyncio.WriteTransport | None = None
        if isinstance(stream, anyio.abc.SocketStream):  # not TLS: its bytes are not ours
            # anyio's asyncio streams write through an asyncio transport, which may hold
            # bytes back: a write must go through it to keep the order. Trio's have no
            # buffer of their own, so the socket itself is the way.
            transport = getattr(stream, "_transport", None)
            if isinstance(transport, asyncio.WriteTransport):
                self._transport = transport
            elif sniffio.current_async_library() == "trio":
                self._socket = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)

    def write_now(self, data: bytes) -> int:
        """Write what the socket takes of `data` without waiting, when no `send_all` is under
        way (the caller's promise): the bytes written, 0 when it takes none or this stream
        cannot (a write error is left for the next `send_all` to raise)."""
        if self._transport is not None:
            if self._transport.is_closing():
                return 0
            self._transport.write(data)  # what the socket does not take now, it keeps
            return len(data)
        if self._socket is not None:
            try:
                return self._socket.send(data)
            except OSError:  # would block, or broken: send_all finds out
                return 0
        return 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            return await self.anyio_stream.receive(max_bytes or _RECEIVE_SIZE)
        except anyio.EndOfStream:
            return b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.anyio_stream.send(data)  # type: ignore[arg-type]

    async def wait_send_all_might_not_block(self) -> None:
        await anyio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await self.anyio_stream.aclose()


class PrefixedStream(trio.abc.Stream):
    """A stream that first returns bytes already read from the stream beneath."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.transport_stream = stream
        self._prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            await anyio.lowlevel.checkpoint()
            data, self._prefix = self._prefix, b""
            return data
        return bytes(await self.transport_stream.receive_some(max_bytes))

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


async def open_stream(host: str, port: int) -> trio.abc.Stream:
    """How connections are opened: TCP (tests replace it with in-memory streams). A failure
    is the OSError of the attempt (anyio's "All connection attempts failed" keeps it as its
    cause, which Go's wording of the error reads)."""
    return AnyioStream(await anyio.connect_tcp(host, port))


async def start_tls(
    stream: trio.abc.Stream, context: ssl.SSLContext, server_hostname: str
) -> trio.abc.Stream:
    """The TLS upgrade of a stream from `open_stream`, its handshake done. nsqd may close
    without TLS's close_notify: that reads as the end of the stream, not an error."""
    if not isinstance(stream, AnyioStream):
        raise TypeError(f"TLS needs a stream from open_stream, not {stream!r}")
    tls = await TLSStream.wrap(
        stream.anyio_stream,
        hostname=server_hostname,
        ssl_context=context,
        standard_compatible=False,
    )
    return AnyioStream(tls)
