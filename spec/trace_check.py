"""Trace validation of replicated topics: ``python -m spec trace FILE...`` merges the traces
the members of one run wrote (``--replication-trace-file``, trionsq/nsqd/replication/trace.py)
and replays them against the spec (spec/replication.py), as etcd's raft validates its traces
against its TLA+ spec. It names the first step the spec does not allow (node, sequence
number, step, rule broken) and exits 1; 0 when every step is allowed, 2 when a trace cannot be
read.

**Mapping.** Each step of a trace is an action of the spec (`ACTIONS`), replayed on a state
reconstructed from the traces: per topic and node, its role and epoch (which every step also
records, so that a change of either that no step accounts for is itself a violation), the
position its log was written to as the primary, the promises it counted as a candidate, the
promises it made. ``start`` and ``stop`` are the spec's ``restart`` and ``crash`` (every topic
of the node a replica again; its epoch is what ``load`` reads from disk); a candidate that the
next step shows a replica of the same epoch was defeated (roles.py's ``defeated``: the spec's
candidate that never takes office); a primary that steps down in its own epoch (its lease ran
out) loses its volatile state, as the spec's ``crash`` then ``restart``.

**Order.** Steps of one node are totally ordered by their sequence numbers. Steps of different
nodes are not, in general: the members' clocks differ and a step is recorded a little before or
after the moment the spec's atomic action stands for (a candidate takes office on its last
promise in the spec; the daemon records it after the promises have come back, possibly after a
higher ballot was promised elsewhere). So the rules below need no total order: each is a
property of one node's own sequence, or of one epoch, or asks only whether some other node's
trace holds a step at all (a promise, a candidacy, a take-over, a stream write), never when.
The steps are merged by their monotonic timestamps (by wall-clock time when the traces come
from different hosts, told apart by the ``start`` lines' boot IDs) only to report the first
violation in a readable order. One rule uses the clock: a member that a primary counts for its
quorum must have recorded the write it is counted for, unless its trace may have lost its tail
(``kill -9`` before the write was flushed); that is known only when the traces share one host's
monotonic clock (the member recorded a later step after it, and did not restart around then).

**Rules** (the spec's property or action each stands for):

- ``one primary per epoch, epochs only grow`` (the spec's step invariant): a node takes office
  only in its own ballot, in which no other node took office, and never twice in one epoch;
- ``suspect``: a node stands only as a replica (or a defeated candidate), in the next ballot of
  its own (``(its round + 1, itself)``);
- ``promise``: a node promises only a candidate's own ballot, above its epoch; a candidate
  merges the state of a node only if that node promised its ballot; it takes office (as a
  candidate of that ballot) only with the promises of a quorum, its own vote counted once (twice
  on an operator's forced takeover, docs/replication.md section 8);
- ``a promise is kept across a crash``: a node that restarts reads an epoch at least every
  ballot it led and every promise of it that a candidate counted (unless its nsqd.dat has no
  entry for the topic at all: a member whose disk was wiped starts afresh, as a new one);
- ``step_down``: a node adopts only a ballot some candidate stood in, epochs never go back;
- ``replicate``: a replica writes a stream frame (or a FIN batch) only in its own epoch, as a
  replica, from the node that took office in that epoch;
- only the primary of the epoch writes and streams its log (positions only grow), acknowledges,
  sends FIN batches and lets members join; a member joins only once its trace shows it adopted
  the primary's epoch;
- ``an acknowledged message was written by a quorum`` (the spec's invariant): publishes up to
  position N are acknowledged only when the primary wrote up to N and enough members to make a
  quorum with it had acknowledged N (as the primary counts them); and each member so counted
  wrote that epoch's stream from that primary up to N (its own trace), or joined the stream at
  N or beyond (a catch-up).

**Not checked from traces** (no step records them): deliveries, FINs and message IDs, so not
the spec's "no redelivery of a FIN that reached the replicas", "an acknowledged message is lost
only if every node that wrote it lost it" or liveness (the fault suite's checker and the
stateful test check those); the lease and the failure detector (time is abstract in the spec);
fsyncs and power losses; what a summary or a catch-up carries (only that they happened). With
``--replication-degraded=accept`` acknowledgement is outside the spec, and not checked.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from trionsq.nsqd.replication.roles import (
    CANDIDATE,
    NODE_BITS,
    PRIMARY,
    REPLICA,
    epoch_text,
    next_epoch,
    own_votes,
    quorum_size,
)

#: Stream totals at or above this acknowledge a catch-up's frames (replication/catchup.py).
CATCH_UP_BASE = 1 << 62
#: A member that restarted this long before a step may have lost its trace's tail.
RESTART_SLACK = 2.0

# The rules, as a violation names them.
ONE_PRIMARY = "one primary per epoch, epochs only grow"
UNTRACED = "every change of role or epoch is a step of the spec"
STAND = "suspect: a replica stands in the next ballot of its own"
PROMISE = "promise: only a candidate's ballot above the node's epoch"
PROMISER = "promise: a candidate merges only the state of a node that promised its ballot"
ELECTED = "take office: only a candidate, in its ballot, with the promises of a quorum"
KEPT = "a promise is kept across a crash"
ADOPT = "step_down: only to a ballot a candidate stood in"
STREAM = "replicate: a replica writes only the stream of its epoch's primary"
PRIMARY_ONLY = "only the primary of the epoch streams, acknowledges, sends FINs, takes members"
POSITIONS = "publish: a primary's stream positions only grow"
JOIN = "join: a member joins the primary's epoch only once it adopted it"
ACK_QUORUM = "an acknowledged message was written by a quorum"
ACK_BACKED = "an acknowledged message was written by a quorum: each member counted wrote it"

#: The spec's action (spec/replication.py) each kind of step stands for.
ACTIONS = {
    "start": "restart",
    "stop": "crash",
    "load": "restart (the topic's epoch read from disk)",
    "stand": "suspect",
    "promise": "promise",
    "merge": "promise or join (the merge of a state)",
    "take_office": "promise (a quorum's: take office)",
    "step_down": "step_down",
    "wrote": "publish / replicate",
    "ack": "acknowledge",
    "join": "join",
    "fins_sent": "replicate_fins",
    "fins": "replicate_fins",
    "deleted": "none (a topic deleted: its state starts again)",
}

_KNOWN = set(ACTIONS)


class TraceError(Exception):
    """A trace that cannot be read: a malformed line other than a torn last one, an unknown
    format, two steps of one node with one sequence number."""


@dataclass(frozen=True)
class Step:
    """One line of a trace."""

    node: int
    seq: int
    ev: str
    wall: float
    mono: float
    topic: str | None
    role: str | None
    epoch: int | None
    fields: dict[str, Any]
    where: str

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def action(self) -> str:
        if self.ev == "wrote":
            return "publish" if self.get("sender") == self.node else "replicate"
        if self.ev == "step_down" and self.get("was") == REPLICA:
            return "promise or join (the replica adopts the epoch)"
        return ACTIONS.get(self.ev, "?")

    def describe(self) -> str:
        shown = []
        for key, value in self.fields.items():
            if key in ("promised", "of") and isinstance(value, int):
                value = epoch_text(value)
            shown.append(f"{key}={value}")
        text = f"{self.ev}({', '.join(shown)})"
        if self.topic is not None:
            epoch = "-" if self.epoch is None else epoch_text(self.epoch)
            text += f" topic {self.topic} as {self.role} of epoch {epoch}"
        return text


@dataclass(frozen=True)
class Violation:
    """The first step the spec does not allow."""

    step: Step
    rule: str
    detail: str

    def __str__(self) -> str:
        step = self.step
        return (
            f"VIOLATION at node {step.node} seq {step.seq} ({step.where}): {step.describe()}"
            f" [spec action: {step.action()}] breaks {self.rule!r}: {self.detail}"
        )


@dataclass
class Report:
    """What a check found."""

    steps: int = 0
    nodes: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    violation: Violation | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def summary(self) -> str:
        kinds = " ".join(f"{k}={self.counts[k]}" for k in sorted(self.counts))
        head = (
            f"trace: {self.steps} steps of nodes {self.nodes} on topics {self.topics} ({kinds}): "
            + ("ok" if self.ok else "VIOLATION")
        )
        lines = [head, *(f"  note: {note}" for note in self.notes)]
        if self.violation is not None:
            lines.append(str(self.violation))
        return "\n".join(lines)


# -- reading ----------------------------------------------------------------------------------


def _is_start(raw: bytes) -> bool:
    try:
        return bool(json.loads(raw).get("ev") == "start")
    except (ValueError, AttributeError):
        return False


def read_trace(path: str | Path, notes: list[str] | None = None) -> list[Step]:
    """The steps of one trace file. A line cut short is accepted at the end of the file or
    before a ``start`` line (a process killed while writing it); it is noted in `notes`."""
    lines = Path(path).read_bytes().split(b"\n")
    steps = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            line = json.loads(raw)
            if not isinstance(line, dict):
                raise ValueError("not an object")
        except ValueError:
            rest = [r for r in lines[number:] if r.strip()]
            if not rest or _is_start(rest[0]):
                if notes is not None:
                    notes.append(f"{where}: a line cut short (its process was killed)")
                continue
            raise TraceError(f"{where}: not a JSON object: {raw[:80]!r}") from None
        steps.append(_step(line, where))
    return steps


def _step(line: dict[str, Any], where: str) -> Step:
    try:
        node, seq, ev = line.pop("node"), line.pop("seq"), line.pop("ev")
        wall, mono = float(line.pop("wall")), float(line.pop("mono"))
    except (KeyError, TypeError, ValueError):
        raise TraceError(f"{where}: a step without node, seq, ev, wall and mono") from None
    if not (isinstance(node, int) and isinstance(seq, int) and isinstance(ev, str)):
        raise TraceError(f"{where}: node and seq must be integers, ev a string")
    if ev == "start" and line.get("format", 1) != 1:
        raise TraceError(f"{where}: trace format {line.get('format')} (this checker reads 1)")
    topic, role, epoch = line.pop("topic", None), line.pop("role", None), line.pop("epoch", None)
    return Step(node, seq, ev, wall, mono, topic, role, epoch, line, where)


def merge(traces: Iterable[Sequence[Step]]) -> tuple[list[Step], bool]:
    """Every step of every trace in one sequence that keeps each node's order, by monotonic
    time if the traces share a host's clock (by wall-clock time otherwise); and whether they
    do."""
    by_node: dict[int, list[Step]] = defaultdict(list)
    for trace in traces:
        for step in trace:
            by_node[step.node].append(step)
    boots = set()
    for node, steps in by_node.items():
        steps.sort(key=lambda s: s.seq)
        for before, after in pairwise(steps):
            if before.seq == after.seq:
                raise TraceError(
                    f"node {node} has two steps numbered {after.seq} ({before.where},"
                    f" {after.where}): two members with one --node-id, or one file twice?"
                )
        boots |= {s.get("boot") for s in steps if s.ev == "start"}
    same_clock = len(boots) <= 1

    def key(step: Step) -> tuple[float, int]:
        return (step.mono if same_clock else step.wall, step.node)

    ordered = list(heapq.merge(*(by_node[n] for n in sorted(by_node)), key=key))
    return ordered, same_clock


# -- what every trace holds, whenever -----------------------------------------------------------


class _Index:
    """What the traces hold, regardless of order: the existence questions the rules ask."""

    def __init__(self, steps: list[Step], same_clock: bool) -> None:
        self.same_clock = same_clock
        self.nodes = {s.node for s in steps}
        self.stood: set[tuple[str, int]] = set()
        self.served: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.promised: dict[tuple[str, int, int], list[int]] = defaultdict(list)  # seqs
        self.counted: set[tuple[str, int, int]] = set()
        self.epochs: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.wrote: dict[tuple[str, int, int, int], int] = {}
        self.joined: dict[tuple[str, int, int, int], int] = {}
        self.monos: dict[int, list[float]] = defaultdict(list)
        self.starts: dict[int, list[float]] = defaultdict(list)
        for s in steps:
            self.monos[s.node].append(s.mono)
            if s.ev == "start":
                self.starts[s.node].append(s.mono)
            topic = s.topic
            if topic is None or s.epoch is None:
                continue
            self.epochs[(topic, s.node)].add(s.epoch)
            if s.ev == "stand" or (s.ev == "load" and s.get("saved")):
                # (an epoch nsqd.dat holds was stood in, if not in these traces: before them)
                self.stood.add((topic, s.epoch))
            elif s.ev == "take_office":
                self.served[(topic, s.epoch)].add(s.node)
            elif s.ev == "promise":
                self.promised[(topic, s.node, s.get("promised"))].append(s.seq)
            elif s.ev == "merge" and s.role == CANDIDATE:
                self.counted.add((topic, s.get("sender"), s.epoch))
            elif s.ev == "wrote" and s.get("sender") != s.node:
                total = s.get("total", -1)
                if isinstance(total, int) and total < CATCH_UP_BASE:
                    key = (topic, s.node, s.get("of", s.epoch), s.get("sender"))
                    self.wrote[key] = max(self.wrote.get(key, -1), total)
            elif s.ev == "join":
                key = (topic, s.node, s.epoch, s.get("member"))
                self.joined[key] = max(self.joined.get(key, -1), s.get("pos", -1))
        for monos in self.monos.values():
            monos.sort()
        for starts in self.starts.values():
            starts.sort()

    def traced(self, node: Any) -> bool:
        return node in self.nodes

    def tail_may_be_lost(self, node: int, mono: float) -> bool:
        """Whether `node`'s trace may lack a step it made before `mono` (another process's
        clock): it has no later step, or it restarted around then; always with other hosts."""
        if not self.same_clock:
            return True
        monos = self.monos.get(node, [])
        i = bisect.bisect_right(monos, mono)
        if i == len(monos):
            return True
        starts = self.starts.get(node, [])
        j = bisect.bisect_right(starts, mono - RESTART_SLACK)
        return j < len(starts) and starts[j] <= monos[i]


# -- the replay -------------------------------------------------------------------------------


@dataclass
class _Member:
    """One node's state for one topic, as the steps so far make it."""

    role: str | None = None
    epoch: int = 0
    written: int = -1
    doubled: bool = False
    votes: set[int] = field(default_factory=set)
    #: The highest epoch on its disk for sure: ballots it led, promises a candidate counted.
    kept: int = 0

    def restart(self) -> None:
        self.role = None
        self.written = -1
        self.doubled = False
        self.votes = set()


class _Replay:
    def __init__(self, steps: list[Step], same_clock: bool, report: Report) -> None:
        self.steps = steps
        self.index = _Index(steps, same_clock)
        self.report = report
        self.state: dict[tuple[str, int], _Member] = {}
        self.members: dict[int, int] = {}
        self.degraded: dict[int, str] = {}
        self.office: dict[tuple[str, int], Step] = {}
        self.noted: set[tuple[str, int]] = set()

    def run(self) -> Violation | None:
        for step in self.steps:
            violation = self.apply(step)
            if violation is not None:
                return violation
        return None

    def apply(self, step: Step) -> Violation | None:
        if step.ev not in _KNOWN:
            self.report.notes.append(f"{step.where}: unknown step {step.ev!r} ignored")
            return None
        if step.ev in ("start", "stop"):
            if step.ev == "start":
                self.members[step.node] = int(step.get("members", 0))
                self.degraded[step.node] = str(step.get("degraded", "refuse"))
            for (_, node), member in self.state.items():
                if node == step.node:
                    member.restart()
            return None
        if step.topic is None or step.role is None or step.epoch is None:
            return Violation(step, UNTRACED, "a topic's step without its topic, role and epoch")
        member = self.state.setdefault((step.topic, step.node), _Member())
        if step.ev == "load":
            return self._load(step, member)
        if member.role is None:
            # The trace begins after the topic was loaded (a file cut short at its start):
            # its state is taken from the step, which is not checked.
            if (step.topic, step.node) not in self.noted:
                self.noted.add((step.topic, step.node))
                self.report.notes.append(
                    f"node {step.node}'s trace of {step.topic} starts at seq {step.seq}"
                    " without a load: its state before is not known"
                )
            member.role, member.epoch = step.role, step.epoch
            if step.ev == "take_office":
                self.office[(step.topic, step.epoch)] = step
            return None
        self._defeat(step, member)
        handler = getattr(self, "_" + step.ev)
        violation: Violation | None = handler(step, member)
        if violation is not None:
            return violation
        if step.ev != "promise" and (member.role, member.epoch) != (step.role, step.epoch):
            return self._untraced(step, member)
        return None

    # -- helpers ---------------------------------------------------------------------------

    def _quorum(self, node: int) -> int:
        """The quorum of the set `node` says it is in (as the others say, if its trace
        lost its start)."""
        return quorum_size(self.members.get(node) or max(self.members.values(), default=0))

    def _defeat(self, step: Step, member: _Member) -> None:
        """A candidate that this step shows a replica of its ballot (before the step) was
        defeated: roles.py's `defeated`, with no step of its own."""
        if member.role != CANDIDATE or step.ev in ("stand", "take_office"):
            return
        if step.ev == "step_down":
            was = step.get("was")
        else:
            was = step.role if step.epoch == member.epoch else None
        if was == REPLICA:
            member.role = REPLICA
            member.votes = set()

    def _untraced(self, step: Step, member: _Member) -> Violation:
        epoch = epoch_text(member.epoch)
        return Violation(
            step,
            UNTRACED,
            f"the step shows a {step.role} of epoch {epoch_text(step.epoch or 0)}; the steps"
            f" before it leave a {member.role} of epoch {epoch}",
        )

    # -- the steps ---------------------------------------------------------------------------

    def _load(self, step: Step, member: _Member) -> Violation | None:
        assert step.topic is not None and step.epoch is not None
        epoch = step.epoch
        member.restart()
        member.role, member.epoch = REPLICA, epoch
        if not step.get("saved", True):
            member.kept = 0  # nsqd.dat without the topic (a new or wiped member): no history
        if epoch < member.kept:
            again = self.index.promised.get((step.topic, step.node, member.kept), [])
            if not any(seq > step.seq for seq in again):
                return Violation(
                    step,
                    KEPT,
                    f"restarted in epoch {epoch_text(epoch)}, below epoch"
                    f" {epoch_text(member.kept)}, which it led or promised to a candidate that"
                    " counted the promise",
                )
        if step.role != REPLICA:
            return Violation(step, UNTRACED, f"a topic loaded as a {step.role}")
        return None

    def _stand(self, step: Step, member: _Member) -> Violation | None:
        if member.role == PRIMARY:
            return Violation(step, STAND, f"a primary of epoch {epoch_text(member.epoch)} stands")
        expected = next_epoch(member.epoch, step.node)
        if step.epoch != expected:
            return Violation(
                step,
                STAND,
                f"stands in epoch {epoch_text(step.epoch or 0)}; from epoch"
                f" {epoch_text(member.epoch)} its next ballot is {epoch_text(expected)}",
            )
        member.role, member.epoch = CANDIDATE, expected
        member.votes = set()
        return None

    def _promise(self, step: Step, member: _Member) -> Violation | None:
        # Recorded before the step: the role and epoch are those the node promises from.
        if (member.role, member.epoch) != (step.role, step.epoch):
            return self._untraced(step, member)
        promised, to = step.get("promised"), step.get("to")
        if not isinstance(promised, int) or promised % NODE_BITS != to or to == step.node:
            return Violation(step, PROMISE, f"epoch {promised} is not the ballot of node {to}")
        if promised <= member.epoch:
            return Violation(
                step,
                PROMISE,
                f"promises epoch {epoch_text(promised)}, not above its epoch"
                f" {epoch_text(member.epoch)}",
            )
        assert step.topic is not None
        if (step.topic, step.node, promised) in self.index.counted:
            member.kept = max(member.kept, promised)
        return None

    def _merge(self, step: Step, member: _Member) -> Violation | None:
        if member.role != CANDIDATE or step.role != CANDIDATE:
            return None  # a join's or a repair's
        sender = step.get("sender")
        assert step.topic is not None
        key = (step.topic, sender, member.epoch)
        if self.index.traced(sender) and key not in self.index.promised:
            return Violation(
                step,
                PROMISER,
                f"node {sender} never promised epoch {epoch_text(member.epoch)}",
            )
        member.votes.add(sender)
        return None

    def _take_office(self, step: Step, member: _Member) -> Violation | None:
        assert step.topic is not None and step.epoch is not None
        epoch = step.epoch
        if epoch % NODE_BITS != step.node:
            return Violation(step, ONE_PRIMARY, f"epoch {epoch_text(epoch)} is not its ballot")
        held = self.office.get((step.topic, epoch))
        if held is not None:
            who = "it" if held.node == step.node else f"node {held.node}"
            return Violation(
                step,
                ONE_PRIMARY,
                f"epoch {epoch_text(epoch)} was held already by {who} (seq {held.seq})",
            )
        if member.role != CANDIDATE or member.epoch != epoch:
            return Violation(
                step,
                ELECTED,
                f"takes office in epoch {epoch_text(epoch)} as a {member.role} of epoch"
                f" {epoch_text(member.epoch)}",
            )
        doubled = bool(step.get("doubled"))
        votes = own_votes(doubled) + len(member.votes - {step.node})
        quorum = self._quorum(step.node)
        if votes < quorum:
            voters = sorted(member.votes) or "none"
            return Violation(
                step,
                ELECTED,
                f"{votes} vote(s) (promises merged from {voters}) of the {quorum} a quorum of"
                f" {self.members.get(step.node)} needs",
            )
        self.office[(step.topic, epoch)] = step
        member.role = PRIMARY
        member.written = int(step.get("pos", 0))
        member.doubled = doubled
        member.kept = max(member.kept, epoch)
        return None

    def _step_down(self, step: Step, member: _Member) -> Violation | None:
        assert step.topic is not None and step.epoch is not None
        was = step.get("was")
        if was != member.role:
            return Violation(
                step, UNTRACED, f"steps down as a {was}; the steps before leave a {member.role}"
            )
        if step.epoch < member.epoch:
            return Violation(
                step,
                ONE_PRIMARY,
                f"goes back from epoch {epoch_text(member.epoch)} to {epoch_text(step.epoch)}",
            )
        stood_by = step.epoch % NODE_BITS
        if (
            step.epoch > member.epoch
            and self.index.traced(stood_by)
            and (step.topic, step.epoch) not in self.index.stood
        ):
            return Violation(
                step,
                ADOPT,
                f"adopts epoch {epoch_text(step.epoch)}, in which node {stood_by} never stood",
            )
        member.restart()
        member.role, member.epoch = REPLICA, step.epoch
        return None

    def _from_primary(self, step: Step, member: _Member, what: str) -> Violation | None:
        """A replica's write of a stream frame or a FIN batch."""
        assert step.topic is not None
        of, sender = step.get("of", step.epoch), step.get("sender")
        if member.role != REPLICA or of != member.epoch:
            return Violation(
                step,
                STREAM,
                f"writes {what} of epoch {epoch_text(of)} as a {member.role} of epoch"
                f" {epoch_text(member.epoch)}",
            )
        served = self.index.served.get((step.topic, of), set())
        if self.index.traced(sender) and sender not in served:
            return Violation(
                step, STREAM, f"node {sender} never took office in epoch {epoch_text(of)}"
            )
        return None

    def _primary(self, step: Step, member: _Member, what: str) -> Violation | None:
        if member.role != PRIMARY:
            return Violation(
                step,
                PRIMARY_ONLY,
                f"{what} as a {member.role} of epoch {epoch_text(member.epoch)}",
            )
        return None

    def _wrote(self, step: Step, member: _Member) -> Violation | None:
        if step.get("sender") != step.node:
            return self._from_primary(step, member, "a stream frame")
        violation = self._primary(step, member, "writes and streams its log")
        if violation is not None:
            return violation
        total = int(step.get("total", -1))
        if total < member.written:
            return Violation(
                step, POSITIONS, f"streams position {total} after {member.written} in one term"
            )
        member.written = total
        return None

    def _fins(self, step: Step, member: _Member) -> Violation | None:
        return self._from_primary(step, member, "a FIN batch")

    def _fins_sent(self, step: Step, member: _Member) -> Violation | None:
        return self._primary(step, member, "sends a FIN batch")

    def _join(self, step: Step, member: _Member) -> Violation | None:
        violation = self._primary(step, member, "takes a member into its stream")
        if violation is not None:
            return violation
        assert step.topic is not None
        joiner = step.get("member")
        epochs = self.index.epochs.get((step.topic, joiner), set())
        if joiner == step.node or (self.index.traced(joiner) and member.epoch not in epochs):
            return Violation(
                step,
                JOIN,
                f"node {joiner} joins epoch {epoch_text(member.epoch)}; its trace never shows"
                " that epoch",
            )
        member.doubled = False
        return None

    def _ack(self, step: Step, member: _Member) -> Violation | None:
        violation = self._primary(step, member, "acknowledges")
        if violation is not None or self.degraded.get(step.node) == "accept":
            return violation
        assert step.topic is not None
        pos = int(step.get("pos", -1))
        acked = {int(k): int(v) for k, v in (step.get("members") or {}).items()}
        holders = sorted(n for n, v in acked.items() if v >= pos and n != step.node)
        own = own_votes(member.doubled) if member.written >= pos else 0
        copies = own + len(holders)
        quorum = self._quorum(step.node)
        shown = ", ".join(f"node {n} {v}" for n, v in sorted(acked.items())) or "no member"
        if copies < quorum or not own:
            return Violation(
                step,
                ACK_QUORUM,
                f"position {pos} acknowledged with {copies} cop{'y' if copies == 1 else 'ies'}"
                f" of the {quorum} a quorum needs (the primary wrote up to {member.written};"
                f" {shown} acknowledged)",
            )
        for node in holders:
            if not self.index.traced(node):
                continue
            wrote = self.index.wrote.get((step.topic, node, member.epoch, step.node), -1)
            joined = self.index.joined.get((step.topic, step.node, member.epoch, node), -1)
            if max(wrote, joined) >= acked[node]:
                continue
            if self.index.tail_may_be_lost(node, step.mono):
                continue
            return Violation(
                step,
                ACK_BACKED,
                f"node {node} is counted at position {acked[node]} of epoch"
                f" {epoch_text(member.epoch)}; its trace shows it wrote that epoch's stream"
                f" up to {wrote} and joined at {joined}",
            )
        return None

    def _deleted(self, step: Step, member: _Member) -> Violation | None:
        member.restart()
        member.kept = 0
        member.role, member.epoch = step.role, step.epoch or 0
        return None


# -- entry points -----------------------------------------------------------------------------


def check_steps(traces: Iterable[Sequence[Step]], notes: list[str] | None = None) -> Report:
    """Replay steps (one sequence per trace file) against the spec's rules."""
    steps, same_clock = merge(traces)
    report = Report(notes=list(notes or []))
    report.steps = len(steps)
    report.nodes = sorted({s.node for s in steps})
    report.topics = sorted({s.topic for s in steps if s.topic is not None})
    report.counts = Counter(s.ev for s in steps)
    if not same_clock:
        report.notes.append("the traces come from several hosts: ordered by wall-clock time")
    report.violation = _Replay(steps, same_clock, report).run()
    return report


def check_files(paths: Iterable[str | Path]) -> Report:
    """Read the trace files of one run and replay them (raises TraceError)."""
    notes: list[str] = []
    traces = [read_trace(path, notes) for path in paths]
    return check_steps(traces, notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spec trace",
        description="check the members' replication traces of one run against the spec",
    )
    parser.add_argument("files", nargs="+", help="--replication-trace-file of each member")
    args = parser.parse_args(argv)
    return run(args.files)


def run(files: Sequence[str]) -> int:
    """Check `files`, print the report; the exit status (0 ok, 1 violation, 2 unreadable)."""
    try:
        report = check_files(files)
    except (OSError, TraceError) as err:
        print(f"trace: {err}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
