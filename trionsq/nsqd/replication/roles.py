"""The roles of a replicated topic's members, as data and pure functions: the roles and their
transitions, epochs as ballots, quorums, who may promise an epoch, stepping down, which
stream a replica accepts, and the lease (docs/replication.md, sections 7 to 9).

Rules this module obeys:

- It is the single source of truth for these rules. The daemon (`topic.TopicReplica`,
  `node.Replication`) makes its decisions with them and the spec (`spec/replication.py`) is
  built from them, so that ``python -m spec check`` checks the rules the daemon runs.
- It is sans-IO: no clock, no I/O, no trio, nothing from the daemon. Times are arguments
  (the daemon passes ``trio.current_time()``; the spec's time is abstract and passes none).
- Epochs are ballots ``(round, node)`` ordered as pairs. The daemon stores and sends them as
  integers (`encode`: ``round * NODE_BITS + node``), which order the same way; the spec
  keeps the pairs. The comparisons here take either.

Theory of operation: a member starts as a REPLICA. A replica that has not heard from the
primary for the failover timeout and gets a quorum of yeses in a pre-vote STANDs: it is a
CANDIDATE in the next ballot of its own (`next_ballot`) and asks every member to promise it.
A member promises only a ballot above every one it has promised or led (`may_promise`), and
with the lease only once the primary is silent to it too; promising, it steps down to a
replica of that ballot (`step_down`). With a quorum of promises (`is_quorum`) the candidate
is ELECTED: the PRIMARY of its ballot. A candidate without them is DEFEATED (a replica again,
keeping its epoch). A primary or candidate that meets a higher ballot (a REFUSE, a PREPARE it
promises, a newer primary's HEARTBEAT or SYNC) steps down; so does a primary whose lease ran
out (`lease_valid`). A replica writes and acknowledges the stream (MSGS, FINS, CHANNEL) only
from the primary of its own epoch (`stream_verdict`), and refuses an older one's, which is
what makes an old primary step down.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

# -- roles and their transitions ----------------------------------------------------------------

PRIMARY, REPLICA, CANDIDATE = "primary", "replica", "candidate"
#: The roles, in the order the table lists them.
ROLES: tuple[str, ...] = (PRIMARY, REPLICA, CANDIDATE)
#: A node's role is not on disk: it starts (and restarts) as a replica.
INITIAL_ROLE = REPLICA

# The events that change a role.
STAND = "stand"
"""The failover timeout passed with no word from the primary and a quorum said yes to the
pre-vote (or an operator's ``POST /topic/takeover``): a replica stands in a new ballot."""
ELECTED = "elected"
"""A quorum promised the candidate's ballot: it takes office."""
DEFEATED = "defeated"
"""No quorum promised in time: the candidate is a replica again (it keeps its epoch)."""
STEP_DOWN = "step_down"
"""It met a higher epoch (a REFUSE, a PREPARE it promises, a newer primary's HEARTBEAT or
SYNC), or, as a primary, its lease ran out."""
RESTART = "restart"
"""The process (re)starts: the role is not on disk."""

#: The events, in the order the table lists them.
EVENTS: tuple[str, ...] = (STAND, ELECTED, DEFEATED, STEP_DOWN, RESTART)

Transitions = Mapping[tuple[str, str], str]

#: (role, event) -> the role it leads to. A pair not in the table does not happen: the event
#: does not apply to the role (a primary does not stand; only a candidate is elected).
TRANSITIONS: Transitions = MappingProxyType(
    {
        (REPLICA, STAND): CANDIDATE,
        (CANDIDATE, ELECTED): PRIMARY,
        (CANDIDATE, DEFEATED): REPLICA,
        (PRIMARY, STEP_DOWN): REPLICA,
        (CANDIDATE, STEP_DOWN): REPLICA,
        (REPLICA, STEP_DOWN): REPLICA,
        **{(role, RESTART): INITIAL_ROLE for role in ROLES},
    }
)


def allows(role: str, event: str, table: Transitions = TRANSITIONS) -> bool:
    """Whether `event` applies to a node in `role`."""
    return (role, event) in table


def next_role(role: str, event: str, table: Transitions = TRANSITIONS) -> str:
    """The role `event` makes of a node in `role` (KeyError if it does not apply)."""
    return table[(role, event)]


# -- epochs as ballots --------------------------------------------------------------------------

#: An integer epoch is ``round * NODE_BITS + node``: node IDs are below it.
NODE_BITS = 1024

Ballot = tuple[int, int]
"""``(round, node)``, ordered as a pair."""

#: An epoch as the daemon holds it (an int) or the spec does (a Ballot): both are ordered.
E = TypeVar("E", int, Ballot)


def encode(ballot: Ballot) -> int:
    """The integer epoch of a ballot (nsqd.dat, the wire): ordered as the ballots are."""
    round_, node = ballot
    return round_ * NODE_BITS + node


def ballot_of(epoch: int) -> Ballot:
    """The ballot an integer epoch encodes."""
    round_, node = divmod(epoch, NODE_BITS)
    return round_, node


def epoch_text(epoch: int) -> str:
    """An integer epoch as the logs and /stats show it: ``round.node``."""
    round_, node = ballot_of(epoch)
    return f"{round_}.{node}"


def outranks(epoch: E, other: E) -> bool:
    """Whether `epoch` is a later ballot than `other`."""
    return epoch > other


def next_ballot(held: Ballot, node: int) -> Ballot:
    """The ballot `node` stands in when it holds `held`: the next round, its own: two nodes
    never stand in the same ballot, and it is above every ballot the node has met."""
    return held[0] + 1, node


def next_epoch(held: int, node: int) -> int:
    """`next_ballot` of an integer epoch."""
    return encode(next_ballot(ballot_of(held), node))


# -- quorums ------------------------------------------------------------------------------------


def quorum_size(members: int) -> int:
    """The quorum of a replica set of `members` nodes: a majority."""
    return members // 2 + 1


def own_votes(stand_alone: bool) -> int:
    """What a node's own vote counts for: twice when it stands alone (``POST
    /topic/takeover`` on a two-member set: the operator vouches that the other is gone,
    docs/replication.md section 8), once otherwise."""
    return 2 if stand_alone else 1


def counted_quorum(quorum: int, doubled: bool) -> int:
    """The quorum a node counts against with its own vote counted once: one fewer while its
    vote counts twice (a primary that stood alone, until the other member joins again)."""
    return quorum - (own_votes(doubled) - 1)


def is_quorum(votes: int, quorum: int) -> bool:
    """Whether `votes` (pre-votes, promises, copies: this node's own included) make a quorum."""
    return votes >= quorum


# -- promises, stepping down, the stream --------------------------------------------------------


def may_promise(
    offered: E,
    held: E,
    role: str,
    *,
    damaged: bool = False,
    lease_holds: bool = False,
    heard_primary: bool = False,
) -> bool:
    """Whether a node in `role` holding epoch `held` promises ballot `offered` (PREPARE), or
    says yes to it in a pre-vote (PREVOTE). Only a higher ballot, never with a damaged log
    (until it is repaired); a primary only once its lease has run out; a replica only once it
    has not heard from the primary for the failover timeout; a candidate yields to a higher
    ballot. The defaults are the spec's abstract time: no clock says no."""
    if not outranks(offered, held) or damaged:
        return False
    if role == PRIMARY:
        return not lease_holds
    if role == REPLICA:
        return not heard_primary
    return True  # a candidate yields to a higher ballot


def primary_silent(now: float, last_heard: float, timeout: float) -> bool:
    """The failure detector: nothing heard from the primary for the failover timeout."""
    return now - last_heard >= timeout


def step_down(role: str, held: E, met: E, table: Transitions = TRANSITIONS) -> tuple[str, E]:
    """The role and epoch of a node in `role` holding `held` that steps down on meeting
    `met`: a replica of the higher of the two."""
    return next_role(role, STEP_DOWN, table), max(held, met)


def must_adopt(role: str, held: E, met: E) -> bool:
    """Whether a node that hears from the primary of `met` (not older than `held`: a HEARTBEAT,
    a SYNC) steps down to it first: unless it is already a replica of that epoch."""
    return outranks(met, held) or role != REPLICA


class Verdict(enum.Enum):
    """What a member makes of a request in an epoch."""

    ACCEPT = "accept"
    """Apply it (write, acknowledge, follow its sender)."""
    ADOPT = "adopt"
    """Step down to its (higher) epoch, then follow its sender."""
    IGNORE = "ignore"
    """Drop it, unanswered: not yet in that epoch (the primary syncs it first), or not a
    replica."""
    REFUSE = "refuse"
    """Answer REFUSE with this node's epoch: the sender is behind and steps down."""


def stream_verdict(role: str, held: E, epoch: E) -> Verdict:
    """A primary's stream of epoch `epoch` (MSGS, FINS, CHANNEL) at a node in `role` holding
    `held`: a replica accepts it only from the primary of its own epoch; an older epoch's is
    refused; anything else is ignored."""
    if outranks(held, epoch):
        return Verdict.REFUSE
    if epoch != held or role != REPLICA:
        return Verdict.IGNORE
    return Verdict.ACCEPT


def contact_verdict(role: str, held: E, epoch: E) -> Verdict:
    """A primary's HEARTBEAT or SYNC in epoch `epoch` at a node in `role` holding `held`: an
    older epoch's is refused; otherwise the node follows it, stepping down to its epoch first
    if it must (`must_adopt`)."""
    if outranks(held, epoch):
        return Verdict.REFUSE
    return Verdict.ADOPT if must_adopt(role, held, epoch) else Verdict.ACCEPT


# -- the lease ----------------------------------------------------------------------------------


def lease_binds(role: str, degraded: str) -> bool:
    """Whether a node serves (delivers) only while its lease holds: a primary, unless
    ``--replication-degraded=accept``."""
    return role == PRIMARY and degraded != "accept"


def lease_valid(
    now: float, took_office: float, lease: float, heartbeat_acks: Iterable[float], need: int
) -> bool:
    """A primary's lease (docs/replication.md section 8): it holds during the first `lease`
    after taking office, and then while `need` members (the quorum less the primary's own
    vote) have acknowledged a heartbeat sent less than `lease` ago (`heartbeat_acks`: the
    send time of the latest heartbeat each member acknowledged)."""
    if need <= 0 or now - took_office < lease:
        return True
    recent = sum(1 for sent in heartbeat_acks if now - sent < lease)
    return recent >= need


def renews_lease(ack_epoch: int, epoch: int, sent: float, latest: float) -> bool:
    """Whether a member's HEARTBEAT_ACK counts for the primary's lease: an acknowledgement in
    the primary's epoch, of a heartbeat sent after the latest it had acknowledged."""
    return ack_epoch == epoch and sent > latest


# -- the rules as one value, for the spec -------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Rules:
    """The rules the spec is built from, as one value, so that a mutant can perturb one of
    them (`dataclasses.replace`). By default every field is this module's own table or
    function, the ones the daemon calls."""

    transitions: Transitions = field(default_factory=lambda: TRANSITIONS)
    quorum_size: Callable[[int], int] = quorum_size
    next_ballot: Callable[[Ballot, int], Ballot] = next_ballot
    may_promise: Callable[[Ballot, Ballot, str], bool] = may_promise
    stream_verdict: Callable[[str, Ballot, Ballot], Verdict] = stream_verdict

    def allows(self, role: str, event: str) -> bool:
        return allows(role, event, self.transitions)

    def next_role(self, role: str, event: str) -> str:
        return next_role(role, event, self.transitions)

    def step_down(self, role: str, held: Ballot, met: Ballot) -> tuple[str, Ballot]:
        return step_down(role, held, met, self.transitions)


#: The rules as the daemon runs them.
RULES = Rules()


# -- the docs -----------------------------------------------------------------------------------


def markdown_table(table: Transitions = TRANSITIONS) -> str:
    """The transitions as a markdown table: a row per role, a column per event."""
    header = ["role", *(f"`{event}`" for event in EVENTS)]
    lines = [_row(header), _row(["---"] * len(header))]
    for role in ROLES:
        cells = [table.get((role, e), "—") for e in EVENTS]
        lines.append(_row([role, *cells]))
    return "\n".join(lines) + "\n"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    print(markdown_table(), end="")
