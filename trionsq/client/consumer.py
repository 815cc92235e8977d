"""`Consumer`: subscribes one topic/channel on every nsqd given or discovered via lookupd, with
go-nsq's conventions (docs/protocol.md §12): max_in_flight shared across connections (rotated when
it is smaller than the number of connections), exponential backoff on handler failures,
requeue delays growing with attempts, max_attempts with a give-up hook, graceful close. It runs
under asyncio or Trio (anyio)."""

from __future__ import annotations

import inspect
import logging
import math
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import httpx

from ..protocol import commands
from ..protocol.names import is_valid_channel_name, is_valid_topic_name
from .connection import Connection, parse_address
from .errors import ClientError, ConnectionClosedError
from .library import ANYIO, running
from .lookup import query_lookupds
from .message import Message
from .options import ConnectionOptions

__all__ = ["Consumer"]

log = logging.getLogger("trionsq.client")

Handler = Callable[[Message], Awaitable[Any]]
GiveUpHook = Callable[[Message], Any]


class Consumer:
    """Consume `topic`/`channel`.

    With a `handler` (``async def handler(message)``), messages are handled by up to
    `concurrency` tasks: FIN when it returns, REQ (with backoff) when it raises, unless it
    answered the message itself. Without one, iterate: ``async for message in consumer``
    and answer each message (`finish`/`requeue`).

    Options (go-nsq's names and defaults, durations in seconds): `max_in_flight` (1),
    `max_attempts` (5, 0 = unlimited) and `on_give_up`, `requeue_delay` (90, times attempts),
    `max_requeue_delay` (900), `backoff_multiplier` (1), `max_backoff_duration` (120),
    `lookupd_poll_interval` (60), `lookupd_poll_jitter` (0.3), `low_rdy_idle_timeout` (10),
    `rdy_redistribute_interval` (5), `reconnect_interval` (15, for nsqd_tcp_addresses),
    `close_timeout` (30, how long close waits for handlers), and any `ConnectionOptions` field.

    ``async with`` connects and subscribes to each of `nsqd_tcp_addresses` first, as go-nsq's
    ConnectToNSQDs: when one fails it raises `NotConnectedError` (refused, reset, timed out;
    `TLSError` when the TLS upgrade fails), `ProtocolError` (a reply outside the protocol) or
    `NSQError` (an error frame, e.g. ``E_UNAUTHORIZED`` for SUB). Later a lost connection to
    one of them is retried (logged, backing off up to `reconnect_interval`) until `close`;
    nsqds found through lookupd are connected in the background, a failure logged.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        handler: Handler | None = None,
        *,
        nsqd_tcp_addresses: Sequence[str] = (),
        lookupd_http_addresses: Sequence[str] = (),
        max_in_flight: int = 1,
        concurrency: int | None = None,
        max_attempts: int = 5,
        on_give_up: GiveUpHook | None = None,
        requeue_delay: float = 90.0,
        max_requeue_delay: float = 900.0,
        backoff_multiplier: float = 1.0,
        max_backoff_duration: float = 120.0,
        lookupd_poll_interval: float = 60.0,
        lookupd_poll_jitter: float = 0.3,
        low_rdy_idle_timeout: float = 10.0,
        rdy_redistribute_interval: float = 5.0,
        reconnect_interval: float = 15.0,
        close_timeout: float = 30.0,
        **options: Any,
    ) -> None:
        if not is_valid_topic_name(topic):
            raise ValueError(f"invalid topic name {topic!r}")
        if not is_valid_channel_name(channel):
            raise ValueError(f"invalid channel name {channel!r}")
        if not nsqd_tcp_addresses and not lookupd_http_addresses:
            raise ValueError("give nsqd_tcp_addresses or lookupd_http_addresses")
        self.topic = topic
        self.channel = channel
        self.handler = handler
        self.nsqd_tcp_addresses = [f"{h}:{p}" for h, p in map(parse_address, nsqd_tcp_addresses)]
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.max_in_flight = max(0, max_in_flight)
        self.concurrency = concurrency or max(1, min(self.max_in_flight, 100))
        self.max_attempts = max_attempts
        self.on_give_up = on_give_up
        self.requeue_delay = requeue_delay
        self.max_requeue_delay = max_requeue_delay
        self.backoff_multiplier = backoff_multiplier
        self.max_backoff_duration = max_backoff_duration
        ratio = max_backoff_duration / backoff_multiplier if backoff_multiplier > 0 else 1
        self.max_backoff_count = max(1, math.ceil(math.log2(max(ratio, 1))) + 1)
        self.lookupd_poll_interval = lookupd_poll_interval
        self.lookupd_poll_jitter = lookupd_poll_jitter
        self.low_rdy_idle_timeout = low_rdy_idle_timeout
        self.rdy_redistribute_interval = rdy_redistribute_interval
        self.reconnect_interval = reconnect_interval
        self.close_timeout = close_timeout
        self.options = ConnectionOptions.pick(options)
        #: Live, subscribed connections by nsqd address.
        self.connections: dict[str, Connection] = {}
        #: Counters: messages received, finished, requeued, given up.
        self.stats = {"received": 0, "finished": 0, "requeued": 0, "given_up": 0}
        self.backoff_counter = 0
        self.in_backoff_timeout = False
        self._connecting: set[str] = set()
        self._queue: deque[Message] = deque()
        self._library = ANYIO
        self._lot = ANYIO.new_parking_lot()
        #: The task group the background tasks run in; `_tasks` holds it and the caller of
        #: ``async with``'s exceptions.
        self._nursery: anyio.abc.TaskGroup | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._background_scope: anyio.CancelScope | None = None
        self._closing = False
        self._closed = anyio.Event()
        self._handling = 0
        self._idle = anyio.Event()

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        self._library = running()
        self._lot = self._library.new_parking_lot()
        outer = self._tasks = anyio.create_task_group()
        self._background_scope = anyio.CancelScope()
        await outer.__aenter__()
        try:
            nursery = self._nursery = await outer.start(self._background)
            for address in self.nsqd_tcp_addresses:
                if address not in self._connecting:
                    self._connecting.add(address)
                    await nursery.start(self._connection_task, address, True)
        except BaseException as exc:
            self._closing = True
            self._background_scope.cancel()
            await outer.__aexit__(None, None, None)
            raise exc from exc.__cause__
        if self.lookupd_http_addresses:
            nursery.start_soon(self._lookupd_loop)
        nursery.start_soon(self._redistribute_loop)
        if self.handler is not None:
            for _ in range(self.concurrency):
                nursery.start_soon(self._worker)
        return self

    async def _background(self, *, task_status: anyio.abc.TaskStatus[anyio.abc.TaskGroup]) -> None:
        """The task group every background task runs in; `close` cancels it."""
        assert self._background_scope is not None
        with self._background_scope:
            async with anyio.create_task_group() as tasks:
                task_status.started(tasks)
                await anyio.sleep_forever()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tasks is not None and self._background_scope is not None
        try:
            if exc is None:
                await self.close()
        finally:
            self._closing = True
            self._background_scope.cancel()
        if isinstance(exc, Exception):
            # The caller's own error leaves as itself, not in the task group's ExceptionGroup.
            await self._tasks.__aexit__(None, None, None)
            return None
        result: bool | None = await self._tasks.__aexit__(exc_type, exc, tb)
        return result

    async def close(self) -> None:
        """RDY 0 and CLS everywhere, requeue messages not yet handed out, let running handlers
        finish (at most `close_timeout`), then close the connections."""
        if self._closing:
            if not self._closed.is_set():
                await self._closed.wait()
            return
        self._closing = True
        conns = list(self.connections.values())
        for conn in conns:
            self._set_rdy(conn, 0, force=True)
        with anyio.move_on_after(min(self.close_timeout, 5.0)):
            async with anyio.create_task_group() as tasks:
                for conn in conns:
                    tasks.start_soon(self._cls, conn)
        while self._queue:
            self._queue.popleft().requeue(0, backoff=False)
        self._lot.unpark_all()
        with anyio.move_on_after(self.close_timeout):
            while self._handling or any(c.in_flight for c in conns if not c.closed):
                self._idle = anyio.Event()
                with anyio.move_on_after(0.05):
                    await self._idle.wait()
        for conn in conns:
            await conn.aclose()
        self._closed.set()
        if self._background_scope is not None:
            self._background_scope.cancel()

    @staticmethod
    async def _cls(conn: Connection) -> None:
        try:
            await conn.request(commands.cls())
        except ClientError:
            pass

    # -- connections ----------------------------------------------------------------------

    def connect_to_nsqd(self, address: str) -> None:
        """Connect to one more nsqd (no-op if already connected or connecting)."""
        self._start_connection(address, direct=False)

    def _start_connection(self, address: str, direct: bool) -> None:
        if address in self._connecting or self._closing:
            return
        assert self._nursery is not None
        self._connecting.add(address)
        self._nursery.start_soon(self._connection_task, address, direct)

    async def _connection_task(
        self,
        address: str,
        direct: bool,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect, SUB and serve `address` until the connection ends; a `direct` one (from
        nsqd_tcp_addresses) is then retried until `close`. Started with `nursery.start`, the
        first attempt's failure is raised to the starter (``async with``)."""
        attempt = 0
        first: anyio.abc.TaskStatus[None] | None = task_status
        try:
            while not self._closing:
                conn = Connection(address, self.options, on_messages=self._on_messages)
                try:
                    await self._serve_connection(address, conn, first)
                    first = None
                    attempt = 0
                except ClientError as exc:
                    if first is not None and first is not anyio.TASK_STATUS_IGNORED:
                        raise
                    first = None
                    log.warning("%s: %s", address, exc)
                if not direct or self._closing:
                    return
                attempt += 1
                await anyio.sleep(min(self.reconnect_interval, 0.1 * 2**attempt))
        finally:
            self._connecting.discard(address)

    async def _serve_connection(
        self, address: str, conn: Connection, task_status: anyio.abc.TaskStatus[None] | None
    ) -> None:
        """Connect and SUB (raising the `ClientError` if either fails), report started to
        `task_status`, then serve until the connection ends."""
        failure: ClientError | None = None
        try:
            async with anyio.create_task_group() as tasks:
                try:
                    await tasks.start(conn.run)
                    await conn.request(commands.sub(self.topic, self.channel))
                except ClientError as exc:
                    conn.close()
                    failure = exc
                else:
                    self.connections[address] = conn
                    log.info("connected to %s", address)
                    self._distribute()
                    if task_status is not None:
                        task_status.started()
        finally:
            if self.connections.get(address) is conn:
                del self.connections[address]
                self._forget(conn)
        if failure is not None:
            raise failure

    def _forget(self, conn: Connection) -> None:
        """A connection ended: its messages can no longer be answered; rebalance RDY."""
        if any(m._conn is conn for m in self._queue):
            self._queue = deque(m for m in self._queue if m._conn is not conn)
        conn.in_flight = 0
        if not self._closing:
            self._distribute()

    async def _lookupd_loop(self) -> None:
        interval = self.lookupd_poll_interval
        async with httpx.AsyncClient(timeout=5.0) as client:
            # go-nsq: jitter before the first poll after the initial one.
            first = True
            while True:
                found = await query_lookupds(client, self.lookupd_http_addresses, self.topic)
                for address in found:
                    self._start_connection(address, direct=False)
                if first:
                    first = False
                    await anyio.sleep(random.random() * self.lookupd_poll_jitter * interval)
                await anyio.sleep(interval)

    async def query_lookupd(self) -> set[str]:
        """Poll the lookupds now; returns the producers found (and connects to new ones)."""
        async with httpx.AsyncClient(timeout=5.0) as client:
            found = await query_lookupds(client, self.lookupd_http_addresses, self.topic)
        for address in found:
            self._start_connection(address, direct=False)
        return found

    # -- RDY ------------------------------------------------------------------------------

    def per_connection_max_in_flight(self) -> int:
        n = len(self.connections)
        mif = self.max_in_flight
        return min(max(1, mif // n), mif) if n else mif

    def _set_rdy(self, conn: Connection, count: int, force: bool = False) -> None:
        count = min(count, conn.max_rdy_count)
        if conn.closed or (conn.rdy == count and not force):
            return
        conn.rdy = count
        if count:
            conn.rdy_time = anyio.current_time()
        try:
            conn.send(commands.rdy(count))
        except ConnectionClosedError:
            pass

    def _distribute(self) -> None:
        """Give each connection its RDY: the even share, or (max_in_flight < connections)
        RDY 1 to up to max_in_flight of them; nothing while backing off."""
        if self._closing:
            return
        conns = list(self.connections.values())
        if not conns:
            return
        if self.backoff_counter > 0:
            if not self.in_backoff_timeout and not any(c.rdy for c in conns):
                self._set_rdy(random.choice(conns), 1)  # a connection to test with
            for conn in conns:
                if conn.rdy > 1:
                    self._set_rdy(conn, 0)
            return
        mif = self.max_in_flight
        if len(conns) <= mif:
            share = self.per_connection_max_in_flight()
            for conn in conns:
                self._set_rdy(conn, share)
            return
        # Low-RDY mode: at most max_in_flight connections get RDY 1.
        for conn in conns:
            if conn.rdy > 1:
                self._set_rdy(conn, 1)
        available = mif - sum(c.rdy for c in conns)
        idle = [c for c in conns if c.rdy == 0]
        random.shuffle(idle)
        for conn in idle[: max(0, available)]:
            self._set_rdy(conn, 1)

    def redistribute(self) -> None:
        """go-nsq's redistributeRDY for max_in_flight < connections: connections idle longer
        than low_rdy_idle_timeout give their RDY to connections that had none."""
        conns = list(self.connections.values())
        if self._closing or self.backoff_counter > 0 or len(conns) <= self.max_in_flight:
            return
        now = anyio.current_time()
        starved = [c for c in conns if c.rdy == 0]
        freed = []
        for conn in conns:
            if (
                conn.rdy
                and now - max(conn.last_message_time, conn.rdy_time) > self.low_rdy_idle_timeout
            ):
                self._set_rdy(conn, 0)
                freed.append(conn)
        available = self.max_in_flight - sum(c.rdy for c in conns)
        random.shuffle(starved)
        for conn in (starved + freed)[: max(0, available)]:
            self._set_rdy(conn, 1)

    async def _redistribute_loop(self) -> None:
        while True:
            await anyio.sleep(self.rdy_redistribute_interval)
            self.redistribute()

    # -- backoff --------------------------------------------------------------------------

    def _message_answered(self, conn: Connection, success: bool, neutral: bool) -> None:
        if success and not neutral:
            self.stats["finished"] += 1
        else:
            self.stats["requeued"] += 1
        if neutral or self.in_backoff_timeout:
            return
        if success and self.backoff_counter == 0:
            return  # the common case: nothing to do (RDY is a window on nsqd)
        self.backoff_signal(success)

    def backoff_signal(self, success: bool) -> None:
        """go-nsq's startStopContinueBackoff: a failure steps the backoff level up, a success
        down; at level 0 full RDY resumes, above it RDY 0 everywhere for
        backoff_multiplier * 2**(level-1) seconds (capped), then RDY 1 on one connection."""
        if self.in_backoff_timeout:
            return
        changed = False
        if success:
            if self.backoff_counter > 0:
                self.backoff_counter -= 1
                changed = True
        elif self.backoff_counter < self.max_backoff_count:
            self.backoff_counter += 1
            changed = True
        if self.backoff_counter == 0:
            if changed:
                log.info("backoff: resuming")
                self._distribute()
            return
        duration = min(
            self.backoff_multiplier * 2 ** (self.backoff_counter - 1), self.max_backoff_duration
        )
        log.info("backoff: level %d, pausing %.3fs", self.backoff_counter, duration)
        for conn in self.connections.values():
            self._set_rdy(conn, 0)
        self.in_backoff_timeout = True
        if self._nursery is not None and not self._closing:
            self._nursery.start_soon(self._end_backoff_timeout, duration)

    async def _end_backoff_timeout(self, duration: float) -> None:
        await anyio.sleep(duration)
        self.in_backoff_timeout = False
        conns = [c for c in self.connections.values() if not c.closed]
        if conns and not self._closing:
            self._set_rdy(random.choice(conns), 1)  # test the waters with one message

    def requeue_delay_for(self, message: Message) -> float:
        return float(min(self.requeue_delay * message.attempts, self.max_requeue_delay))

    # -- delivery -------------------------------------------------------------------------

    def _on_messages(self, conn: Connection, payloads: list[bytes]) -> None:
        queue = self._queue
        for payload in payloads:
            queue.append(Message(payload, conn, self))
        conn.in_flight += len(payloads)
        self.stats["received"] += len(payloads)
        self._lot.unpark(count=len(payloads))

    async def _give_up(self, message: Message) -> None:
        self.stats["given_up"] += 1
        log.warning("giving up on %s after %d attempts", message.id.decode(), message.attempts)
        if self.on_give_up is not None:
            try:
                result = self.on_give_up(message)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("on_give_up failed")
        if not message.responded:
            message.responded = True
            message._send(commands.fin(message.id))
            message._conn.in_flight -= 1

    async def _worker(self) -> None:
        queue = self._queue
        handler = self.handler
        assert handler is not None
        max_attempts = self.max_attempts
        while True:
            if not queue:
                if self._closing:
                    return
                await self._lot.park()
                continue
            message = queue.popleft()
            self._handling += 1
            try:
                if max_attempts and message.attempts > max_attempts:
                    await self._give_up(message)
                    continue
                try:
                    await handler(message)
                except Exception:
                    log.exception("handler failed on %s", message.id.decode())
                    message.requeue()
                else:
                    message.finish()
            finally:
                self._handling -= 1
                if self._closing:
                    self._idle.set()

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        if self.handler is not None:
            raise TypeError("a Consumer with a handler cannot be iterated")
        queue = self._queue
        while True:
            while not queue:
                if self._closing:
                    raise StopAsyncIteration
                await self._lot.park()
            message = queue.popleft()
            if self.max_attempts and message.attempts > self.max_attempts:
                await self._give_up(message)
                continue
            await self._library.checkpoint_if_cancelled()
            return message
