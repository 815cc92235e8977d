"""`ReaderRuntime`: the NSQ side of the streaming source, living in the long-lived driver-side
reader process. A daemon thread runs a Trio loop that holds the nsqd connections (SUB'd, each
with a fixed RDY window), buffers every received message in wire form under a sequence number,
TOUCHes unfinished messages so they stay in flight, and FINs them on the connection that
received them once Spark commits the batch holding them. Spark's calls reach the loop through
``trio.from_thread``; no state is shared outside it."""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import trio

from ..client.connection import Connection, parse_address
from ..client.errors import ClientError, ConnectionClosedError, NSQError
from ..client.lookup import query_lookupds
from ..client.options import ConnectionOptions
from ..protocol import commands
from .options import SourceOptions

__all__ = ["BatchSlice", "ReaderRuntime"]

log = logging.getLogger("trionsq.spark")

_TS = struct.Struct(">q")
T = TypeVar("T")

#: SUB errors that retrying will not fix: they fail the query.
_FATAL_SUB = ("E_BAD_TOPIC", "E_BAD_CHANNEL", "E_UNAUTHORIZED", "E_AUTH_FAILED", "E_AUTH_FIRST")


@dataclass
class BatchSlice:
    """Messages ``[start, end)`` of the buffer: wire payloads and the nsqd each came from."""

    payloads: list[bytes]
    nsqd: list[str]


class ReaderRuntime:
    """The consumer behind one streaming query run (one reader session).

    Sequence numbers count messages received in this session from 0. `plan` answers Spark's
    ``latestOffset``, `slice` its ``partitions``, `finish` its ``commit``.
    """

    def __init__(self, options: SourceOptions, session: str) -> None:
        self.options = options
        self.session = session
        self._payloads: list[bytes] = []
        self._conns: list[Connection] = []
        #: Sequence number of ``_payloads[0]`` (everything below was FIN'd).
        self._base = 0
        self._live: set[Connection] = set()
        self._nsqds: set[str] = set()
        self._error: BaseException | None = None
        self._stopping = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._data = trio.Event()
        self._stop = trio.Event()
        self._started = threading.Event()
        #: Trigger.AvailableNow: messages published after this (ns) are left for a later run.
        self._frontier_ns: int | None = None
        self._done: set[Connection] = set()
        self._available_now_since = 0.0
        self.stats = {"received": 0, "finished": 0, "touched": 0, "requeued": 0}

    # -- lifecycle (Spark's thread) -------------------------------------------------------

    def start(self) -> None:
        """Start the Trio thread and wait until it runs."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._thread_main, name=f"trionsq-nsq-reader-{self.session[:8]}", daemon=True
        )
        self._thread.start()
        self._started.wait(30)
        self._check()

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # surfaced to Spark by the next call
            self._error = exc
            log.exception("NSQ reader loop failed")
        finally:
            self._started.set()

    def stop(self, timeout: float = 10.0) -> None:
        """REQ every unfinished message (so nsqd redelivers it at once), CLS, close."""
        if self._thread is None or self._token is None or not self._thread.is_alive():
            return
        try:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        except trio.RunFinishedError:
            return
        self._thread.join(timeout)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        self._check()
        assert self._token is not None
        try:
            return trio.from_thread.run_sync(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            self._check()
            raise RuntimeError("the NSQ reader loop has stopped") from None

    def _check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"NSQ reader failed: {self._error}") from self._error

    # -- Spark's calls --------------------------------------------------------------------

    def plan(self, start: int, limit: int | None, wait: bool) -> int:
        """The end (exclusive) of the next batch starting at `start`, at most `limit` rows
        and at most half of any nsqd's in-flight window (so the window never fills with one
        uncommitted batch: Spark commits a batch only when it plans the next). With `wait`
        (Trigger.AvailableNow) block until there is data or every connection is done."""
        if wait:
            self._check()
            assert self._token is not None
            trio.from_thread.run(self._wait_for_data, start, trio_token=self._token)
        return self._call(self._plan, start, limit)

    def slice(self, start: int, end: int) -> BatchSlice:
        return self._call(self._slice, start, end)

    def finish(self, end: int) -> int:
        """FIN every message below `end`; returns how many were FIN'd."""
        return self._call(self._finish, end)

    def prepare_available_now(self) -> None:
        self._call(self._prepare_available_now, time.time_ns())

    def received(self) -> int:
        """The sequence number the next message will get."""
        return self._call(lambda: self._base + len(self._payloads))

    # -- the loop (Trio's thread) ---------------------------------------------------------

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        opts = self.options
        try:
            async with trio.open_nursery() as nursery:
                for address in opts.nsqd:
                    self._start_nsqd(nursery, address)
                if opts.lookupd:
                    nursery.start_soon(self._lookupd_loop, nursery)
                nursery.start_soon(self._touch_loop)
                self._started.set()
                await self._stop.wait()
                await self._shutdown()
                nursery.cancel_scope.cancel()
        finally:
            self._started.set()

    def _conn_options(self) -> ConnectionOptions:
        return self.options.connection_options()

    def _start_nsqd(self, nursery: trio.Nursery, address: str) -> None:
        host, port = parse_address(address)
        address = f"{host}:{port}"
        if address in self._nsqds:
            return
        self._nsqds.add(address)
        for _ in range(self.options.connections_per_nsqd):
            nursery.start_soon(self._connection_task, address)

    async def _lookupd_loop(self, nursery: trio.Nursery) -> None:
        opts = self.options
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                for address in await query_lookupds(client, opts.lookupd, opts.topic):
                    self._start_nsqd(nursery, address)
                await trio.sleep(opts.lookupd_poll_interval)

    async def _connection_task(self, address: str) -> None:
        opts = self.options
        delay = 0.1
        while not self._stopping:
            conn = Connection(address, self._conn_options(), on_messages=self._on_messages)
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(conn.run)
                    await conn.request(commands.sub(opts.topic, opts.channel))
                    rdy = min(opts.rdy_per_connection, conn.max_rdy_count)
                    conn.rdy = rdy
                    conn.last_message_time = trio.current_time()
                    conn.send(commands.rdy(rdy))
                    self._live.add(conn)
                    delay = 0.1
            except NSQError as exc:
                if exc.code in _FATAL_SUB:
                    self._error = exc
                    self._data.set()
                    return
                log.warning("%s: %s", address, exc)
            except (OSError, ClientError, trio.BrokenResourceError) as exc:
                log.warning("%s: %s", address, exc)
            finally:
                self._live.discard(conn)
                self._data.set()  # a waiting AvailableNow plan re-checks
            await trio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _on_messages(self, conn: Connection, payloads: list[bytes]) -> None:
        frontier = self._frontier_ns
        if frontier is not None:
            kept = []
            for payload in payloads:
                if _TS.unpack_from(payload)[0] > frontier:
                    # Published after Trigger.AvailableNow started: not this run's data.
                    self._requeue(conn, payload)
                    if conn not in self._done:
                        self._done.add(conn)
                        conn.rdy = 0
                        conn.send(commands.rdy(0))
                else:
                    kept.append(payload)
            payloads = kept
        if not payloads:
            return
        self._payloads += payloads
        self._conns += [conn] * len(payloads)
        conn.in_flight += len(payloads)
        self.stats["received"] += len(payloads)
        self._data.set()

    def _requeue(self, conn: Connection, payload: bytes) -> None:
        try:
            conn.send(commands.req(payload[10:26], 0))
            self.stats["requeued"] += 1
        except ConnectionClosedError:
            pass

    async def _touch_loop(self) -> None:
        while True:
            await trio.sleep(self.options.touch_interval)
            touched = 0
            for payload, conn in zip(self._payloads, self._conns, strict=True):
                if not conn.closed:
                    conn.send(commands.touch(payload[10:26]))
                    touched += 1
            self.stats["touched"] += touched

    async def _wait_for_data(self, start: int) -> None:
        """Trigger.AvailableNow: wait until a message at or past `start` is buffered, or every
        connection is done (past the frontier, or quiet for available_now_idle with room)."""
        idle = self.options.available_now_idle
        while True:
            if self._error is not None or self._base + len(self._payloads) > start:
                return
            now = trio.current_time()
            quiet_since = max(self._available_now_since, self._last_activity())
            if now - quiet_since >= idle and self._every_nsqd_has_room():
                # The run ends here: take nothing more (the process outlives the query a
                # little, and what it took would wait msg_timeout before redelivery).
                for conn in self._live:
                    self._done.add(conn)
                    if conn.rdy and not conn.closed:
                        conn.rdy = 0
                        conn.send(commands.rdy(0))
                return
            self._data = trio.Event()
            with trio.move_on_after(max(0.01, idle - (now - quiet_since))):
                await self._data.wait()

    def _every_nsqd_has_room(self) -> bool:
        """True when each nsqd could hand us more (one of its connections has RDY to spare)
        or is done: its quiet then means it has nothing more. (One connection may be full
        with the uncommitted batch: nsqd gives a channel's messages to any of them.)"""
        room: dict[str, bool] = {}
        for conn in self._live:
            spare = conn in self._done or conn.in_flight < conn.rdy
            room[conn.address] = room.get(conn.address, False) or spare
        return all(room.values())

    def _last_activity(self) -> float:
        times = [c.last_message_time for c in self._live if c not in self._done]
        return max(times, default=0.0)

    def _plan(self, start: int, limit: int | None) -> int:
        if self._error is not None:
            raise RuntimeError(f"NSQ reader failed: {self._error}") from self._error
        lo = max(start, self._base)
        hi = self._base + len(self._payloads)
        if limit is not None:
            hi = min(hi, lo + limit)
        # Half of each nsqd's window (its connections' RDY summed): nsqd hands a channel's
        # messages to whichever of our connections has room, so the other half keeps flowing.
        window: dict[str, int] = {}
        for conn in self._live:
            window[conn.address] = window.get(conn.address, 0) + conn.rdy
        counts: dict[str, int] = {}
        conns = self._conns
        for seq in range(lo - self._base, hi - self._base):
            address = conns[seq].address
            n = counts.get(address, 0) + 1
            rdy = window.get(address, 0)
            if rdy and n > max(1, rdy // 2):
                return seq + self._base
            counts[address] = n
        return max(hi, start)

    def _slice(self, start: int, end: int) -> BatchSlice:
        lo = max(start, self._base) - self._base
        hi = max(end - self._base, lo)
        if start < self._base:
            log.warning("batch from %d: messages below %d were already finished", start, lo)
        return BatchSlice(self._payloads[lo:hi], [c.address for c in self._conns[lo:hi]])

    def _finish(self, end: int) -> int:
        n = min(end - self._base, len(self._payloads))
        if n <= 0:
            return 0
        for payload, conn in zip(self._payloads[:n], self._conns[:n], strict=True):
            conn.in_flight -= 1
            if not conn.closed:
                try:
                    conn.send(commands.fin(payload[10:26]))
                except ConnectionClosedError:
                    pass  # nsqd redelivers it; the archive's dedup drops the copy
        del self._payloads[:n]
        del self._conns[:n]
        self._base += n
        self.stats["finished"] += n
        return n

    def _prepare_available_now(self, now_ns: int) -> None:
        self._frontier_ns = now_ns
        self._available_now_since = trio.current_time()

    async def _shutdown(self) -> None:
        self._stopping = True
        conns = list(self._live)
        for conn in conns:
            conn.rdy = 0
            try:
                conn.send(commands.rdy(0))
            except ConnectionClosedError:
                pass
        for payload, conn in zip(self._payloads, self._conns, strict=True):
            if not conn.closed:
                self._requeue(conn, payload)
        self._payloads.clear()
        self._conns.clear()
        with trio.move_on_after(2.0):
            for conn in conns:
                await conn.flush()
        for conn in conns:
            conn.close()
