"""Hypothesis drives a live nsqd with the channel delivery spec's actions and checks each
observation against the spec.

The daemon runs in-process on a manual MockClock, listening on real TCP; consumers are plain
sockets. The machine's model is the spec's state (spec/channel_delivery.py): every rule sends a
command, lets the daemon settle, then explains what the consumers received as a sequence of
the spec's transitions: the command's own (whose answer, OK or E_FIN_FAILED..., the spec
predicts) and then a `deliver` per message frame, with the attempts the spec says. Anything the
spec does not allow fails the test. Time passes only in `time_passes`, which jumps the clock
past the message timeout: the spec's `expire` and `deferred_due` then happen for everything
due. At teardown a correct consumer drains the topic: every acknowledged message must have
been delivered and finished, and the daemon's queues must be empty.

Restarts are not exercised yet: nothing survives an nsqd exit until the disk queue exists.
"""

from __future__ import annotations

import functools
import itertools
import socket
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from spec.channel_delivery import (
    Bounds,
    DeliveryState,
    build,
    channel_of,
    deferred_due,
    deliver,
    disconnect,
    expire,
    expire_orphan,
    finish,
    initial_state,
    publish,
    rdy,
    rdy_zero,
    requeue,
    subscribe,
    touch,
    unfinished,
)
from spec.core import failure
from tests.nsqd_harness import start_nsqd
from trionsq.nsqd.nsqd import NSQD
from trionsq.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    decode_message,
    identify,
    sub,
)
from trionsq.protocol.commands import fin, pub, req
from trionsq.protocol.commands import rdy as rdy_cmd
from trionsq.protocol.commands import touch as touch_cmd

MSG_TIMEOUT = 1.0
REQ_DELAY_MS = 500
CLIENTS = 3
CHANNELS = 2
MAX_RDY = 3
MAX_MESSAGES = 6
UNLIMITED = 10**9
BOUNDS = Bounds(
    messages=MAX_MESSAGES,
    clients=CLIENTS,
    channels=CHANNELS,
    max_rdy=MAX_RDY,
    timeouts=UNLIMITED,
    requeues=UNLIMITED,
    rdy_zeros=UNLIMITED,
    disconnects=UNLIMITED,
    restarts=0,
    crashes=0,
)
SPEC = build("channel_delivery.live", BOUNDS)
_topics = itertools.count()


class Live:
    """The in-process daemon and the way into its Trio loop from the machine's thread."""

    def __init__(self, nsqd: NSQD, clock: trio.testing.MockClock) -> None:
        self.nsqd = nsqd
        self.clock = clock
        address = nsqd.tcp_address
        assert isinstance(address, tuple)
        self.address = address

    def settle(self) -> None:
        """Let the daemon process everything sent so far and send what follows from it."""
        trio.from_thread.run(trio.testing.wait_all_tasks_blocked)

    def advance(self, seconds: float) -> None:
        def jump() -> None:
            self.clock.jump(seconds)

        trio.from_thread.run_sync(jump)
        self.settle()

    def inspect(self, fn: Callable[[NSQD], Any]) -> Any:
        return trio.from_thread.run_sync(fn, self.nsqd)


class Connection:
    """A client socket; frames are read without blocking once the daemon has settled."""

    def __init__(self, live: Live) -> None:
        self.sock = socket.create_connection(live.address)
        # Without it, Nagle holds a small command back until the previous one is acknowledged
        # (up to the peer's delayed-ACK time): the daemon would settle before it arrives.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.decoder = FrameDecoder()
        self.unread: list[tuple[int, bytes]] = []
        self.send(MAGIC_V2)

    def send(self, data: bytes) -> None:
        self.sock.setblocking(True)
        try:
            self.sock.sendall(data)
        finally:
            self.sock.setblocking(False)

    def frames(self) -> list[tuple[int, bytes]]:
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            if not data:
                break
            self.decoder.feed(data)
        received, self.unread = self.unread, []
        while (frame := self.decoder.next_frame()) is not None:
            if frame != (FRAME_TYPE_RESPONSE, HEARTBEAT):
                received.append(frame)
        return received

    def close(self) -> None:
        self.sock.close()


class ChannelDeliveryMachine(RuleBasedStateMachine):
    live: ClassVar[Live]

    def __init__(self) -> None:
        super().__init__()
        self.model: DeliveryState = initial_state(BOUNDS)
        self.topic = f"stateful{next(_topics)}"
        self.consumers: dict[int, Connection] = {}
        self.producer = Connection(self.live)
        self.message_ids: dict[int, bytes] = {}
        self.channels = [f"ch{i}" for i in range(CHANNELS)]

    # -- bookkeeping ----------------------------------------------------------------------

    def take(self, action: Callable[..., Iterator[tuple[str, DeliveryState]]], label: str) -> None:
        """Advance the model by the transition `label`, which the spec must allow."""
        enabled = dict(action(BOUNDS, self.model))
        assert label in enabled, f"the spec does not allow {label}; it allows {sorted(enabled)}"
        after = enabled[label]
        for prop in SPEC.step_invariants:
            reason = failure(prop.holds(self.model, label, after))
            assert reason is None, f"{prop.name}: {reason}"
        self.model = after

    def observe(self) -> None:
        """Let the daemon settle, then explain the messages each consumer received as the
        spec's `deliver` steps."""
        self.live.settle()
        for index, conn in sorted(self.consumers.items()):
            for frame_type, data in conn.frames():
                assert frame_type == FRAME_TYPE_MESSAGE, f"c{index} got {frame_type} {data!r}"
                self.delivered(index, data)

    def delivered(self, client: int, data: bytes) -> None:
        message = decode_message(data)
        index = int(message.body.decode().removeprefix("m"))
        known = self.message_ids.setdefault(index, message.id)
        assert known == message.id, "one message, one ID on every channel and delivery"
        self.take(deliver, f"deliver(c{client}, m{index})")
        channel = self.model.channels[channel_of(BOUNDS, client)]
        assert message.attempts == channel.attempts[index], (
            f"m{index} delivered with attempts {message.attempts}, "
            f"the spec says {channel.attempts[index]}"
        )

    def answered(self, client: int, label: str, send: bytes) -> None:
        """Send a FIN/REQ/TOUCH and check that its answer is the one the spec predicts (silence
        for success, the error code for a refusal). Messages that arrive meanwhile are kept to
        be explained after the command's own transition."""
        conn = self.consumers[client]
        conn.send(send)
        self.live.settle()
        frames = conn.frames()
        errors = [data for frame_type, data in frames if frame_type == FRAME_TYPE_ERROR]
        conn.unread = [f for f in frames if f[0] == FRAME_TYPE_MESSAGE]
        assert len(errors) + len(conn.unread) == len(frames), f"{label}: answered {frames}"
        codes = [e.split(b" ", 1)[0].decode() for e in errors]
        expected = [label.rsplit(" ", 1)[1]] if label.endswith("FAILED") else []
        assert codes == expected, f"{label}: the daemon answered {errors}"

    # -- rules ----------------------------------------------------------------------------

    @initialize()
    def create_channels(self) -> None:
        def create(nsqd: NSQD) -> None:
            topic = nsqd.get_topic(self.topic)
            for name in self.channels:
                topic.get_channel(name)

        self.live.inspect(create)

    @precondition(lambda self: self.model.published < MAX_MESSAGES)
    @rule()
    def publish(self) -> None:
        index = self.model.published
        self.producer.send(pub(self.topic, f"m{index}".encode()))
        self.take(publish, f"publish(m{index})")
        self.observe()
        assert self.producer.frames() == [(FRAME_TYPE_RESPONSE, b"OK")]

    @precondition(lambda self: any(not c.connected for c in self.model.clients))
    @rule(data=st.data())
    def subscribe(self, data: st.DataObject) -> None:
        client = data.draw(
            st.sampled_from([i for i, c in enumerate(self.model.clients) if not c.connected])
        )
        self.subscribe_client(client)

    def subscribe_client(self, client: int) -> None:
        conn = Connection(self.live)
        conn.send(identify({"heartbeat_interval": 3_600_000}))
        conn.send(sub(self.topic, self.channels[channel_of(BOUNDS, client)]))
        self.live.settle()
        frames = conn.frames()
        assert frames == [(FRAME_TYPE_RESPONSE, b"OK")] * 2, frames
        self.consumers[client] = conn
        self.take(subscribe, f"subscribe(c{client})")

    @precondition(lambda self: any(c.connected for c in self.model.clients))
    @rule(data=st.data())
    def set_rdy(self, data: st.DataObject) -> None:
        client = data.draw(
            st.sampled_from([i for i, c in enumerate(self.model.clients) if c.connected])
        )
        current = self.model.clients[client].rdy
        count = data.draw(st.sampled_from([n for n in range(MAX_RDY + 1) if n != current]))
        self.consumers[client].send(rdy_cmd(count))
        self.take(rdy if count else rdy_zero, f"rdy(c{client}, {count})")
        self.observe()

    def _held(self) -> list[tuple[int, int]]:
        return [(i, m) for i, c in enumerate(self.model.clients) for m in sorted(c.holding)]

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        client, message = data.draw(st.sampled_from(self._held()))
        label = self._predicted(finish, f"finish(c{client}, m{message})")
        self.answered(client, label, fin(self.message_ids[message]))
        self.take(finish, label)
        self.observe()

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data(), delayed=st.booleans())
    def requeue(self, data: st.DataObject, delayed: bool) -> None:
        client, message = data.draw(st.sampled_from(self._held()))
        label = self._predicted(requeue, f"requeue(c{client}, m{message}")
        if not label.endswith("FAILED"):
            label = f"requeue(c{client}, m{message}, {'delay' if delayed else '0'})"
        self.answered(client, label, req(self.message_ids[message], REQ_DELAY_MS if delayed else 0))
        self.take(requeue, label)
        self.observe()

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    def touch(self, data: st.DataObject) -> None:
        client, message = data.draw(st.sampled_from(self._held()))
        label = self._predicted(touch, f"touch(c{client}, m{message})")
        self.answered(client, label, touch_cmd(self.message_ids[message]))
        self.take(touch, label)
        self.observe()

    @precondition(lambda self: any(c.connected for c in self.model.clients))
    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        client = data.draw(
            st.sampled_from([i for i, c in enumerate(self.model.clients) if c.connected])
        )
        self.observe()
        self.consumers.pop(client).close()
        self.live.settle()
        self.take(disconnect, f"disconnect(c{client})")

    @rule()
    def time_passes(self) -> None:
        """Past every deadline: all in-flight messages time out, deferred ones come due."""
        self.live.advance(MSG_TIMEOUT + 0.5)
        for index, client in enumerate(self.model.clients):
            for message in sorted(client.in_flight):
                self.take(expire, f"expire(c{index}, m{message})")
        for ch_index, channel in enumerate(self.model.channels):
            for message in sorted(channel.orphans):
                self.take(expire_orphan, f"expire(orphan, ch{ch_index}, m{message})")
            for message in sorted(channel.deferred):
                self.take(deferred_due, f"deferred_due(ch{ch_index}, m{message})")
        self.observe()

    def _predicted(
        self, action: Callable[..., Iterator[tuple[str, DeliveryState]]], prefix: str
    ) -> str:
        """The one label of `action` on this message: the spec decides success or failure."""
        labels = [label for label, _ in action(BOUNDS, self.model) if label.startswith(prefix)]
        assert labels, f"{prefix}: not enabled"
        failed = [label for label in labels if label.endswith("FAILED")]
        return failed[0] if failed else labels[0]

    # -- checks ---------------------------------------------------------------------------

    @invariant()
    def daemon_agrees_with_the_spec(self) -> None:
        """The daemon's queues hold what the spec's state says (same names: queued is
        memory + backend, deferred, in flight to clients and orphans)."""

        def counts(nsqd: NSQD) -> list[tuple[int, int, int]]:
            topic = nsqd.topics[self.topic]
            return [
                (ch.depth, len(ch.deferred), ch.in_flight_count)
                for ch in (topic.get_channel(name) for name in self.channels)
            ]

        expected = []
        for ch_index, channel in enumerate(self.model.channels):
            in_flight = len(channel.orphans) + sum(
                len(c.in_flight)
                for i, c in enumerate(self.model.clients)
                if channel_of(BOUNDS, i) == ch_index
            )
            expected.append((len(channel.queued), len(channel.deferred), in_flight))
        assert self.live.inspect(counts) == expected

    @invariant()
    def spec_invariants_hold(self) -> None:
        for inv in SPEC.invariants:
            reason = failure(inv.holds(self.model))
            assert reason is None, f"{inv.name}: {reason}"

    def teardown(self) -> None:
        try:
            self.drain()
        finally:
            for conn in [self.producer, *self.consumers.values()]:
                conn.close()
            self.live.inspect(lambda nsqd: nsqd.delete_topic(self.topic))

    def drain(self) -> None:
        """A correct consumer on each channel finishes everything: at-least-once means every
        acknowledged message is then delivered and finished."""
        for ch_index in range(CHANNELS):
            client = ch_index  # channel_of(c) == c for the first CHANNELS clients
            if not self.model.clients[client].connected:
                self.subscribe_client(client)
            if self.model.clients[client].rdy != MAX_RDY:
                self.consumers[client].send(rdy_cmd(MAX_RDY))
                self.take(rdy, f"rdy(c{client}, {MAX_RDY})")
        for _ in range(2 * MAX_MESSAGES + 2):
            self.observe()
            while held := self._held():
                client, message = held[0]
                label = self._predicted(finish, f"finish(c{client}, m{message})")
                self.answered(client, label, fin(self.message_ids[message]))
                self.take(finish, label)
                self.observe()
            if not list(unfinished(self.model)):
                break
            self.time_passes()
        assert not list(unfinished(self.model)), "acknowledged messages were never finished"
        self.daemon_agrees_with_the_spec()


async def test_channel_delivery_follows_the_spec(
    nursery: trio.Nursery,
    mock_clock: trio.testing.MockClock,
    tmp_path: Any,
    stateful_settings: settings,
) -> None:
    nsqd = await start_nsqd(
        nursery, str(tmp_path), msg_timeout=MSG_TIMEOUT, max_heartbeat_interval=7200.0
    )
    ChannelDeliveryMachine.live = Live(nsqd, mock_clock)
    await trio.to_thread.run_sync(
        functools.partial(
            run_state_machine_as_test, ChannelDeliveryMachine, settings=stateful_settings
        )
    )
