"""In-process nsqd for tests: the daemon in the test's nursery, clients on in-memory streams,
so that with Trio's MockClock (the `autojump_clock` fixture) timeouts are exact and instant."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.options import NSQDOptions
from trionsq.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    Message,
    decode_message,
    identify,
    rdy,
    sub,
)


async def start_nsqd(nursery: trio.Nursery, data_path: str, **overrides: Any) -> NSQD:
    # No HTTP/HTTPS listener unless a test asks (never NSQ's 0.0.0.0:4151/4152: see .ci/run).
    options = dataclasses.replace(
        NSQDOptions(),
        tcp_address="127.0.0.1:0",
        http_address="",
        https_address="",
        data_path=data_path,
        node_id=7,
    )
    options = dataclasses.replace(options, **overrides)
    nsqd = NSQD(options, run_blocking=run_inline)
    await nursery.start(nsqd.run)
    return nsqd


async def run_inline(fn: Callable[..., Any], *args: Any) -> Any:
    """Disk syncs in the test's own thread: a MockClock must not jump while a thread works."""
    return fn(*args)


class Conn:
    """A client connection over an in-memory stream."""

    def __init__(self, nsqd: NSQD) -> None:
        client_side, server_side = trio.testing.memory_stream_pair()
        nsqd.handle_stream(server_side)
        self.stream = client_side
        self.decoder = FrameDecoder()
        self.heartbeats = 0
        #: Answer heartbeats with NOP (for waits longer than two heartbeat intervals).
        self.answer_heartbeats = False

    @classmethod
    async def open(cls, nsqd: NSQD, **identify_fields: Any) -> Conn:
        conn = cls(nsqd)
        await conn.send(MAGIC_V2)
        if identify_fields:
            await conn.send(identify(identify_fields))
            assert await conn.response() == b"OK"
        return conn

    @classmethod
    async def consumer(
        cls, nsqd: NSQD, topic: str, channel: str, ready: int = 0, **identify_fields: Any
    ) -> Conn:
        conn = await cls.open(nsqd, **identify_fields)
        await conn.send(sub(topic, channel))
        assert await conn.response() == b"OK"
        if ready:
            await conn.send(rdy(ready))
        return conn

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def frame(self, skip_heartbeats: bool = True) -> tuple[int, bytes]:
        """The next frame; raises EOFError when the server closed the connection."""
        while True:
            frame = self.decoder.next_frame()
            if frame is None:
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError("connection closed")
                self.decoder.feed(data)
                continue
            if frame == (FRAME_TYPE_RESPONSE, HEARTBEAT):
                self.heartbeats += 1
                if self.answer_heartbeats:
                    await self.send(b"NOP\n")
                if skip_heartbeats:
                    continue
            return frame

    async def response(self) -> bytes:
        frame_type, data = await self.frame()
        assert frame_type == FRAME_TYPE_RESPONSE, (frame_type, data)
        return data

    async def error(self) -> bytes:
        frame_type, data = await self.frame()
        assert frame_type == FRAME_TYPE_ERROR, (frame_type, data)
        return data

    async def message(self) -> Message:
        frame_type, data = await self.frame()
        assert frame_type == FRAME_TYPE_MESSAGE, (frame_type, data)
        return decode_message(data)

    async def messages(self, count: int) -> list[Message]:
        return [await self.message() for _ in range(count)]

    async def no_frame_for(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            frame = await self.frame()
            raise AssertionError(f"unexpected frame {frame!r}")

    async def closed(self) -> bool:
        """Whether the server closes the connection (reading until EOF, skipping frames)."""
        try:
            while True:
                await self.frame()
        except EOFError:
            return True

    async def aclose(self) -> None:
        await self.stream.aclose()
