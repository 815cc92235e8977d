"""A V2 client connection's state: identity, RDY window, in-flight messages, output buffer,
and its message pump (flushing and heartbeats).

Delivery is synchronous: a channel calls `deliver` with a batch of framed messages, which are
copied into the output buffer (attempts patched in place) and recorded in flight; the pump,
or the command loop at the end of a read batch, sends the buffer with one `send_all`.

In-flight messages live in `in_flight`, a dict in delivery order: id -> (frame as queued,
deadline, delivered_at). A client's msg_timeout is fixed, so deadlines grow in that order and
the earliest is the first entry; TOUCH moves an entry to the end. The rare TOUCH whose
deadline is capped by --max-msg-timeout can fall out of that order: its id goes in
`irregular`, which the queue scan checks separately.
"""

from __future__ import annotations

import math
import os
import random
import time
from typing import TYPE_CHECKING, cast

import trio

# The client states live with the state table; they are re-exported here for existing imports.
from ..protocol.client_states import (  # noqa: F401
    STATE_CLOSING,
    STATE_CONNECTED,
    STATE_DISCONNECTED,
    STATE_INIT,
    STATE_SUBSCRIBED,
)
from ..protocol.frames import HEARTBEAT_FRAME
from .heartbeats import PumpStarter
from .socket_stream import DirectSocketStream
from .wakeup import Wakeup

if TYPE_CHECKING:
    from .acks import HeldAnswers, Owed
    from .auth import AuthState
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

#: `ClientV2.irregular` until SUB: nothing can be in flight before. Immutable, so that a use
#: before SUB fails loudly instead of sharing state between clients.
_NOT_SUBSCRIBED = cast("set[bytes]", frozenset())

#: Unsent bytes beyond which a client gets no more messages until its output drains, so a
#: consumer that stops reading holds at most this much (plus one batch) of the daemon's memory.
OUTPUT_HIGH_WATER = 1 << 20

#: InFlight entry: (frame as it was queued, deadline, delivered_at).
InFlight = tuple[bytes, float, float]


class ClientV2:
    __slots__ = (
        "auth_secret",
        "auth_state",
        "channel",
        "client_id",
        "connect_ts",
        "connection_scope",
        "deflate",
        "finish_count",
        "heartbeat_interval",
        "held",
        "holding",
        "hostname",
        "id",
        "identified",
        "in_flight",
        "irregular",
        "message_count",
        "msg_timeout",
        "next_heartbeat",
        "nsqd",
        "out",
        "output_buffer_size",
        "output_buffer_timeout",
        "owed",
        "pub_counts",
        "pump_later",
        "pump_scope",
        "rdy",
        "remote_address",
        "requeue_count",
        "sample_rate",
        "send_done",
        "sending",
        "snappy",
        "state",
        "stream",
        "tls",
        "unsynced_publish",
        "user_agent",
        "wake",
    )

    def __init__(self, nsqd: NSQD, client_id: int, stream: trio.abc.Stream, remote: str) -> None:
        opts = nsqd.options
        self.nsqd = nsqd
        self.id = client_id
        self.stream = stream
        self.remote_address = remote
        host = remote.rpartition(":")[0].strip("[]") if ":" in remote else remote
        self.client_id = host
        self.hostname = host
        self.user_agent = ""
        self.connect_ts = int(time.time())
        self.state = STATE_INIT
        self.identified = False
        self.heartbeat_interval: float | None = opts.client_timeout / 2
        self.next_heartbeat = trio.current_time() + self.heartbeat_interval
        self.msg_timeout = opts.msg_timeout
        self.output_buffer_size = 16384
        self.output_buffer_timeout = opts.output_buffer_timeout
        self.sample_rate = 0
        self.rdy = 0
        self.channel: Channel | None = None
        self.in_flight: dict[bytes, InFlight] = {}
        # Made at SUB (`subscribed`): a connection that never subscribes keeps no set.
        self.irregular: set[bytes] = _NOT_SUBSCRIBED
        self.out = bytearray()
        self.sending = False
        # --sync-ack: this read batch published, and its answers wait for the fsync
        # (`holding`: nothing is sent meanwhile, so that no OK leaves before its fsync).
        self.unsynced_publish = False
        #: Topics this read batch published to, moved on to their channels once answered.
        self.pump_later: list[Topic] = []
        self.holding = False
        #: The answers held for what the read batch is owed (acks.HeldAnswers).
        self.held: HeldAnswers | None = None
        #: What this read batch's answers wait for beyond the disk: the `Receipt`s its
        #: publishes got back (acks.py), merged by `Owed`.
        self.owed: dict[Owed, int] | None = None
        # Made when a task first waits for another's send (`drain`).
        self.send_done: trio.lowlevel.ParkingLot | None = None
        # A `PumpStarter` until the message pump runs (heartbeats.py), then the pump's wake-up.
        self.wake: Wakeup | PumpStarter = PumpStarter(self)
        self.pump_scope: trio.CancelScope | None = None
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.pub_counts: dict[str, int] = {}
        # AUTH: the secret the client gave, and the auth server's answer (None until then).
        self.auth_secret = ""
        self.auth_state: AuthState | None = None
        # Upgrades negotiated by IDENTIFY: `stream` is then the outermost layer (compression
        # over TLS over the socket); `tls` the TLS layer.
        self.tls: trio.SSLStream[trio.abc.Stream] | None = None
        self.snappy = False
        self.deflate = False
        # The connection's cancel scope, set while it is served: cancelling it closes it.
        self.connection_scope: trio.CancelScope | None = None

    # -- delivery -------------------------------------------------------------------------

    def free_slots(self) -> int:
        """How many more messages the RDY window admits now (none while the client is not
        reading fast enough: its unsent output is over the high-water mark)."""
        if self.state != STATE_SUBSCRIBED or len(self.out) > OUTPUT_HIGH_WATER:
            return 0
        return self.rdy - len(self.in_flight)

    def wants_refill(self) -> bool:
        """Enough of the window is free to be worth a delivery batch (low-water mark): a
        client FINning one by one then gets batches, not one-frame writes."""
        free = self.free_slots()
        return free > 0 and free >= (self.rdy >> 2 or 1)

    def deliver(self, frames: list[bytes], now: float) -> float:
        """Write `frames` to the output buffer and record them in flight. Returns the deadline."""
        out = self.out
        in_flight = self.in_flight
        deadline = now + self.msg_timeout
        if self.sample_rate:
            # nsqd skips a message when rand(0..99) > rate: it is lost for this channel.
            rate = self.sample_rate
            rand = random.random
            frames = [f for f in frames if int(rand() * 100) <= rate]
        for frame in frames:
            attempts = (frame[16] << 8 | frame[17]) + 1
            pos = len(out)
            out += frame
            out[pos + 16] = (attempts >> 8) & 0xFF
            out[pos + 17] = attempts & 0xFF
            in_flight[frame[18:34]] = (frame, deadline, now)
        self.message_count += len(frames)
        sending_now = self.nsqd.sending_now
        if sending_now is None:
            self.wake.set()
        else:
            sending_now.append(self)
        return deadline

    def send_now(self) -> None:
        """Send what is buffered with one non-blocking write, from the task that delivered it
        (`NSQD.sending_now`), when nothing of this client's is being sent; what the socket does
        not take now, or a stream that is not a plain socket, goes to the message pump."""
        out = self.out
        if not out:
            return
        stream = self.stream
        if self.sending or self.holding or type(stream) is not DirectSocketStream:
            self.wake.set()
            return
        try:
            sent = os.write(stream.fileno, out)
        except OSError:  # BlockingIOError, or an error the pump's send reports
            sent = 0
        if sent == len(out):
            self.out = bytearray()
        else:
            del out[:sent]
            self.wake.set()

    def earliest_deadline(self) -> float:
        in_flight = self.in_flight
        if not in_flight:
            return math.inf
        earliest = next(iter(in_flight.values()))[1]
        for message_id in self.irregular:
            entry = in_flight.get(message_id)
            if entry is not None and entry[1] < earliest:
                earliest = entry[1]
        return earliest

    def pop_in_flight(self, message_id: bytes) -> InFlight | None:
        entry = self.in_flight.pop(message_id, None)
        if entry is not None and self.irregular:
            self.irregular.discard(message_id)
        return entry

    def subscribed(self, channel: Channel) -> None:
        """SUB succeeded: the client takes part in `channel`'s deliveries from now on."""
        self.irregular = set()
        self.channel = channel

    def close_connection(self) -> None:
        """End this connection from outside it (its channel was deleted)."""
        if self.connection_scope is not None:
            self.connection_scope.cancel()

    # -- output ---------------------------------------------------------------------------

    async def flush(self) -> None:
        """Send everything buffered. Only one task sends at a time; a caller that finds a
        send under way leaves its bytes to that sender, which loops until the buffer is empty."""
        if self.sending or self.holding or not self.out:
            return
        self.sending = True
        try:
            while self.out and not self.holding:
                data = self.out
                self.out = bytearray()
                await self.stream.send_all(data)
        finally:
            self.sending = False
            if self.send_done:
                self.send_done.unpark_all()
        # Output held back by the high-water mark has drained: deliver again.
        if self.channel is not None and self.wants_refill():
            self.channel.dispatch()

    async def drain(self) -> None:
        """Send everything buffered, waiting for another task's send under way (before a
        connection closes, so that a last error frame is not lost)."""
        while self.sending:
            if self.send_done is None:
                self.send_done = trio.lowlevel.ParkingLot()
            await self.send_done.park()
        await self.flush()

    async def message_pump(self) -> None:
        """Flush when woken; send a heartbeat every heartbeat interval, in any state. Runs
        once the client needs it (`heartbeats.start_pump`: its first delivery); until then
        the daemon's `Heartbeats` task sends its heartbeats."""
        wake = self.wake
        assert isinstance(wake, Wakeup)
        while True:
            deadline = self.next_heartbeat if self.heartbeat_interval else math.inf
            with trio.move_on_at(deadline):
                await wake.wait()
            if self.heartbeat_interval and trio.current_time() >= self.next_heartbeat:
                self.out += HEARTBEAT_FRAME
                self.next_heartbeat = trio.current_time() + self.heartbeat_interval
            await self.flush()
