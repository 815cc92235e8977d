"""The V2 client connection's state machine, as one table: for each command, the states it is
allowed in, the state it leads to, the states where it is silently ignored, and the error
when it is refused (docs/protocol.md §1.3, §1.9).

Rules this module obeys:

- It is the single source of truth. The daemon (`trionsq.nsqd.protocol_v2`) checks states
  with it, the spec (`spec/client_connection.py`) is built from it, and the docs
  (`docs/client-states.md`) are generated from it by `markdown_table`.
- It holds the state rules only. What an allowed command then does (its parameter checks,
  its reply, its effect on the channel) belongs to its handler.

Theory of operation: a connection starts in INIT, where it may IDENTIFY, AUTH and SUB; a
successful SUB makes it SUBSCRIBED, where it consumes (RDY, FIN, REQ, TOUCH); CLS makes it
CLOSING, where it may still FIN, REQ and TOUCH what it holds, and RDY is ignored so that no
new message is sent to it. PUB, MPUB, DPUB and NOP work in every state. A command sent in a
state where it is neither allowed nor ignored is refused with a fatal
``E_INVALID cannot <CMD> in current state``: nsqd sends the error and closes the connection,
whose state then becomes DISCONNECTED.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .errors import E_INVALID, ProtocolError

# Client states, numbered as nsqd reports them in /stats (docs/protocol.md §1.9).
STATE_INIT = 0
STATE_DISCONNECTED = 1
STATE_CONNECTED = 2  # nsqd's lookup peers only; no V2 client is ever in it
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

STATE_NAMES: dict[int, str] = {
    STATE_INIT: "INIT",
    STATE_DISCONNECTED: "DISCONNECTED",
    STATE_CONNECTED: "CONNECTED",
    STATE_SUBSCRIBED: "SUBSCRIBED",
    STATE_CLOSING: "CLOSING",
}

#: The states in which a connection reads commands, in the order a connection goes through them.
COMMAND_STATES: tuple[int, ...] = (STATE_INIT, STATE_SUBSCRIBED, STATE_CLOSING)

_ANY = frozenset(COMMAND_STATES)
_CONSUMING = frozenset({STATE_SUBSCRIBED, STATE_CLOSING})
_NONE: frozenset[int] = frozenset()


class Verdict(enum.Enum):
    """What a state makes of a command."""

    ALLOWED = "allowed"
    IGNORED = "ignored"
    REFUSED = "refused"


@dataclass(frozen=True)
class CommandRule:
    """One command's row of the table."""

    command: bytes
    allowed: frozenset[int]
    """The states the command is executed in."""
    next_state: int | None = None
    """The state a successful execution leads to (None: unchanged)."""
    ignored: frozenset[int] = _NONE
    """The states where the command is read and dropped: no effect, no reply."""
    refusal_fatal: bool = True
    """Whether the refusal closes the connection (it does in nsqd: E_INVALID is fatal)."""

    def verdict(self, state: int) -> Verdict:
        if state in self.allowed:
            return Verdict.ALLOWED
        if state in self.ignored:
            return Verdict.IGNORED
        return Verdict.REFUSED

    def refusal(self) -> ProtocolError:
        """The error sent when the command comes in a state that refuses it."""
        name = self.command.decode("ascii")
        return ProtocolError(E_INVALID, f"cannot {name} in current state", self.refusal_fatal)


def _rule(
    command: bytes,
    allowed: frozenset[int],
    next_state: int | None = None,
    ignored: frozenset[int] = _NONE,
) -> tuple[bytes, CommandRule]:
    return command, CommandRule(command, allowed, next_state, ignored)


#: The table, in nsqd's order of a connection's life.
RULES: dict[bytes, CommandRule] = dict(
    (
        _rule(b"IDENTIFY", frozenset({STATE_INIT})),
        _rule(b"AUTH", frozenset({STATE_INIT})),
        _rule(b"SUB", frozenset({STATE_INIT}), next_state=STATE_SUBSCRIBED),
        _rule(b"RDY", frozenset({STATE_SUBSCRIBED}), ignored=frozenset({STATE_CLOSING})),
        _rule(b"FIN", _CONSUMING),
        _rule(b"REQ", _CONSUMING),
        _rule(b"TOUCH", _CONSUMING),
        _rule(b"CLS", frozenset({STATE_SUBSCRIBED}), next_state=STATE_CLOSING),
        _rule(b"NOP", _ANY),
        _rule(b"PUB", _ANY),
        _rule(b"MPUB", _ANY),
        _rule(b"DPUB", _ANY),
    )
)


def state_error(command: bytes) -> ProtocolError:
    """The error nsqd sends when `command` comes in a state that refuses it."""
    return RULES[command].refusal()


# -- the docs -------------------------------------------------------------------------------


def cell(rule: CommandRule, state: int) -> str:
    """What the table says of `rule`'s command in `state`, as the docs write it."""
    verdict = rule.verdict(state)
    if verdict is Verdict.ALLOWED and rule.next_state not in (None, state):
        assert rule.next_state is not None
        return f"allowed → {STATE_NAMES[rule.next_state]}"
    if verdict is Verdict.REFUSED:
        return "**refused, fatal**" if rule.refusal_fatal else "**refused**"
    return "allowed" if verdict is Verdict.ALLOWED else "ignored"


def markdown_table(rules: dict[bytes, CommandRule] | None = None) -> str:
    """The table as a markdown table: a row per command, a column per state."""
    rules = RULES if rules is None else rules
    header = ["command", *(STATE_NAMES[s] for s in COMMAND_STATES)]
    lines = [_row(header), _row(["---"] * len(header))]
    for command, rule in rules.items():
        lines.append(_row([f"`{command.decode()}`", *(cell(rule, s) for s in COMMAND_STATES)]))
    return "\n".join(lines) + "\n"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    print(markdown_table(), end="")
