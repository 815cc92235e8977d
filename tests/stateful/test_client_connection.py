"""Hypothesis drives a live nsqd over TCP with commands in random connection states and checks
every answer, and every message delivered, against the spec of a connection
(spec/client_connection.py). The spec's state is the model, advanced with the spec's own
`execute` (a command and its answer) and `deliver`.

The daemon runs in the test's nursery on 127.0.0.1; the state machine runs in a worker thread
(hypothesis-trio does not work with current Hypothesis) and talks to it with
`trio.from_thread.run`. Each connection publishes to a topic of its own.

What the client observes is matched against the spec as a set of candidate states: a message
may be delivered before or after a command without an answer (RDY, FIN, NOP, ...) takes effect.
So that silence is observed without waiting for it, every command that does not close the
connection is followed by a barrier with a known answer: ``FIN`` of an ID never delivered
(``E_FIN_FAILED``, not fatal) once subscribed, ``IDENTIFY`` (``OK``) in INIT. The daemon answers
commands in order, so the barrier's answer comes after the command's.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable
from pathlib import Path

import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from spec.client_connection import (
    MESSAGE_COMMANDS,
    PUBLISH_COMMANDS,
    Command,
    Conn,
    deliver,
    execute,
)
from tests.nsqd_harness import start_nsqd
from trionsq.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    auth,
    cls,
    decode_message,
    dpub,
    fin,
    identify,
    mpub,
    nop,
    pub,
    rdy,
    req,
    sub,
    touch,
)
from trionsq.protocol.client_states import (
    RULES,
    STATE_CLOSING,
    STATE_DISCONNECTED,
    STATE_INIT,
    STATE_SUBSCRIBED,
)

#: Spec message numbers from here on name IDs that were never delivered: the client sends
#: FIN/REQ/TOUCH for a message it has not received with such an ID.
UNKNOWN = 1_000_000
#: The barrier once subscribed: FIN of an ID that is never in flight.
FIN_BARRIER = Command(b"FIN", UNKNOWN - 1)
INIT_BARRIER = Command(b"IDENTIFY")
#: A stuck exchange fails the test instead of hanging it (not a timing assertion: every answer
#: it waits for is due at once).
GUARD_SECONDS = 10.0

CONSUMING = (STATE_SUBSCRIBED, STATE_CLOSING)

_topic_numbers = itertools.count()

Frame = tuple[int, bytes]
Candidate = tuple[Conn, int]  # a spec state and how many of the commands sent it executed


def unknown_id(number: int) -> bytes:
    return b"%016d" % number


class Wire:
    """One TCP connection: bytes out, frames in (heartbeats skipped); None at EOF."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    @classmethod
    async def open(cls, address: tuple[str, int]) -> Wire:
        stream = await trio.open_tcp_stream(*address)
        await stream.send_all(MAGIC_V2)
        return cls(stream)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def frame(self) -> Frame | None:
        while True:
            frame = self.decoder.next_frame()
            if frame == (FRAME_TYPE_RESPONSE, HEARTBEAT):
                continue
            if frame is not None:
                return frame
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self.decoder.feed(data)

    async def aclose(self) -> None:
        await self.stream.aclose()


class Exchange:
    """Commands sent in one go, matched frame by frame against the spec: the candidate spec
    states the daemon may be in, given what was observed."""

    def __init__(self, start: Iterable[Conn], commands: list[Command], ids: dict[int, bytes]):
        self.commands = commands
        self.ids = ids
        self.candidates: set[Candidate] = {(conn, 0) for conn in start}
        self.observed: list[str] = []
        self._execute_silent()

    @property
    def complete(self) -> bool:
        return all(done == len(self.commands) for _, done in self.candidates)

    @property
    def closed(self) -> bool:
        return all(not conn.is_open for conn, _ in self.candidates)

    def message(self, number: int) -> None:
        self.observed.append(f"message m{number}")
        self._advance(
            (after, done)
            for conn, done in self.candidates
            if (after := deliver(conn, number)) is not None
        )

    def answer(self, frame: Frame) -> None:
        kind = "error" if frame[0] == FRAME_TYPE_ERROR else "response"
        self.observed.append(f"{kind} {bytes(frame[1]).decode(errors='replace')}")
        self._advance(
            (after, done + 1)
            for conn, done, after in self._executions()
            if after.reply is not None and self._wire(after) == frame
        )

    def eof(self) -> None:
        self.observed.append("connection closed")
        self._advance(
            (conn, done)
            for conn, done in self.candidates
            if not conn.is_open and done == len(self.commands)
        )

    def _wire(self, conn: Conn) -> Frame:
        assert conn.reply is not None
        frame_type = FRAME_TYPE_ERROR if conn.reply.is_error else FRAME_TYPE_RESPONSE
        return frame_type, conn.reply.wire_body(IdsOrUnknown(self.ids))

    def _executions(self) -> Iterable[tuple[Conn, int, Conn]]:
        for conn, done in self.candidates:
            if done < len(self.commands) and conn.is_open:
                yield conn, done, execute(conn, self.commands[done])

    def _advance(self, candidates: Iterable[Candidate]) -> None:
        self.candidates = set(candidates)
        if not self.candidates:
            sent = ", ".join(c.label for c in self.commands)
            raise AssertionError(
                f"the daemon's behaviour is not one the spec allows: sent {sent}; "
                f"observed {self.observed}"
            )
        self._execute_silent()

    def _execute_silent(self) -> None:
        """A command without an answer may take effect at any moment: add those states."""
        frontier = list(self.candidates)
        while frontier:
            conn, done = frontier.pop()
            if done < len(self.commands) and conn.is_open:
                after = execute(conn, self.commands[done])
                if after.reply is None and (after, done + 1) not in self.candidates:
                    self.candidates.add((after, done + 1))
                    frontier.append((after, done + 1))


class IdsOrUnknown(dict[int, bytes]):
    """Message IDs by spec number, made-up IDs for numbers never delivered."""

    def __missing__(self, number: int) -> bytes:
        return unknown_id(number)


def message_numbers() -> st.SearchStrategy[int]:
    """Messages in publication order; the client names one it has not received (or that
    was never published) by an ID it makes up."""
    return st.integers(0, 3)


def any_command() -> st.SearchStrategy[Command]:
    plain = [Command(name) for name in RULES if name != b"RDY" and name not in MESSAGE_COMMANDS]
    return st.one_of(
        st.sampled_from(plain),
        st.builds(Command, st.just(b"RDY"), st.integers(0, 3)),
        st.builds(Command, st.sampled_from(list(MESSAGE_COMMANDS)), message_numbers()),
    )


class ConnectionMachine(RuleBasedStateMachine):
    """One client connection at a time; the model is the set of spec states it may be in."""

    address: tuple[str, int] = ("127.0.0.1", 0)

    def __init__(self) -> None:
        super().__init__()
        self.wire: Wire | None = None
        self.topic = ""
        self.model: set[Conn] = set()
        self.ids: dict[int, bytes] = {}  # spec message number -> the daemon's message ID
        self.numbers: dict[bytes, int] = {}

    @initialize()
    def connect(self) -> None:
        self._close()
        self.topic = f"states{next(_topic_numbers)}"
        self.wire = trio.from_thread.run(Wire.open, self.address)
        self.model = {Conn()}
        self.ids = {}
        self.numbers = {}

    def teardown(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.wire is not None:
            trio.from_thread.run(self.wire.aclose)
            self.wire = None

    @property
    def state(self) -> int:
        (state,) = {conn.state for conn in self.model}  # only deliveries are uncertain
        return state

    # -- rules: a client misusing the protocol now and then, a consumer otherwise ---------

    @precondition(lambda self: self.state == STATE_DISCONNECTED)
    @rule()
    def reconnect(self) -> None:
        self.connect()

    @precondition(lambda self: self.state != STATE_DISCONNECTED)
    @rule(command=any_command())
    def misuse(self, command: Command) -> None:
        self._exchange(command)

    @precondition(lambda self: self.state == STATE_INIT)
    @rule()
    def subscribe(self) -> None:
        self._exchange(Command(b"SUB"))

    @precondition(lambda self: self.state != STATE_DISCONNECTED)
    @rule(name=st.sampled_from(PUBLISH_COMMANDS))
    def publish(self, name: bytes) -> None:
        self._exchange(Command(name))

    @precondition(lambda self: self.state != STATE_DISCONNECTED)
    @rule(name=st.sampled_from(PUBLISH_COMMANDS), command=any_command())
    def publish_and_send(self, name: bytes, command: Command) -> None:
        """Two commands in one write: the daemon executes both before it next delivers."""
        self._exchange(Command(name), command)

    @precondition(lambda self: self.state in CONSUMING)
    @rule(count=st.integers(0, 3))
    def ready(self, count: int) -> None:
        self._exchange(Command(b"RDY", count))

    @precondition(lambda self: self.state in CONSUMING)
    @rule(name=st.sampled_from(list(MESSAGE_COMMANDS)), number=message_numbers())
    def consume(self, name: bytes, number: int) -> None:
        self._exchange(Command(name, number))

    @precondition(lambda self: self.state == STATE_SUBSCRIBED)
    @rule()
    def close_wait(self) -> None:
        self._exchange(Command(b"CLS"))

    # -- talking to the daemon ------------------------------------------------------------

    def _exchange(self, *sent: Command) -> None:
        """Send the commands (and a barrier), then match what comes back against the spec.
        Only the last command may close the connection."""
        commands = [self._known(command) for command in sent]
        predicted = self.model
        for command in commands:
            predicted = {execute(conn, command) for conn in predicted if conn.is_open}
        if all(after.is_open for after in predicted):
            (state,) = {after.state for after in predicted}
            commands.append(INIT_BARRIER if state == STATE_INIT else FIN_BARRIER)
        exchange = Exchange(self.model, commands, self.ids)
        trio.from_thread.run(self._run, exchange)
        self.model = {conn for conn, _ in exchange.candidates}

    def _known(self, command: Command) -> Command:
        """A message the client has not received can only be named by an ID it makes up."""
        if command.name in MESSAGE_COMMANDS and command.arg not in self.ids:
            return Command(command.name, UNKNOWN + (command.arg or 0))
        return command

    async def _run(self, exchange: Exchange) -> None:
        assert self.wire is not None
        await self.wire.send(b"".join(self._encode(c) for c in exchange.commands))
        with trio.fail_after(GUARD_SECONDS):
            # Once the commands are answered, a closed connection must also reach its EOF.
            while not (exchange.complete and not exchange.closed):
                frame = await self.wire.frame()
                if frame is None:
                    exchange.eof()
                    return
                if frame[0] == FRAME_TYPE_MESSAGE:
                    exchange.message(self._number_of(decode_message(frame[1]).id))
                else:
                    exchange.answer(frame)

    def _number_of(self, message_id: bytes) -> int:
        """Messages are numbered in publication order: the channel first delivers them in
        that order, so a new ID is the next number."""
        number = self.numbers.get(message_id)
        if number is None:
            number = self.numbers[message_id] = len(self.numbers)
            self.ids[number] = message_id
        return number

    def _encode(self, command: Command) -> bytes:
        name, arg = command
        if name in MESSAGE_COMMANDS:
            assert arg is not None
            message_id = self.ids.get(arg) or unknown_id(arg)
            if name == b"REQ":
                return req(message_id, 0)
            return fin(message_id) if name == b"FIN" else touch(message_id)
        body = b"message body"
        encoders = {
            b"IDENTIFY": lambda: identify({}),
            b"AUTH": lambda: auth(b"secret"),
            b"SUB": lambda: sub(self.topic, "consumer"),
            b"RDY": lambda: rdy(arg or 0),
            b"CLS": cls,
            b"NOP": nop,
            b"PUB": lambda: pub(self.topic, body),
            b"MPUB": lambda: mpub(self.topic, [body]),
            b"DPUB": lambda: dpub(self.topic, 0, body),
        }
        return encoders[name]()


async def test_every_answer_is_one_the_spec_allows(
    tmp_path: Path, stateful_settings: settings
) -> None:
    async with trio.open_nursery() as nursery:
        # No message may time out while a connection holds it: the spec has no timeouts.
        nsqd = await start_nsqd(nursery, str(tmp_path), msg_timeout=15 * 60.0)
        assert isinstance(nsqd.tcp_address, tuple)
        machine = type("Machine", (ConnectionMachine,), {"address": nsqd.tcp_address})
        run = functools.partial(run_state_machine_as_test, machine, settings=stateful_settings)
        await trio.to_thread.run_sync(run)
        nursery.cancel_scope.cancel()
