"""The spec of replicated topics (docs/replication.md): one topic on a replica set of nsqds, one
primary serving it per epoch, the others replicas; publish acknowledged once a quorum has the
message, FINs sent to the replicas in batches, crashes, power losses, a network that loses
replies and a failure detector that may be wrong, takeover by a new epoch, the old primary's
return. It owns what the implementation must guarantee: the invariants and the liveness
property below, over every interleaving within the bounds.

Theory of operation (names follow docs/replication.md):

- **Epochs are ballots** ``(round, node)``, ordered, so two candidates never share one (nsqd.dat
  stores ``round * 1024 + node_id``). A node's `epoch` is the highest it has promised or leads;
  it is on disk. Its `role` is not: a node always starts as a replica.
- **Takeover**: a replica that suspects the primary (`suspect`: the failure detector, which may
  be wrong: `suspect_falsely` while the primary lives, a partition) becomes a candidate at
  ``(its round + 1, itself)`` and asks every node to promise it (`promise`). A node promises a
  higher epoch only: it adopts the epoch, stops whatever role it had (a primary steps down, its
  in-flight messages are forgotten) and sends its state, which the candidate **merges**: its
  messages and its FINs. With the promises of a quorum (a majority, the candidate included) it
  takes office (REGISTERs the topic with the lookupds) and serves everything it holds that is
  not finished: in-flight messages of the old primary are delivered again.
- **Join**: a node that is not a member of the current primary's epoch (it restarted, it was
  cut off, it was the old primary) joins it (`join`): the primary merges the node's messages
  and FINs, then replicates its own to it. Merging is a union: NSQ has no ordering, so a topic
  is a set of messages and a channel's state a set of finished ones; nothing a node holds is
  ever thrown away by a takeover or a return.
- **Step down**: a primary or candidate that meets a higher epoch (a replica refuses its stream,
  a new primary contacts it) becomes a replica of that epoch (`step_down`, UNREGISTER).
- **Publish**: the primary writes the message (`publish`; every message of a replicated topic
  goes to disk, as with ``--mem-queue-size=0``), sends it to the members of its epoch
  (`replicate`: a member writes it only if it is in the primary's epoch, and acknowledges), and
  answers PUB's OK (`acknowledge`) once a quorum (itself included) has written it.
- **Consumption** happens at a primary: `deliver`, then the consumer's `finish` (FIN); FINs go
  to the members in batches (`replicate_fins`: a batch holds every FIN the member lacks; its
  timing is free, so it models any batching). REQ and TOUCH are not replicated: after a
  failover every unfinished message is queued again (channel_delivery models them).
- **Failures**: `crash` (kill -9: the process's state is gone, the disk, page cache included,
  stays), `power_loss` (also loses what was written since the last `fsync`), `restart` (as a
  replica); `replicate_ack_lost` and `promise_lost`: the reply is lost on the network (the
  request arrived; the sender retries, and writes are idempotent). A lost request is only a
  delay; a partition is a false suspicion plus delays.

**The roles' rules are the daemon's**: the roles, their transitions (`STAND`, `ELECTED`,
`STEP_DOWN`, `RESTART`), the next ballot, quorums, who may promise, stepping down and which
stream a replica accepts come from `trionsq/nsqd/replication/roles.py`, the module the daemon
decides with (`Bounds.rules`, roles.RULES). Two faults are perturbations of those rules
(`rules_with`): ``takeover_without_epoch`` (the table makes a suspecting replica primary at
once) and ``replica_ignores_epoch`` (the stream rule ignores the epoch); the others are in the
actions.

Time is abstract: leases, heartbeats and timeouts are not modelled (docs/replication.md says
how a lease keeps an old primary from serving while another does). So the checker shows that
correctness does not depend on clocks: an old primary that goes on serving after a takeover
(a partition, a paused process) can deliver messages again, but cannot get a new message
written by a quorum (the nodes that promised the new epoch refuse its stream) and loses
nothing.

Simplifications: one channel (a channel is a set of finished messages; several are independent
copies); the publisher talks to the primary (a replica forwards PUB to it); FIN records are
durable where received (a power loss may drop FIN records not yet fsynced, which only adds
redeliveries: the FIN property does not count those); the replicas' acknowledgement of FINs is
not modelled (a lost one only makes the primary send the batch again).

Properties:

- `one primary per epoch, epochs only grow` (step): a node takes office only in an epoch no
  other node has served, above every epoch served before: an old primary that comes back
  never serves the topic again in its old epoch; it joins as a replica.
- `an acknowledged message is lost only if every node that wrote it lost it unsynced`.
- `an acknowledged message was written by a quorum` (counting copies a power loss destroyed).
- `no redelivery of a FIN that reached the replicas` (step): a primary does not deliver a
  message whose FIN it has received (from a consumer, a batch, or a merged state), and the
  latest primary does not deliver one whose FIN had reached a quorum. Redeliveries after a
  failover are therefore only of messages in flight at the failure, those whose FIN had not
  yet reached a replica that took part, and those an old primary cut off from the others
  delivers before it learns of the new epoch (the duplicates the lease avoids).
- Liveness: `every acknowledged message is eventually finished` (its FIN reaches a quorum)
  while the consumer keeps consuming (delivery and FIN are fair), the surviving nodes keep
  talking (replication, promises, joins, stepping down, suspicion of a primary that is gone
  are fair) and a quorum stays up: crashes are budgeted and a crashed node need not come back,
  except with two nodes, where a quorum is both and the crashed node must return.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

from trionsq.nsqd.replication.roles import (
    CANDIDATE,
    ELECTED,
    PRIMARY,
    REPLICA,
    RESTART,
    RULES,
    STAND,
    Ballot,
    Rules,
    Verdict,
    is_quorum,
    outranks,
    stream_verdict,
)

from .core import Action, Invariant, Liveness, Mutant, Spec, StepInvariant

FAULTS = {
    "ack_before_replicated": (
        "the primary answers PUB's OK once it has written the message itself, before a replica"
        " has it"
    ),
    "takeover_without_epoch": (
        "a replica that suspects the primary takes over at once in the epoch it has, without a"
        " new epoch and a quorum's promises"
    ),
    "replica_forgets_fins": "a replica accepts a batch of FINs without recording them",
    "takeover_without_merge": (
        "a candidate takes office on a quorum's promises without adopting the messages and FINs"
        " they hold"
    ),
    "replica_ignores_epoch": (
        "a replica accepts the stream (messages, FIN batches) of a primary of an older epoch"
    ),
    "rejoin_replaces_log": (
        "a node that joins the primary replaces its messages with the primary's instead of"
        " offering its own"
    ),
}

Epoch = Ballot
"""``(round, node)``: ordered as a tuple (roles.py's ballots)."""


class Node(NamedTuple):
    """One nsqd's state for the topic: `up`, `epoch`, `log`, `unsynced` and `finished` are on
    its disk (`unsynced` is the part of `log` a power loss destroys); the rest lives in the
    process and is reset by a crash or a change of role."""

    up: bool = True
    role: str = REPLICA
    epoch: Epoch = (1, 0)
    log: frozenset[int] = frozenset()
    unsynced: frozenset[int] = frozenset()
    finished: frozenset[int] = frozenset()
    members: frozenset[int] = frozenset()
    """A primary's replicas: the nodes whose state it merged in its epoch."""
    acks: frozenset[tuple[int, int]] = frozenset()
    """A primary's ``(message, member)`` copies confirmed in its epoch."""
    pending: frozenset[int] = frozenset()
    """Messages published to this primary whose PUB is waiting for its OK."""
    in_flight: frozenset[int] = frozenset()
    votes: frozenset[int] = frozenset()
    """A candidate's promises (itself included)."""


class Ghost(NamedTuple):
    """The history the properties read."""

    acked: frozenset[int] = frozenset()
    wrote: frozenset[tuple[int, int]] = frozenset()
    """``(message, node)``: the node wrote the message at some point."""
    dropped: frozenset[tuple[int, int]] = frozenset()
    """``(message, node)``: a power loss destroyed the node's unsynced copy."""
    fin_received: frozenset[tuple[int, int]] = frozenset()
    """``(message, node)``: the node received the message's FIN (from the consumer, a batch
    or a merged state)."""
    served: frozenset[tuple[Epoch, int]] = frozenset()
    """``(epoch, node)``: the node took office in the epoch."""


class Budget(NamedTuple):
    crashes: int
    power_losses: int
    suspicions: int
    losses: int


class State(NamedTuple):
    nodes: tuple[Node, ...]
    published: int
    ghost: Ghost
    budget: Budget


@dataclass(frozen=True)
class Bounds:
    nodes: int = 3
    messages: int = 2
    max_round: int = 3
    crashes: int = 1
    power_losses: int = 0
    suspicions: int = 1
    losses: int = 1
    fair_restart: bool = False
    """With two nodes a quorum is both: liveness needs the crashed node to come back."""
    faults: frozenset[str] = field(default_factory=frozenset)
    rules: Rules = RULES
    """The roles' rules the actions follow (roles.py's, unless a mutant perturbs one)."""

    @property
    def quorum(self) -> int:
        """A majority, as the properties count it: stated here, not taken from the rules
        (the actions count with `rules.quorum_size`, which a mutant may perturb)."""
        return self.nodes // 2 + 1


# -- the rules and their faults ----------------------------------------------------------------


def _ignores_epoch(role: str, held: Epoch, epoch: Epoch) -> Verdict:
    """A faulty stream rule: a replica accepts any primary's stream, whatever its epoch."""
    return Verdict.ACCEPT if role == REPLICA else stream_verdict(role, held, epoch)


def rules_with(faults: frozenset[str], rules: Rules = RULES) -> Rules:
    """`rules` with the rule faults among `faults` applied (the others are in the actions)."""
    if "takeover_without_epoch" in faults:
        # A suspecting replica goes straight to office, without a candidacy.
        transitions = {**rules.transitions, (REPLICA, STAND): PRIMARY}
        rules = replace(rules, transitions=transitions)
    if "replica_ignores_epoch" in faults:
        rules = replace(rules, stream_verdict=_ignores_epoch)
    return rules


# -- helpers --------------------------------------------------------------------------------


def name(node: int) -> str:
    return f"n{node}"


def epoch_name(epoch: Epoch) -> str:
    return f"e{epoch[0]}.{epoch[1]}"


def _ids(values: Iterable[int], prefix: str = "m") -> str:
    return "{" + ",".join(f"{prefix}{v}" for v in sorted(values)) + "}"


def _set(state: State, index: int, node: Node) -> State:
    nodes = list(state.nodes)
    nodes[index] = node
    return state._replace(nodes=tuple(nodes))


def _spend(state: State, budget: str) -> State:
    return state._replace(
        budget=state.budget._replace(**{budget: getattr(state.budget, budget) - 1})
    )


def _volatile_reset(node: Node, role: str = REPLICA) -> Node:
    return node._replace(
        role=role,
        members=frozenset(),
        acks=frozenset(),
        pending=frozenset(),
        in_flight=frozenset(),
        votes=frozenset(),
    )


def _write(bounds: Bounds, state: State, index: int, messages: frozenset[int]) -> State:
    """Node `index` writes `messages` to its log (a write(2): durable against kill -9, not
    against a power loss until the next fsync)."""
    node = state.nodes[index]
    new = messages - node.log
    if not new:
        return state
    unsynced = node.unsynced | new if bounds.power_losses else node.unsynced
    state = _set(state, index, node._replace(log=node.log | new, unsynced=unsynced))
    wrote = state.ghost.wrote | {(m, index) for m in new}
    return state._replace(ghost=state.ghost._replace(wrote=wrote))


def _receive_fins(state: State, index: int, fins: frozenset[int], record: bool) -> State:
    node = state.nodes[index]
    if record:
        node = node._replace(finished=node.finished | fins, in_flight=node.in_flight - fins)
        state = _set(state, index, node)
    received = state.ghost.fin_received | {(m, index) for m in fins}
    return state._replace(ghost=state.ghost._replace(fin_received=received))


def _merge(bounds: Bounds, state: State, into: int, source: int) -> State:
    """`into` adopts `source`'s messages and FINs (a promise or a join carries them)."""
    if "takeover_without_merge" in bounds.faults and state.nodes[into].role == CANDIDATE:
        return state
    from_node = state.nodes[source]
    state = _write(bounds, state, into, from_node.log)
    fins = frozenset(m for m, n in state.ghost.fin_received if n == source)
    state = _receive_fins(state, into, fins, record=False)
    return _receive_fins(state, into, from_node.finished, record=True)


def _leave(state: State, index: int) -> State:
    """Node `index` is no longer a member of any primary's epoch (its connections closed)."""
    nodes = tuple(
        n._replace(members=n.members - {index}, acks=frozenset(a for a in n.acks if a[1] != index))
        if index in n.members
        else n
        for n in state.nodes
    )
    return state._replace(nodes=nodes)


def fin_durable(bounds: Bounds, state: State, message: int) -> bool:
    """The message's FIN has reached a quorum."""
    return sum(1 for m, _ in state.ghost.fin_received if m == message) >= bounds.quorum


def lost(state: State, message: int) -> bool:
    """No node holds the message and every node that wrote it lost it in a power loss."""
    if any(message in n.log for n in state.nodes):
        return False
    writers = {n for m, n in state.ghost.wrote if m == message}
    return writers <= {n for m, n in state.ghost.dropped if m == message}


def _serving(state: State, at_least: Epoch) -> bool:
    """Some node that is up leads or is electing an epoch ≥ `at_least`."""
    return any(n.up and n.role in (PRIMARY, CANDIDATE) and n.epoch >= at_least for n in state.nodes)


def _take_office(state: State, index: int, role: str) -> State:
    """Node `index` takes office, as `role` (the table's: PRIMARY), with its voters as members."""
    node = state.nodes[index]
    members = node.votes - {index}
    node = _volatile_reset(node, role)._replace(members=members)
    state = _set(state, index, node)
    served = state.ghost.served | {(node.epoch, index)}
    return state._replace(ghost=state.ghost._replace(served=served))


Instances = Iterator[tuple[str, State]]


# -- the producer and the consumer ------------------------------------------------------------


def publish(bounds: Bounds, state: State) -> Instances:
    """PUB to the primary: it writes the message and the PUB waits for its OK."""
    message = state.published
    if message >= bounds.messages:
        return
    for index, node in enumerate(state.nodes):
        if node.up and node.role == PRIMARY:
            after = _write(bounds, state, index, frozenset({message}))
            node = after.nodes[index]
            after = _set(after, index, node._replace(pending=node.pending | {message}))
            yield f"publish({name(index)}, m{message})", after._replace(published=message + 1)


def acknowledge(bounds: Bounds, state: State) -> Instances:
    """PUB's OK, once a quorum (the primary included) has written the message."""
    for index, node in enumerate(state.nodes):
        if not (node.up and node.role == PRIMARY):
            continue
        for message in sorted(node.pending):
            copies = 1 + sum(1 for m, _ in node.acks if m == message)
            needed = bounds.rules.quorum_size(bounds.nodes)
            if "ack_before_replicated" in bounds.faults:
                needed = 1
            if is_quorum(copies, needed):
                after = _set(state, index, node._replace(pending=node.pending - {message}))
                acked = after.ghost.acked | {message}
                yield (
                    f"acknowledge({name(index)}, m{message})",
                    after._replace(ghost=after.ghost._replace(acked=acked)),
                )


def deliver(bounds: Bounds, state: State) -> Instances:
    """The primary sends an unfinished message to the consumer."""
    for index, node in enumerate(state.nodes):
        if node.up and node.role == PRIMARY:
            for message in sorted(node.log - node.finished - node.in_flight):
                after = node._replace(in_flight=node.in_flight | {message})
                yield f"deliver({name(index)}, m{message})", _set(state, index, after)


def finish(bounds: Bounds, state: State) -> Instances:
    """The consumer's FIN, to the primary that delivered the message."""
    for index, node in enumerate(state.nodes):
        if node.up and node.role == PRIMARY:
            for message in sorted(node.in_flight):
                fins = frozenset({message})
                yield f"finish({name(index)}, m{message})", _receive_fins(state, index, fins, True)


# -- the replication stream -------------------------------------------------------------------


def _replications(bounds: Bounds, state: State) -> Iterator[tuple[int, int, int]]:
    """(primary, member, message) for each message a member has not confirmed, where the
    member accepts the primary's stream (it is in the primary's epoch)."""
    for index, node in enumerate(state.nodes):
        if not (node.up and node.role == PRIMARY):
            continue
        for member in sorted(node.members):
            replica = state.nodes[member]
            if not replica.up:
                continue
            verdict = bounds.rules.stream_verdict(replica.role, replica.epoch, node.epoch)
            if verdict is not Verdict.ACCEPT:
                continue
            for message in sorted(node.log):
                if (message, member) not in node.acks:
                    yield index, member, message


def replicate(bounds: Bounds, state: State) -> Instances:
    """The primary sends a message to a member, which writes it and acknowledges."""
    for index, member, message in _replications(bounds, state):
        after = _write(bounds, state, member, frozenset({message}))
        node = after.nodes[index]
        after = _set(after, index, node._replace(acks=node.acks | {(message, member)}))
        yield f"replicate({name(index)}→{name(member)}, m{message})", after


def replicate_ack_lost(bounds: Bounds, state: State) -> Instances:
    """As `replicate`, but the acknowledgement is lost: the primary will send it again."""
    if not state.budget.losses:
        return
    spent = _spend(state, "losses")
    for index, member, message in _replications(bounds, state):
        after = _write(bounds, spent, member, frozenset({message}))
        yield f"replicate({name(index)}→{name(member)}, m{message}) ack lost", after


def replicate_fins(bounds: Bounds, state: State) -> Instances:
    """A batch of FINs: every FIN the primary has that the member has not received."""
    forgets = "replica_forgets_fins" in bounds.faults
    for index, node in enumerate(state.nodes):
        if not (node.up and node.role == PRIMARY):
            continue
        for member in sorted(node.members):
            replica = state.nodes[member]
            if not replica.up:
                continue
            verdict = bounds.rules.stream_verdict(replica.role, replica.epoch, node.epoch)
            if verdict is not Verdict.ACCEPT:
                continue
            if forgets:
                received = {m for m, n in state.ghost.fin_received if n == member}
                fins = node.finished - received
            else:
                fins = node.finished - replica.finished
            if fins:
                label = f"replicate_fins({name(index)}→{name(member)}, {_ids(fins)})"
                yield label, _receive_fins(state, member, fins, record=not forgets)


# -- epochs: suspicion, promises, joins, stepping down ---------------------------------------


def _candidacy(bounds: Bounds, state: State, index: int) -> State | None:
    """Node `index` stands: a candidate in its next ballot, with its own vote (None beyond
    the bound on rounds)."""
    rules = bounds.rules
    node = state.nodes[index]
    role = rules.next_role(node.role, STAND)
    if role == PRIMARY:
        # A table without candidacy: office at once, in the epoch it has, on its own vote.
        node = node._replace(votes=frozenset({index}))
        return _take_office(_set(state, index, node), index, role)
    epoch = rules.next_ballot(node.epoch, index)
    if epoch[0] > bounds.max_round:
        return None
    node = _volatile_reset(node, role)._replace(epoch=epoch, votes=frozenset({index}))
    return _set(state, index, node)


def suspect(bounds: Bounds, state: State) -> Instances:
    """A replica hears from no primary of its epoch or later (it is gone): it stands."""
    for index, node in enumerate(state.nodes):
        if node.up and node.role == REPLICA and not _serving(state, node.epoch):
            after = _candidacy(bounds, state, index)
            if after is not None:
                yield f"suspect({name(index)})", after


def suspect_falsely(bounds: Bounds, state: State) -> Instances:
    """The failure detector is wrong (a partition, a slow primary): a replica stands although
    a primary of its epoch lives."""
    if not state.budget.suspicions:
        return
    spent = _spend(state, "suspicions")
    for index, node in enumerate(state.nodes):
        if node.up and node.role == REPLICA and _serving(state, node.epoch):
            after = _candidacy(bounds, spent, index)
            if after is not None:
                yield f"suspect({name(index)}) falsely", after


def _promisers(bounds: Bounds, state: State) -> Iterator[tuple[int, int]]:
    """(candidate, voter) for each promise a node may send a candidate. Time is abstract: no
    lease or recent word from a primary holds a promise back (`may_promise`'s defaults)."""
    may_promise = bounds.rules.may_promise
    for index, node in enumerate(state.nodes):
        if not (node.up and node.role == CANDIDATE):
            continue
        for voter, other in enumerate(state.nodes):
            if voter == index or not other.up or voter in node.votes:
                continue
            # An equal epoch: the voter promised already and its promise was lost (sent again).
            if may_promise(node.epoch, other.epoch, other.role) or other.epoch == node.epoch:
                yield index, voter


def _adopt(bounds: Bounds, state: State, index: int, epoch: Epoch) -> State:
    """Node `index` adopts a higher epoch: it steps down (`roles.step_down`), whatever role
    it had ends (a primary's in-flight messages are forgotten: they will be delivered
    again). A primary that still counts it as a member learns only when it meets the higher
    epoch (`step_down`): until then the node refuses its stream."""
    node = state.nodes[index]
    role, epoch = bounds.rules.step_down(node.role, node.epoch, epoch)
    node = _volatile_reset(node, role)._replace(epoch=epoch)
    return _set(state, index, node)


def promise(bounds: Bounds, state: State) -> Instances:
    """A node promises the candidate's epoch and sends its state; with a quorum of promises
    the candidate takes office."""
    rules = bounds.rules
    for index, voter in _promisers(bounds, state):
        after = _adopt(bounds, state, voter, state.nodes[index].epoch)
        after = _merge(bounds, after, index, voter)
        node = after.nodes[index]
        node = node._replace(votes=node.votes | {voter})
        after = _set(after, index, node)
        if is_quorum(len(node.votes), rules.quorum_size(bounds.nodes)):
            after = _take_office(after, index, rules.next_role(node.role, ELECTED))
        yield f"promise({name(voter)}→{name(index)})", after


def promise_lost(bounds: Bounds, state: State) -> Instances:
    """The node promises, but the promise is lost: the candidate will ask again."""
    if not state.budget.losses:
        return
    spent = _spend(state, "losses")
    for index, voter in _promisers(bounds, state):
        after = _adopt(bounds, spent, voter, state.nodes[index].epoch)
        yield f"promise({name(voter)}→{name(index)}) lost", after


def step_down(bounds: Bounds, state: State) -> Instances:
    """A primary or candidate meets a higher epoch (a refusal, a PREPARE, a new primary's
    contact): it becomes a replica of that epoch (and UNREGISTERs the topic)."""
    for index, node in enumerate(state.nodes):
        if not (node.up and node.role in (PRIMARY, CANDIDATE)):
            continue
        higher = {n.epoch for n in state.nodes if n.up and outranks(n.epoch, node.epoch)}
        for epoch in sorted(higher):
            after = _adopt(bounds, state, index, epoch)
            yield f"step_down({name(index)}, {epoch_name(epoch)})", after


def join(bounds: Bounds, state: State) -> Instances:
    """A replica outside the primary's epoch joins it: the primary adopts the replica's
    messages and FINs, then streams its own to it."""
    for index, node in enumerate(state.nodes):
        if not (node.up and node.role == PRIMARY):
            continue
        for other, replica in enumerate(state.nodes):
            if other == index or other in node.members or not replica.up:
                continue
            if replica.role != REPLICA or outranks(replica.epoch, node.epoch):
                continue
            after = _adopt(bounds, state, other, node.epoch)
            if "rejoin_replaces_log" in bounds.faults:
                kept = replica.log & node.log
                after = _set(
                    after,
                    other,
                    after.nodes[other]._replace(log=kept, unsynced=replica.unsynced & kept),
                )
            else:
                after = _merge(bounds, after, index, other)
            primary = after.nodes[index]
            after = _set(after, index, primary._replace(members=primary.members | {other}))
            yield f"join({name(other)}→{name(index)})", after


# -- failures ---------------------------------------------------------------------------------


def _stop(bounds: Bounds, state: State, index: int) -> State:
    """The process stops; it will start in the table's role for a restart (a replica)."""
    node = state.nodes[index]
    node = _volatile_reset(node, bounds.rules.next_role(node.role, RESTART))._replace(up=False)
    return _leave(_set(state, index, node), index)


def crash(bounds: Bounds, state: State) -> Instances:
    """kill -9: the process's state is gone; the disk (page cache included) stays."""
    if not state.budget.crashes:
        return
    spent = _spend(state, "crashes")
    for index, node in enumerate(state.nodes):
        if node.up:
            yield f"crash({name(index)})", _stop(bounds, spent, index)


def power_loss(bounds: Bounds, state: State) -> Instances:
    """The host loses power: also what was written since the last fsync."""
    if not state.budget.power_losses:
        return
    spent = _spend(state, "power_losses")
    for index, node in enumerate(state.nodes):
        if node.up:
            after = _stop(bounds, spent, index)
            kept = node.log - node.unsynced
            after = _set(after, index, after.nodes[index]._replace(log=kept, unsynced=frozenset()))
            dropped = after.ghost.dropped | {(m, index) for m in node.unsynced}
            yield (
                f"power_loss({name(index)})",
                after._replace(ghost=after.ghost._replace(dropped=dropped)),
            )


def fsync(bounds: Bounds, state: State) -> Instances:
    """The disk syncer's round (--sync-timeout): everything written is durable."""
    for index, node in enumerate(state.nodes):
        if node.up and node.unsynced:
            yield f"fsync({name(index)})", _set(state, index, node._replace(unsynced=frozenset()))


def restart(bounds: Bounds, state: State) -> Instances:
    """The node starts again, always as a replica (its role is not on disk)."""
    for index, node in enumerate(state.nodes):
        if not node.up:
            yield f"restart({name(index)})", _set(state, index, node._replace(up=True))


# -- properties -------------------------------------------------------------------------------


def one_primary_per_epoch(bounds: Bounds, before: State, label: str, after: State) -> bool | str:
    for epoch, index in sorted(after.ghost.served - before.ghost.served):
        for old_epoch, old in sorted(before.ghost.served):
            if old_epoch == epoch and old != index:
                return f"{name(index)} takes office in {epoch_name(epoch)}, which {name(old)} held"
            if old_epoch >= epoch:
                return (
                    f"{name(index)} takes office in {epoch_name(epoch)}, not above "
                    f"{epoch_name(old_epoch)} held by {name(old)}"
                )
    return True


def acknowledged_not_lost(bounds: Bounds, state: State) -> bool | str:
    for message in sorted(state.ghost.acked):
        if any(message in n.log for n in state.nodes):
            continue
        if not lost(state, message):
            writers = sorted(n for m, n in state.ghost.wrote if m == message)
            return (
                f"acknowledged m{message} is on no node; {', '.join(map(name, writers))} wrote"
                " it and not all lost it in a power loss"
            )
    return True


def acknowledged_on_a_quorum(bounds: Bounds, state: State) -> bool | str:
    for message in sorted(state.ghost.acked):
        holders = {i for i, n in enumerate(state.nodes) if message in n.log}
        holders |= {n for m, n in state.ghost.dropped if m == message}
        if len(holders) < bounds.quorum:
            return f"acknowledged m{message} was written by {len(holders)} node(s)"
    return True


def fin_not_redelivered(bounds: Bounds, before: State, label: str, after: State) -> bool | str:
    if not label.startswith("deliver("):
        return True
    for index, (old, new) in enumerate(zip(before.nodes, after.nodes, strict=True)):
        for message in sorted(new.in_flight - old.in_flight):
            if (message, index) in before.ghost.fin_received:
                return f"{name(index)} delivers m{message} again; it had received its FIN"
            latest = max(epoch for epoch, _ in before.ghost.served)
            if new.epoch == latest and fin_durable(bounds, before, message):
                return (
                    f"{name(index)}, the latest primary, delivers m{message} again; its FIN"
                    " had reached a quorum"
                )
    return True


def unfinished(bounds: Bounds, state: State) -> Iterator[int]:
    """Acknowledged messages whose FIN has not reached a quorum (and that are not lost)."""
    for message in sorted(state.ghost.acked):
        if not fin_durable(bounds, state, message) and not lost(state, message):
            yield message


# -- assembly ---------------------------------------------------------------------------------


def initial_state(bounds: Bounds) -> State:
    """After bootstrap: n0 leads epoch (1, 0) with every other node as a member."""
    replica = Node()
    primary = Node(role=PRIMARY, members=frozenset(range(1, bounds.nodes)))
    nodes = (primary,) + (replica,) * (bounds.nodes - 1)
    budget = Budget(bounds.crashes, bounds.power_losses, bounds.suspicions, bounds.losses)
    return State(nodes, 0, Ghost(served=frozenset({((1, 0), 0)})), budget)


def show(state: State) -> str:
    lines = [f"published={state.published} budget={tuple(state.budget)}"]
    for index, node in enumerate(state.nodes):
        status = node.role if node.up else "DOWN"
        parts = [f"{name(index)} {status} {epoch_name(node.epoch)} log={_ids(node.log)}"]
        if node.unsynced:
            parts.append(f"unsynced={_ids(node.unsynced)}")
        parts.append(f"finished={_ids(node.finished)}")
        if node.role == PRIMARY:
            acks = ",".join(f"m{m}@{name(n)}" for m, n in sorted(node.acks))
            parts.append(f"members={_ids(node.members, 'n')} acks={{{acks}}}")
            parts.append(f"pending={_ids(node.pending)} in_flight={_ids(node.in_flight)}")
        if node.role == CANDIDATE:
            parts.append(f"votes={_ids(node.votes, 'n')}")
        lines.append(" ".join(parts))
    ghost = state.ghost
    fins = ",".join(f"m{m}@{name(n)}" for m, n in sorted(ghost.fin_received))
    dropped = ",".join(f"m{m}@{name(n)}" for m, n in sorted(ghost.dropped))
    served = ",".join(f"{epoch_name(e)}:{name(n)}" for e, n in sorted(ghost.served))
    lines.append(
        f"acked={_ids(ghost.acked)} fins received={{{fins}}} dropped={{{dropped}}}"
        f" served={{{served}}}"
    )
    return "\n".join(lines)


def _actions(bounds: Bounds) -> tuple[Action, ...]:
    table = [
        ("publish", publish, False),
        ("acknowledge", acknowledge, True),
        ("replicate", replicate, True),
        ("replicate_ack_lost", replicate_ack_lost, False),
        ("deliver", deliver, True),
        ("finish", finish, True),
        ("replicate_fins", replicate_fins, True),
        ("suspect", suspect, True),
        ("suspect_falsely", suspect_falsely, False),
        ("promise", promise, True),
        ("promise_lost", promise_lost, False),
        ("step_down", step_down, True),
        ("join", join, True),
        ("crash", crash, False),
        ("power_loss", power_loss, False),
        ("fsync", fsync, True),
        ("restart", restart, bounds.fair_restart),
    ]
    return tuple(Action(n, partial(fn, bounds), fair=fair) for n, fn, fair in table)


def build(name_: str, bounds: Bounds) -> Spec:
    bounds = replace(bounds, rules=rules_with(bounds.faults, bounds.rules))
    return Spec(
        name=name_,
        description=(
            "replicated topics: quorum-acknowledged publish, batched FINs, epochs, takeover, "
            "the old primary's return, crashes, power losses, lost replies"
        ),
        init=lambda: [initial_state(bounds)],
        actions=_actions(bounds),
        invariants=(
            Invariant(
                "an acknowledged message is lost only if every node that wrote it lost it unsynced",
                partial(acknowledged_not_lost, bounds),
            ),
            Invariant(
                "an acknowledged message was written by a quorum",
                partial(acknowledged_on_a_quorum, bounds),
            ),
        ),
        step_invariants=(
            StepInvariant(
                "one primary per epoch, epochs only grow", partial(one_primary_per_epoch, bounds)
            ),
            StepInvariant(
                "no redelivery of a FIN that reached the replicas",
                partial(fin_not_redelivered, bounds),
            ),
        ),
        liveness=(
            Liveness(
                "every acknowledged message is eventually finished", partial(unfinished, bounds)
            ),
        ),
        bounds={k: v for k, v in vars(bounds).items() if k not in ("faults", "rules")},
        show=show,
    )


# Each configuration spends the adversary's budget where it checks most; together they cover
# a crash and takeover, a partition, both with a lost reply, a power loss, and two nodes.
CONFIGS = {
    # kill -9 of any node, the takeover and the old primary's return; two messages.
    "crash": Bounds(suspicions=0, losses=0),
    # a wrong failure detector (a partition): two primaries in different epochs; two messages.
    "partition": Bounds(crashes=0, losses=0),
    # a partition, a kill -9 and a lost reply (of a message or a promise) together; one message.
    "partition_crash": Bounds(messages=1),
    # a power loss (unsynced writes lost, fsync explicit) and a partition; one message.
    "power_loss": Bounds(messages=1, crashes=0, power_losses=1, losses=0),
    # two members: a quorum is both, so the crashed node must come back.
    "two_nodes": Bounds(nodes=2, fair_restart=True),
}

# Each fault is checked where it shows soonest.
MUTANT_CONFIG = {
    "ack_before_replicated": "crash",
    "takeover_without_epoch": "crash",
    "replica_forgets_fins": "crash",
    "takeover_without_merge": "crash",
    # an old primary's FIN batch recorded by a replica that promised the new epoch: the new
    # primary, which never merged that FIN, delivers the message again
    "replica_ignores_epoch": "partition_crash",
    # a copy lost in a power loss, then a takeover without the message
    "rejoin_replaces_log": "power_loss",
}


def specs() -> list[Spec]:
    return [build(f"replication.{config}", bounds) for config, bounds in CONFIGS.items()]


def mutants() -> list[Mutant]:
    result = []
    for fault, description in FAULTS.items():
        bounds = CONFIGS[MUTANT_CONFIG[fault]]
        faulty = Bounds(**{**vars(bounds), "faults": frozenset({fault})})
        result.append(
            Mutant(f"replication.{fault}", description, build(f"replication.{fault}", faulty))
        )
    return result
