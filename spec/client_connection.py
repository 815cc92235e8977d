"""The spec of one V2 client connection: which commands each connection state accepts, what
they answer, and which messages the daemon may deliver to it (docs/protocol.md §1.3, §1.9).

It is built from the state table the daemon checks states with
(`trionsq.protocol.client_states.RULES`); a fault perturbs that table or a command's effect.
The properties are stated without the table, from what a client is promised:

- a connection subscribes at most once, and IDENTIFY is only accepted before SUB;
- messages are delivered only to a subscribed connection, never beyond its RDY window, and
  never after CLS has been answered with CLOSE_WAIT;
- an error whose code is fatal (the error code table, docs/protocol.md §1.4) closes the connection,
  and a closed connection answers nothing more;
- a consumer can always finish (or requeue) what is in flight to it, in SUBSCRIBED as in
  CLOSING (liveness: its FIN is fair).

One connection, one topic with one channel. The client sends any command in any state, with
valid parameters: a message it names with FIN, REQ or TOUCH may be in flight to it or not (a
non-fatal error). Commands are answered in order: a command's step is its execution and its
answer (`Conn.reply`), which the stateful test (tests/stateful/test_client_connection.py)
compares with what the live daemon sends, advancing this model with `execute` and `deliver`.
A PUB, MPUB or DPUB (with no delay) publishes one message to the connection's topic; the
messages are numbered in publication order.

Delivery follows nsqd's message pump: a subscribed connection gets a queued message whenever
fewer than RDY are in flight to it. Nothing else stops delivery in CLOSING: CLS sets RDY to 0
and RDY is ignored from then on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from trionsq.protocol.client_states import (
    RULES,
    STATE_CLOSING,
    STATE_DISCONNECTED,
    STATE_INIT,
    STATE_NAMES,
    STATE_SUBSCRIBED,
    CommandRule,
    Verdict,
)
from trionsq.protocol.client_states import markdown_table as render_table
from trionsq.protocol.errors import (
    E_AUTH_DISABLED,
    E_FIN_FAILED,
    E_REQ_FAILED,
    E_TOUCH_FAILED,
    FATAL,
    ProtocolError,
)

from .core import Action, Invariant, Liveness, Mutant, Spec, StepInvariant

FAULTS = {
    "sub_twice": "SUB is allowed again in SUBSCRIBED",
    "rdy_in_closing": "RDY is honoured in CLOSING instead of ignored",
    "state_error_not_fatal": "a command refused in the current state leaves the connection open",
    "fin_refused_in_closing": "FIN is refused in CLOSING",
    "identify_after_sub": "IDENTIFY is allowed in SUBSCRIBED",
    "cls_keeps_rdy": "CLS answers CLOSE_WAIT but leaves RDY as it was",
    "window_overrun": "delivery fills the RDY window one message beyond it",
}

#: The commands that name a message, and the error each answers for one not in flight.
MESSAGE_COMMANDS: dict[bytes, str] = {
    b"FIN": E_FIN_FAILED,
    b"REQ": E_REQ_FAILED,
    b"TOUCH": E_TOUCH_FAILED,
}
PUBLISH_COMMANDS = (b"PUB", b"MPUB", b"DPUB")
NOT_IN_FLIGHT = "ID not in flight"


@dataclass(frozen=True)
class Bounds:
    messages: int = 2
    """Messages the client publishes at most."""
    max_rdy: int = 2
    """The largest RDY count the client sends."""
    faults: frozenset[str] = field(default_factory=frozenset)


class Reply(NamedTuple):
    """The daemon's answer to a command: a response (``OK``, ``CLOSE_WAIT``) or an error.
    An error's `text` may name a message as ``{id}``: its ID on the wire is filled in by
    `wire_body`."""

    code: str
    text: str = ""
    message: int | None = None
    fatal: bool = False

    @property
    def is_error(self) -> bool:
        return self.code.startswith("E_")

    def wire_body(self, message_ids: Mapping[int, bytes]) -> bytes:
        """The frame's data as the daemon sends it."""
        if not self.is_error:
            return self.code.encode()
        text = self.text
        if self.message is not None:
            text = text.format(id=message_ids[self.message].decode("ascii"))
        return f"{self.code} {text}".encode()


OK = Reply("OK")
CLOSE_WAIT = Reply("CLOSE_WAIT")


class Conn(NamedTuple):
    """One connection as the daemon holds it, and the client's view of its answers."""

    state: int = STATE_INIT
    identified: bool = False
    subscriptions: int = 0  # SUBs that succeeded
    rdy: int = 0
    published: int = 0
    queued: frozenset[int] = frozenset()  # published, waiting in the topic or the channel
    in_flight: frozenset[int] = frozenset()
    finished: frozenset[int] = frozenset()
    close_waited: bool = False  # CLS was answered with CLOSE_WAIT
    reply: Reply | None = None  # the answer to the latest command; None: it had none
    closed_by: str | None = None  # the command whose fatal error closed the connection

    @property
    def is_open(self) -> bool:
        return self.state != STATE_DISCONNECTED


class Command(NamedTuple):
    """A command the client sends: its name and, for RDY, FIN, REQ and TOUCH, its argument
    (a count, a message number)."""

    name: bytes
    arg: int | None = None

    @property
    def label(self) -> str:
        name = self.name.decode()
        if self.arg is None:
            return name
        return f"{name} {self.arg}" if self.name == b"RDY" else f"{name} m{self.arg}"


# -- the table and its faults ---------------------------------------------------------------


def rules_with(faults: frozenset[str]) -> dict[bytes, CommandRule]:
    """The state table with the table faults among `faults` applied."""
    rules = dict(RULES)

    def allow(command: bytes, state: int) -> None:
        rule = rules[command]
        rules[command] = replace(rule, allowed=rule.allowed | {state})

    if "sub_twice" in faults:
        allow(b"SUB", STATE_SUBSCRIBED)
    if "identify_after_sub" in faults:
        allow(b"IDENTIFY", STATE_SUBSCRIBED)
    if "rdy_in_closing" in faults:
        rdy = rules[b"RDY"]
        rules[b"RDY"] = replace(rdy, allowed=rdy.allowed | {STATE_CLOSING}, ignored=frozenset())
    if "fin_refused_in_closing" in faults:
        fin = rules[b"FIN"]
        rules[b"FIN"] = replace(fin, allowed=fin.allowed - {STATE_CLOSING})
    if "state_error_not_fatal" in faults:
        rules = {name: replace(rule, refusal_fatal=False) for name, rule in rules.items()}
    return rules


def markdown_table(faults: frozenset[str] = frozenset()) -> str:
    """The table this spec is built from, as the docs show it."""
    return render_table(rules_with(faults))


# -- the daemon's steps ---------------------------------------------------------------------


def execute(
    conn: Conn,
    command: Command,
    rules: Mapping[bytes, CommandRule] = RULES,
    faults: frozenset[str] = frozenset(),
) -> Conn:
    """The daemon reads `command` on an open connection: it checks the state against the
    table, then executes the command and answers."""
    assert conn.is_open
    conn = conn._replace(reply=None)
    rule = rules[command.name]
    verdict = rule.verdict(conn.state)
    if verdict is Verdict.REFUSED:
        return fail(conn, command, rule.refusal())
    if verdict is Verdict.IGNORED:
        return conn
    after = _EFFECTS[command.name](conn, command, faults)
    if rule.next_state is not None and after.is_open:
        after = after._replace(state=rule.next_state)
    return after


def fail(conn: Conn, command: Command, error: ProtocolError, message: int | None = None) -> Conn:
    """Answer `error`; a fatal one closes the connection."""
    conn = conn._replace(reply=Reply(error.code, error.text, message, error.fatal))
    if error.fatal:
        return conn._replace(state=STATE_DISCONNECTED, closed_by=command.label)
    return conn


def deliver(conn: Conn, message: int, faults: frozenset[str] = frozenset()) -> Conn | None:
    """The daemon sends queued `message` to the connection, or None if it may not now."""
    if not can_deliver(conn, faults) or message not in conn.queued:
        return None
    return conn._replace(queued=conn.queued - {message}, in_flight=conn.in_flight | {message})


def can_deliver(conn: Conn, faults: frozenset[str] = frozenset()) -> bool:
    """nsqd's message pump: a subscriber gets messages while fewer than RDY are in flight."""
    window = conn.rdy + 1 if "window_overrun" in faults else conn.rdy
    return conn.is_open and conn.subscriptions > 0 and len(conn.in_flight) < window


def _identify(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    return conn._replace(identified=True, reply=OK)


def _auth(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    # The daemon has no auth server: nsqd then refuses AUTH.
    return fail(conn, command, ProtocolError(E_AUTH_DISABLED, "AUTH disabled"))


def _sub(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    return conn._replace(subscriptions=conn.subscriptions + 1, reply=OK)


def _rdy(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    assert command.arg is not None
    return conn._replace(rdy=command.arg)


def _fin(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    message = command.arg
    if message not in conn.in_flight:
        return _not_in_flight(conn, command)
    return conn._replace(in_flight=conn.in_flight - {message}, finished=conn.finished | {message})


def _req(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    message = command.arg
    if message not in conn.in_flight:
        return _not_in_flight(conn, command)
    return conn._replace(in_flight=conn.in_flight - {message}, queued=conn.queued | {message})


def _touch(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    if command.arg not in conn.in_flight:
        return _not_in_flight(conn, command)
    return conn


def _not_in_flight(conn: Conn, command: Command) -> Conn:
    name = command.name.decode()
    error = ProtocolError(MESSAGE_COMMANDS[command.name], f"{name} {{id}} failed {NOT_IN_FLIGHT}")
    return fail(conn, command, error, command.arg)


def _cls(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    rdy = conn.rdy if "cls_keeps_rdy" in faults else 0
    return conn._replace(rdy=rdy, close_waited=True, reply=CLOSE_WAIT)


def _nop(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    return conn


def _publish(conn: Conn, command: Command, faults: frozenset[str]) -> Conn:
    message = conn.published
    return conn._replace(published=message + 1, queued=conn.queued | {message}, reply=OK)


_EFFECTS = {
    b"IDENTIFY": _identify,
    b"AUTH": _auth,
    b"SUB": _sub,
    b"RDY": _rdy,
    b"FIN": _fin,
    b"REQ": _req,
    b"TOUCH": _touch,
    b"CLS": _cls,
    b"NOP": _nop,
    b"PUB": _publish,
    b"MPUB": _publish,
    b"DPUB": _publish,
}


# -- actions --------------------------------------------------------------------------------


def commands(bounds: Bounds, conn: Conn) -> Iterator[Command]:
    """Every command the client may send now, with valid parameters."""
    for name in RULES:
        if name == b"RDY":
            yield from (Command(name, count) for count in range(bounds.max_rdy + 1))
        elif name in MESSAGE_COMMANDS:
            yield from (Command(name, m) for m in range(bounds.messages))
        elif name not in PUBLISH_COMMANDS or conn.published < bounds.messages:
            yield Command(name)


def _send_action(bounds: Bounds, names: tuple[bytes, ...], fair: bool) -> Action:
    rules = rules_with(bounds.faults)

    def instances(conn: Conn) -> Iterator[tuple[str, Conn]]:
        if not conn.is_open:
            return
        for command in commands(bounds, conn):
            if command.name in names:
                yield command.label, execute(conn, command, rules, bounds.faults)

    return Action("send(" + "|".join(n.decode() for n in names) + ")", instances, fair)


def _deliver_action(bounds: Bounds) -> Action:
    def instances(conn: Conn) -> Iterator[tuple[str, Conn]]:
        for message in sorted(conn.queued):
            after = deliver(conn, message, bounds.faults)
            if after is not None:
                yield f"deliver m{message}", after

    return Action("deliver", instances, fair=True)


# -- properties -----------------------------------------------------------------------------


def _subscribes_once(conn: Conn) -> bool | str:
    return conn.subscriptions <= 1 or f"{conn.subscriptions} SUBs answered OK"


def _fatal_errors_close(conn: Conn) -> bool | str:
    reply = conn.reply
    if reply is None or not reply.is_error:
        return True
    if FATAL[reply.code] and conn.is_open:
        return f"{reply.code} is fatal but the connection stays open"
    if not FATAL[reply.code] and not conn.is_open:
        return f"{reply.code} is not fatal but the connection was closed"
    return True


def _closed_answers_nothing(before: Conn, label: str, after: Conn) -> bool | str:
    return before.is_open or f"{label} after the connection was closed"


def _delivered_only_after_sub(before: Conn, label: str, after: Conn) -> bool | str:
    if not label.startswith("deliver"):
        return True
    return before.subscriptions > 0 or "a message delivered to a connection that never SUBbed"


def _delivered_within_window(before: Conn, label: str, after: Conn) -> bool | str:
    if not label.startswith("deliver"):
        return True
    in_flight = len(before.in_flight)
    return in_flight < before.rdy or f"delivered with {in_flight} in flight and RDY {before.rdy}"


def _nothing_after_close_wait(before: Conn, label: str, after: Conn) -> bool | str:
    if not label.startswith("deliver"):
        return True
    return not before.close_waited or "a message delivered after CLOSE_WAIT"


def _identify_only_before_sub(before: Conn, label: str, after: Conn) -> bool | str:
    if label != "IDENTIFY" or after.reply != OK:
        return True
    return before.subscriptions == 0 or "IDENTIFY answered OK after SUB"


def finishable(conn: Conn) -> frozenset[int]:
    """The messages in flight that the consumer can still finish: all of them while the
    connection is open; if its own FIN, REQ or TOUCH of one closed it, that one too."""
    if conn.is_open:
        return conn.in_flight
    return frozenset(
        m
        for m in conn.in_flight
        if conn.closed_by in {Command(name, m).label for name in MESSAGE_COMMANDS}
    )


def build(name: str, bounds: Bounds) -> Spec:
    consumer = tuple(MESSAGE_COMMANDS)
    others = tuple(n for n in RULES if n not in MESSAGE_COMMANDS)
    return Spec(
        name=name,
        description="one V2 connection: the state table, replies and delivery window",
        init=lambda: [Conn()],
        actions=(
            _send_action(bounds, others, fair=False),
            # The consumer finishes what it holds: its FIN/REQ/TOUCH are fair.
            _send_action(bounds, consumer, fair=True),
            _deliver_action(bounds),
        ),
        invariants=(
            Invariant("a connection subscribes at most once", _subscribes_once),
            Invariant("a fatal error closes the connection", _fatal_errors_close),
        ),
        step_invariants=(
            StepInvariant("a closed connection answers nothing", _closed_answers_nothing),
            StepInvariant("messages only to a subscriber", _delivered_only_after_sub),
            StepInvariant("never beyond the RDY window", _delivered_within_window),
            StepInvariant("no message after CLOSE_WAIT", _nothing_after_close_wait),
            StepInvariant("IDENTIFY only before SUB", _identify_only_before_sub),
        ),
        liveness=(
            Liveness(
                "in-flight messages can be finished",
                lambda conn: {f"m{m}" for m in finishable(conn)},
            ),
        ),
        bounds={"messages": bounds.messages, "max_rdy": bounds.max_rdy},
        show=show,
    )


def show(conn: Conn) -> str:
    reply = "-" if conn.reply is None else f"{conn.reply.code} {conn.reply.text}".strip()
    closed = f" (closed by {conn.closed_by})" if conn.closed_by else ""
    return (
        f"{STATE_NAMES[conn.state]}{closed} identified={conn.identified} "
        f"subs={conn.subscriptions} rdy={conn.rdy} close_waited={conn.close_waited}\n"
        f"queued={sorted(conn.queued)} in_flight={sorted(conn.in_flight)} "
        f"finished={sorted(conn.finished)} reply: {reply}"
    )


#: The fault each mutant seeds, mapped to the property meant to reject it (the unit tests
#: check that it is this one).
REJECTED_BY = {
    "sub_twice": "a connection subscribes at most once",
    "rdy_in_closing": "no message after CLOSE_WAIT",
    "state_error_not_fatal": "a fatal error closes the connection",
    "fin_refused_in_closing": "in-flight messages can be finished",
    "identify_after_sub": "IDENTIFY only before SUB",
    "cls_keeps_rdy": "no message after CLOSE_WAIT",
    "window_overrun": "never beyond the RDY window",
}


def specs() -> list[Spec]:
    return [build("client_connection", Bounds())]


def mutants() -> list[Mutant]:
    return [
        Mutant(
            f"client_connection.{fault}",
            description,
            build(f"client_connection.{fault}", Bounds(faults=frozenset({fault}))),
        )
        for fault, description in FAULTS.items()
    ]
