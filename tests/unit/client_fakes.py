"""A fake nsqd speaking just enough V2 for trionsq.client's unit tests, over in-memory streams
(`install` makes every client connection a new in-memory connection to it)."""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from trionsq.client import connection as connection_module
from trionsq.protocol import encode_error, encode_message_frame, encode_response

Behaviour = Callable[["FakeConn", bytes, list[bytes], bytes | None], Awaitable[None]]


class FakeConn:
    def __init__(self, fake: FakeNSQD, stream: trio.abc.Stream, index: int) -> None:
        self.fake = fake
        self.stream = stream
        self.index = index
        self.buf = b""

    async def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    async def line(self) -> bytes:
        while b"\n" not in self.buf:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    async def respond(self, data: bytes) -> None:
        await self.stream.send_all(encode_response(data))

    async def error(self, data: bytes) -> None:
        await self.stream.send_all(encode_error(data))

    async def message(self, message_id: bytes, body: bytes, attempts: int = 1) -> None:
        await self.stream.send_all(encode_message_frame(message_id, 0, attempts, body))

    async def serve(self) -> None:
        try:
            assert await self.read(4) == b"  V2"
            while True:
                line = await self.line()
                name, *params = line.split(b" ")
                body = None
                if name in (b"IDENTIFY", b"AUTH", b"PUB", b"DPUB", b"MPUB"):
                    (size,) = struct.unpack(">i", await self.read(4))
                    body = await self.read(size)
                self.fake.commands.append((self.index, line))
                if body is not None:
                    self.fake.bodies.append(body)
                self.fake.changed.set()
                self.fake.changed = trio.Event()
                if name == b"IDENTIFY":
                    await self.respond(json.dumps(self.fake.identify_reply).encode())
                elif name in (b"SUB",):
                    await self.respond(b"OK")
                elif name == b"CLS":
                    await self.respond(b"CLOSE_WAIT")
                elif name in (b"RDY", b"FIN", b"REQ", b"TOUCH", b"NOP"):
                    if self.fake.on_command is not None:
                        await self.fake.on_command(self, name, params, body)
                else:
                    await self.fake.behaviour(self, name, params, body)
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.fake.closed.append(self.index)
            await self.stream.aclose()


async def _ok(conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None) -> None:
    await conn.respond(b"OK")


class FakeNSQD:
    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.commands: list[tuple[int, bytes]] = []
        self.closed: list[int] = []
        self.bodies: list[bytes] = []
        self.conns: list[FakeConn] = []
        self.behaviour: Behaviour = _ok
        self.on_command: Behaviour | None = None
        self.changed = trio.Event()
        self.identify_reply: dict[str, Any] = {"max_rdy_count": 2500, "version": "1.3.0"}
        self.addresses: list[str] = []

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        conn = FakeConn(self, server, len(self.conns))
        self.conns.append(conn)
        self.addresses.append(f"{host}:{port}")
        self.nursery.start_soon(conn.serve)
        return client

    def lines(self, *names: bytes) -> list[bytes]:
        return [line for _, line in self.commands if not names or line.split(b" ")[0] in names]

    async def wait_for(self, check: Callable[[], bool]) -> None:
        with trio.fail_after(5):
            while not check():
                await self.changed.wait()


def install(monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery) -> FakeNSQD:
    fake = FakeNSQD(nursery)
    monkeypatch.setattr(connection_module, "open_stream", fake.open_stream)
    return fake
