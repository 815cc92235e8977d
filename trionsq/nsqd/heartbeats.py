"""Heartbeats and message pumps of client connections, without a task per idle connection.

nsqd sends every connection a heartbeat each heartbeat interval, in any state (Go's
messagePump). A connection's message pump (`ClientV2.message_pump`: flushes deliveries, sends
heartbeats) is a task, with its cancel scope and wake-up: about 2.9 KB of the 13.7 KB an idle
connection cost. Most connections never need one: a publisher is answered by its command loop
and an idle connection only gets heartbeats. So:

- A client starts without a pump. Its `wake` is a `PumpStarter`: the first delivery, which
  sets it, starts the pump (`start_pump`, in the daemon's client nursery; the connection stops
  it when it ends); before SUB, setting it means IDENTIFY changed the heartbeat interval.
- `Heartbeats`, one task for the daemon, sends the heartbeats of the clients without a pump.
  Clients are kept by interval, each group in the order of their next heartbeat (each is
  scheduled `interval` after now, so appending keeps the order); it sleeps until the earliest.
  A heartbeat goes out with one non-blocking write when nothing else of the client's is being
  sent; the rare one that cannot (a full socket buffer, a TLS or compressed stream) is left to
  a pump started for that client.
"""

from __future__ import annotations

import logging
import math
import os
from typing import TYPE_CHECKING

import trio

from ..logs import go_net_error
from ..protocol.frames import HEARTBEAT_FRAME
from .socket_stream import DirectSocketStream
from .wakeup import Wakeup

if TYPE_CHECKING:
    from .client_v2 import ClientV2

log = logging.getLogger("trionsq.nsqd")

#: Heartbeats sent in one go before the task lets others run.
BATCH = 256


class PumpStarter:
    """`ClientV2.wake` while the client has no message pump (see the module docstring)."""

    __slots__ = ("client",)

    def __init__(self, client: ClientV2) -> None:
        self.client = client

    def set(self) -> None:
        client = self.client
        if client.channel is None:
            # IDENTIFY set a new heartbeat interval (and the time of the next heartbeat).
            client.nsqd.heartbeats.add(client)
        else:
            start_pump(client)


def start_pump(client: ClientV2) -> None:
    """Start the client's message pump (at once due: it flushes what is buffered)."""
    if type(client.wake) is Wakeup:
        return
    client.nsqd.heartbeats.remove(client)
    wake = client.wake = Wakeup()
    wake.set()
    scope = client.pump_scope = trio.CancelScope()
    client.nsqd.start_client_task(_run_pump, client, scope)


def stop_pump(client: ClientV2) -> None:
    """The connection ends: stop its pump if it has one, and its heartbeats."""
    client.nsqd.heartbeats.remove(client)
    scope = client.pump_scope
    if scope is not None:
        scope.cancel()


async def _run_pump(client: ClientV2, scope: trio.CancelScope) -> None:
    """The pump, beside the connection's task: a failure ends the connection (as it did
    when both were in one nursery), with the same log lines."""
    with scope:
        try:
            await client.message_pump()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
            if not scope.cancel_called:
                _pump_failed(client, err)
        except Exception:
            log.exception(
                "PROTOCOL(V2): [%s] internal error, closing the connection",
                client.remote_address,
            )
            client.close_connection()


def _pump_failed(client: ClientV2, err: BaseException) -> None:
    """A send of the pump's failed: Go's messagePump error line; the connection closes."""
    error = go_net_error(client.stream, client.remote_address, "write", err)
    log.error("PROTOCOL(V2): [%s] messagePump error - %s", client.remote_address, error)
    client.close_connection()


class Heartbeats:
    """The heartbeats of every client without a message pump (see the module docstring)."""

    def __init__(self) -> None:
        # interval -> the clients with that interval, in the order of their next heartbeat.
        self._groups: dict[float, dict[ClientV2, None]] = {}
        self._deadline = math.inf
        self._sleep: trio.CancelScope | None = None
        #: Heartbeats sent (tests).
        self.sent = 0

    def __len__(self) -> int:
        return sum(map(len, self._groups.values()))

    def add(self, client: ClientV2) -> None:
        """Schedule `client`'s next heartbeat (`client.next_heartbeat`), replacing what was
        scheduled: a new connection, or IDENTIFY changed its interval."""
        self.remove(client)
        interval = client.heartbeat_interval
        if not interval:
            return
        group = self._groups.get(interval)
        if group is None:
            group = self._groups[interval] = {}
        group[client] = None
        due = client.next_heartbeat
        if due < self._deadline:
            self._deadline = due
            if self._sleep is not None:
                self._sleep.deadline = due

    def remove(self, client: ClientV2) -> None:
        for interval, group in self._groups.items():
            if group.pop(client, 1) is None:
                if not group:
                    del self._groups[interval]
                    if not self._groups:  # nothing to wake up for (else it may wake early)
                        self._deadline = math.inf
                        if self._sleep is not None:
                            self._sleep.deadline = math.inf
                return

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            with trio.CancelScope(deadline=self._deadline) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            await self._send_due()

    async def _send_due(self) -> None:
        now = trio.current_time()
        for interval, group in list(self._groups.items()):
            while True:
                due: list[ClientV2] = []
                for client in group:
                    if client.next_heartbeat > now or len(due) == BATCH:
                        break
                    due.append(client)
                for client in due:
                    del group[client]
                    client.next_heartbeat = now + interval
                    group[client] = None  # last: the latest next heartbeat
                    self._beat(client)
                if len(due) < BATCH:
                    break
                await trio.lowlevel.checkpoint()
                now = trio.current_time()
            if not group and self._groups.get(interval) is group:
                del self._groups[interval]
        # Each group's first is its earliest (`add` may have added some meanwhile).
        self._deadline = min(
            (next(iter(group)).next_heartbeat for group in self._groups.values()),
            default=math.inf,
        )

    def _beat(self, client: ClientV2) -> None:
        self.sent += 1
        if client.sending or client.holding or client.out:
            # Something of the client's is being sent, or held (--sync-ack) or about to be
            # (its command loop answers a batch): the heartbeat goes after it.
            client.out += HEARTBEAT_FRAME
            return
        stream = client.stream
        if type(stream) is not DirectSocketStream:
            client.out += HEARTBEAT_FRAME
            start_pump(client)
            return
        try:
            sent = os.write(stream.socket.fileno(), HEARTBEAT_FRAME)
        except BlockingIOError:
            sent = 0
        except OSError as err:
            _pump_failed(client, err)
            return
        if sent < len(HEARTBEAT_FRAME):
            client.out += HEARTBEAT_FRAME[sent:]
            start_pump(client)
