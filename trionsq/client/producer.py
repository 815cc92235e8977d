"""`Producer`: publishes to one nsqd over one connection, reconnecting when needed.

Commands are pipelined (at most `max_pipeline` outstanding, responses matched in order) and
concurrent `pub` calls on one topic made while earlier commands are outstanding are coalesced
into a single MPUB; every caller still gets its own outcome (the MPUB's). It runs under asyncio
or Trio (anyio)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from ..protocol import commands
from ..protocol.names import is_valid_topic_name
from .connection import Connection, Reply, parse_address
from .errors import ClientError, ConnectionClosedError, NotConnectedError, NSQError
from .library import ANYIO, Event, running
from .options import ConnectionOptions
from .streams import STREAM_ERRORS

__all__ = ["Producer", "check_publish"]

log = logging.getLogger("trionsq.client")


class _Batch(Reply):
    """One command to write: a PUB/MPUB being filled by `pub` calls, or a finished MPUB/DPUB."""

    __slots__ = ("bodies", "data", "open", "size", "topic")

    def __init__(
        self, topic: str, data: bytes | None = None, new_event: Callable[[], Event] = anyio.Event
    ) -> None:
        super().__init__(new_event)
        self.topic = topic
        self.bodies: list[bytes] = []
        self.size = 0
        self.data = data
        self.open = data is None

    def encode(self) -> bytes:
        if self.data is not None:
            return self.data
        if len(self.bodies) == 1:
            return commands.pub(self.topic, self.bodies[0])
        return commands.mpub(self.topic, self.bodies)


def check_publish(topic: str, bodies: Sequence[bytes]) -> None:
    """What nsqd would refuse in a publish, refused here with its codes."""
    if not is_valid_topic_name(topic):
        raise NSQError("E_BAD_TOPIC", f'topic name "{topic}" is not valid')
    if not bodies:
        raise NSQError("E_BAD_BODY", "no message bodies")
    for body in bodies:
        if not body:
            raise NSQError("E_BAD_MESSAGE", "invalid message body size 0")


class Producer:
    """Publish to the nsqd at `address` (``"host:port"``; ValueError when it has no port).

    ``async with Producer("127.0.0.1:4150") as p: await p.pub("topic", b"body")``.

    Options: `max_pipeline` (outstanding commands, 16), `max_batch_count` (messages coalesced
    into one MPUB, 1000), `max_batch_bytes` (4 MiB, under nsqd's --max-body-size),
    `close_timeout` (seconds `close` waits for outstanding commands, 10), and any
    `ConnectionOptions` field.

    ``async with`` connects first: it raises `NotConnectedError` when nsqd cannot be reached
    (refused, reset, timed out; `TLSError` when the TLS upgrade fails), `ProtocolError` for a
    reply outside the protocol, `NSQError` for an error frame (``E_AUTH_FAILED``). A failed
    publish raises `NSQError` (with `.code`), `ConnectionClosedError` when the connection
    ended with it outstanding (it may or may not have been published), or the error of the
    reconnection it waited for (the same classes as ``async with``). All are `ClientError`s.
    """

    def __init__(
        self,
        address: str,
        *,
        max_pipeline: int = 16,
        max_batch_count: int = 1000,
        max_batch_bytes: int = 4 * 1024 * 1024,
        close_timeout: float = 10.0,
        **options: Any,
    ) -> None:
        parse_address(address)  # a ValueError now, not at connect time
        self.address = address
        self.options = ConnectionOptions.pick(options)
        self.max_pipeline = max(1, max_pipeline)
        self.max_batch_count = max(1, max_batch_count)
        self.max_batch_bytes = max_batch_bytes
        self.close_timeout = close_timeout
        self.connection: Connection | None = None
        self._queue: deque[_Batch] = deque()
        self._open: dict[str, _Batch] = {}
        self._library = ANYIO
        self._lot = ANYIO.new_parking_lot()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._closing = False
        #: Callers waiting for their command's outcome.
        self._waiting = 0

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        self._library = running()
        self._lot = self._library.new_parking_lot()
        tasks = self._tasks = anyio.create_task_group()
        await tasks.__aenter__()
        try:
            await self._connect()
        except BaseException as exc:
            tasks.cancel_scope.cancel()
            await tasks.__aexit__(None, None, None)
            raise exc from exc.__cause__
        tasks.start_soon(self._sender)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tasks is not None
        try:
            if exc is None:
                await self.close()
        finally:
            self._closing = True
            self._tasks.cancel_scope.cancel()
        if isinstance(exc, Exception):
            # The caller's own error leaves as itself, not in the task group's ExceptionGroup.
            await self._tasks.__aexit__(None, None, None)
            return None
        result: bool | None = await self._tasks.__aexit__(exc_type, exc, tb)
        return result

    async def close(self) -> None:
        """Stop accepting publishes, wait (bounded) for the outstanding ones, disconnect."""
        self._closing = True
        with anyio.move_on_after(self.close_timeout):
            while self._queue or (self.connection and self.connection.outstanding):
                reply: Reply | None = self._queue[-1] if self._queue else None
                if reply is None and self.connection is not None:
                    reply = self.connection.oldest_reply()
                if reply is None:
                    break
                await reply.event.wait()
        if self.connection is not None:
            await self.connection.aclose()
        for batch in self._queue:
            batch.fail(ConnectionClosedError("producer closed"))
        self._queue.clear()

    async def _connect(self) -> Connection:
        assert self._tasks is not None
        conn = Connection(self.address, self.options)
        await self._tasks.start(conn.run)
        self.connection = conn
        return conn

    # -- publishing -----------------------------------------------------------------------

    async def pub(self, topic: str, body: bytes) -> None:
        """Publish one message (possibly coalesced with concurrent ones into an MPUB)."""
        if not body or self._closing:
            check_publish(topic, [body])
            self._not_closing()
        if self._idle():
            check_publish(topic, [body])
            await self._send_now(_Batch(topic, commands.pub(topic, body), self._library.new_event))
            return
        batch = self._open.get(topic)
        if batch is None or not batch.open:
            check_publish(topic, [body])
            batch = _Batch(topic, None, self._library.new_event)
            self._queue.append(batch)
            self._open[topic] = batch
            self._lot.unpark_all()
        batch.bodies.append(body)
        batch.size += len(body) + 4
        if len(batch.bodies) >= self.max_batch_count or batch.size >= self.max_batch_bytes:
            batch.open = False
        await self._wait(batch)

    async def mpub(self, topic: str, bodies: list[bytes]) -> None:
        """Publish several messages in one MPUB (atomically: all or none)."""
        bodies = list(bodies)
        check_publish(topic, bodies)
        batch = _Batch(topic, commands.mpub(topic, bodies), self._library.new_event)
        self._not_closing()
        conn = self.connection
        if (
            not self._queue
            and conn is not None
            and not conn.closed
            and conn.outstanding < self.max_pipeline
        ):
            # Nothing to coalesce an MPUB with: straight to the connection while the
            # pipeline has room (the order holds: nothing is queued before it).
            conn.send_expecting(batch.encode(), batch, now=True)
            await self._wait(batch)
            return
        await self._submit(batch, now=False)

    async def dpub(self, topic: str, delay_ms: int, body: bytes) -> None:
        """Publish one message delivered after `delay_ms` milliseconds."""
        check_publish(topic, [body])
        command = commands.dpub(topic, int(delay_ms), body)
        await self._submit(_Batch(topic, command, self._library.new_event), now=True)

    def _not_closing(self) -> None:
        if self._closing:
            raise ConnectionClosedError("producer is closed")

    def _idle(self) -> bool:
        """Nothing is queued or outstanding, and no other caller waits for an outcome: a
        command can go straight to the connection. (Callers still waiting, even if their
        command was answered, are about to publish again: theirs and this one are better
        coalesced by the sender.)"""
        conn = self.connection
        return (
            not self._waiting
            and not self._queue
            and conn is not None
            and not conn.closed
            and not conn.outstanding
        )

    async def _wait(self, batch: _Batch) -> None:
        self._waiting += 1
        try:
            await batch.wait()
        finally:
            self._waiting -= 1

    async def _send_now(self, batch: _Batch) -> None:
        """Write `batch` from the caller's task (no hop through the sender) and wait for it."""
        assert self.connection is not None and batch.data is not None
        self.connection.send_expecting(batch.data, batch, now=True)
        await self._wait(batch)

    async def _submit(self, batch: _Batch, *, now: bool) -> None:
        self._not_closing()
        if now and self._idle():
            await self._send_now(batch)
            return
        self._queue.append(batch)
        self._lot.unpark_all()
        await self._wait(batch)

    async def _sender(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                await self._lot.park()
                continue
            conn = self.connection
            if conn is None or conn.closed:
                try:
                    conn = await self._connect()
                except ClientError as exc:
                    self._fail_queued(exc)
                    continue
                except STREAM_ERRORS as exc:  # pragma: no cover
                    # Connection.run raises ClientErrors; this keeps the promise if not.
                    error = NotConnectedError(f"cannot connect to {self.address}: {exc}")
                    error.__cause__ = exc
                    self._fail_queued(error)
                    continue
            while conn.outstanding >= self.max_pipeline:
                oldest = conn.oldest_reply()
                assert oldest is not None
                await oldest.event.wait()
            if conn.closed:
                continue
            room = self.max_pipeline - conn.outstanding
            for _ in range(min(room, len(queue))):
                batch = queue.popleft()
                if batch.open:
                    batch.open = False
                    if self._open.get(batch.topic) is batch:
                        del self._open[batch.topic]
                conn.send_expecting(batch.encode(), batch)
            # Let the writer run and callers add to new batches before looking again.
            await self._library.checkpoint()

    def _fail_queued(self, error: BaseException) -> None:
        while self._queue:
            batch = self._queue.popleft()
            batch.open = False
            batch.fail(error)
        self._open.clear()
