"""Elections, epochs, leases and stepping down (docs/replication.md section 7; the spec's
suspect, promise, take office and step_down): a replica that stops hearing from the primary
stands in a new epoch after a pre-vote, merges the states its quorum promised with, takes
office and rebuilds its channels from the log; a primary keeps its lease while a quorum
answers its heartbeats. The rules are roles.py's: the methods here decide with them.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ...protocol.lookup_v1 import register, unregister
from ..topic import Topic
from . import roles, wire
from .log import LogSnapshot
from .merging import Merging
from .roles import CANDIDATE, PRIMARY, REPLICA, epoch_text

if TYPE_CHECKING:
    from .peer import Peer

log = logging.getLogger("trionsq.nsqd")


#: Bytes of the log read (in a worker thread) and queued in the channels at a time when a
#: member takes office: the event loop goes on between two.
REBUILD_CHUNK = 256 * 1024


class Election(Merging):
    """Election: see the module's docstring."""

    def leads(self, epoch: int) -> bool:
        """This node is still the primary of `epoch`, and the topic open."""
        return self.role == PRIMARY and self.epoch == epoch and not self.topic.exiting

    def may_deliver(self) -> bool:
        """Before each delivery batch of its channels (docs/replication.md section 8): a
        primary delivers only while its lease holds (unless --replication-degraded=accept)."""
        if not roles.lease_binds(self.role, self.repl.nsqd.options.replication_degraded):
            return True
        return self.lease_valid(trio.current_time())

    def lease_valid(self, now: float) -> bool:
        lease = self.repl.nsqd.options.replication_lease
        acks = (m.hb_acked for m in self.members.values())
        return roles.lease_valid(now, self.took_office, lease, acks, self.quorum - 1)

    def heartbeat_acked(self, node_id: int, epoch: int, sent: float) -> None:
        member = self.members.get(node_id)
        if member is not None and roles.renews_lease(epoch, self.epoch, sent, member.hb_acked):
            member.hb_acked = sent

    async def _stand(self, force: bool = False) -> bool:
        """suspect: a pre-vote, then PREPARE in a new epoch, promises merged, take office.
        `force` (POST /topic/takeover): no pre-vote, and this node's vote counts twice.
        True if it took office."""
        options = self.repl.nsqd.options
        timeout = options.replication_failover_timeout
        held = self.epoch
        proposed = roles.next_epoch(held, self.node_id)
        connected = [p for p in self.repl.peers if p.connected]
        floor = self.floor_header()
        yes = roles.own_votes(force)
        retry_after: list[float] = []
        if not force and len(connected) + 1 >= self.quorum:

            async def prevote(peer: Peer) -> bool:
                answer = await peer.ask(
                    wire.PREVOTE,
                    {"topic": self.name, "epoch": proposed, **floor},
                    timeout=timeout / 2,
                )
                if answer is None:
                    return False
                if not answer[1].get("yes"):
                    after = answer[1].get("after")
                    if isinstance(after, (int, float)) and 0 <= after <= timeout:
                        retry_after.append(float(after))
                    return False
                return True

            yes += await self._poll(connected, prevote, self.quorum - yes)
        if (
            not roles.is_quorum(yes, self.quorum)
            or not roles.allows(self.role, roles.STAND)
            # An epoch met during the pre-vote (a new primary's): it stands no more, as the
            # spec's suspect is one step on the state it starts from.
            or self.epoch != held
            or not roles.outranks(proposed, self.epoch)
        ):
            self._retry_later(max(retry_after) if retry_after else None)
            return False
        self.elections += 1
        self.epoch = proposed
        self.role = roles.next_role(self.role, roles.STAND)
        self.primary_before, self.primary = self.primary, None
        if self.trace is not None:
            self.trace.record(self, "stand", force=force)
        await self.repl.persist(self.name)
        log.info("REPLICATION(%s): standing in epoch %s", self.name, epoch_text(proposed))
        promised = roles.own_votes(force)

        async def prepare(peer: Peer) -> bool:
            answer = await peer.ask(
                wire.PREPARE, {"topic": self.name, "epoch": proposed, **floor}, timeout=timeout
            )
            if answer is None or self.epoch != proposed or self.role != CANDIDATE:
                return False
            kind, header, blob = answer
            if kind == wire.REFUSE:
                higher = int(header.get("epoch", 0))
                if roles.outranks(higher, self.epoch):
                    with trio.CancelScope(shield=True):  # the epoch met is persisted
                        await self.adopt(higher, f"node {peer.node_id} promised a higher epoch")
                return False
            if kind != wire.PROMISE:
                return False
            return await self.merge_summary(peer, header, blob) is not None

        promised += await self._poll(connected, prepare, self.quorum - promised)
        elected = roles.is_quorum(promised, self.quorum)
        if self.role == CANDIDATE and self.epoch == proposed and elected:
            self.doubled = force
            self.take_office()
            return True
        if roles.allows(self.role, roles.DEFEATED):
            self.role = roles.next_role(self.role, roles.DEFEATED)
            self._fail_waiters()
        self._retry_later()
        return False

    async def _poll(
        self, peers: list[Peer], ask: Callable[[Peer], Awaitable[bool]], need: int
    ) -> int:
        """`ask` every peer at once; how many said yes, as soon as `need` have, or once
        every peer has answered except the primary this node stopped hearing from (a primary
        stopped or cut off by a partition keeps its connections open: waiting for its answer
        to time out would add the request's timeout to the failover). A peer that had not
        answered by then is asked no more (a promise arriving later is merged when the peer
        joins the new epoch)."""
        if need <= 0:
            return 0
        yes = 0
        silent = self.primary_before if self.primary is None else self.primary
        waiting = {id(peer) for peer in peers if peer.node_id is None or peer.node_id != silent}
        if not waiting:  # only the silent primary can answer: its answer is needed
            waiting = {id(peer) for peer in peers}
        async with trio.open_nursery() as nursery:

            async def one(peer: Peer) -> None:
                nonlocal yes
                if await ask(peer):
                    yes += 1
                waiting.discard(id(peer))
                if yes >= need or not waiting:
                    nursery.cancel_scope.cancel()

            for peer in peers:
                nursery.start_soon(one, peer)
        return yes

    async def _repair(self) -> None:
        """The log lost records to corruption (`ReplicationLog.damaged`: messages this member
        acknowledged may be gone from it): merge every other member's state (union: what it
        lost comes back from those that hold it) before it may vote or stand. Until then it
        answers no to pre-votes and refuses to promise; it still follows a primary's stream
        (a primary that syncs it sends it what it lacks, too)."""
        timeout = self.repl.nsqd.options.replication_ack_timeout
        for peer in self.repl.peers:
            node_id = peer.node_id
            if not peer.connected or node_id is None or node_id in self.repaired_from:
                continue
            answer = await peer.ask(wire.ASK_SUMMARY, {"topic": self.name}, timeout=timeout)
            if answer is None or answer[0] != wire.SUMMARY or self.role != REPLICA:
                continue
            if await self.merge_summary(peer, answer[1], answer[2]) is not None:
                self.repaired_from.add(node_id)
        if len(self.repaired_from) >= len(self.repl.peers):
            log.warning(
                "REPLICATION(%s): log repaired from nodes %s (%d corrupt records had been "
                "moved aside): it may vote again",
                self.name,
                ", ".join(str(n) for n in sorted(self.repaired_from)),
                self.log.corrupt_records,
            )
            self.log.damaged = False
            self.repaired_from.clear()

    async def stand_alone(self) -> bool:
        """POST /topic/takeover: stand with this node's vote counted twice."""
        return await self._stand(force=True)

    def _retry_later(self, after: float | None = None) -> None:
        """Stand again after a short random pause (a concurrent candidate goes first), or
        just after `after` seconds: when a member that said no to the pre-vote will have
        stopped hearing from the primary for the failover timeout too."""
        if after is None:
            self.stand_after = trio.current_time() + random.uniform(0.1, 0.6)
        else:
            self.stand_after = trio.current_time() + after + random.uniform(0.01, 0.05)

    def take_office(self) -> None:
        self.flush()  # what waited in the outbox is in the log, served below
        # Deleted channels go, paused ones stay paused (before delivering anything).
        self.admin.apply(self.topic, self.log)
        self.role = roles.next_role(self.role, roles.ELECTED)
        self.primary = self.node_id
        self.members.clear()
        self.syncing.clear()
        now = trio.current_time()
        self.took_office = now
        self.next_heartbeat = 0.0
        self.failovers += 1
        if self.trace is not None:
            self.trace.record(self, "take_office", doubled=self.doubled, pos=self.accepted)
        topic = self.topic
        for name in list(self.log.finished):
            if name not in topic.channels:
                topic.get_channel(name)
        for channel in topic.channels.values():
            channel.empty()
        topic.memory.clear()
        topic.deferred.clear()
        topic.backend.empty()
        # The channels are rebuilt from the log as it is now (a worker thread reads it, a
        # chunk at a time); what is published from now on reaches them the ordinary way.
        # No compaction until the rebuild is done (`pins`), and none under way finishes: it
        # would take what it drops out of the finished sets while the snapshot still holds
        # them (the duplicate storms of issue 30).
        self.log.cancel_compaction()
        try:
            snapshot = self.log.snapshot()
        except OSError as err:
            log.error("REPLICATION(%s): failed to read the log - %s", self.name, err)
        else:
            self.log.pins += 1
            if not self.repl.spawn(self._rebuild, snapshot, self.epoch):
                self.log.pins -= 1  # (only while the layer starts or stops)
        lookup = self.repl.nsqd.lookup
        lookup.hidden.discard(self.name)
        if topic.channels:
            for name in topic.channels:
                lookup.notify(register(self.name, name), force=True)
        else:
            lookup.notify(register(self.name), force=True)
        if self.lookup_done:
            Topic.start(topic)
        log.info(
            "REPLICATION(%s): primary in epoch %s (%d messages in the log)",
            self.name,
            epoch_text(self.epoch),
            len(self.log),
        )
        self.forwarder.primary_changed()  # what waited for a primary is published here

    async def _rebuild(self, snapshot: LogSnapshot, epoch: int) -> None:
        """Queue the log's messages in the channels (each those it has not finished), a
        chunk at a time, read in a worker thread; stops if this node no longer leads."""
        offset = 0
        try:
            while offset < snapshot.size:
                records, offset = await self.repl.nsqd.run_blocking(
                    snapshot.records_from, offset, REBUILD_CHUNK
                )
                if not self.leads(epoch):
                    return
                self.topic.deliver_records(records)
        except (OSError, ValueError) as err:
            log.error("REPLICATION(%s): failed to read the log - %s", self.name, err)
        finally:
            snapshot.close()
            self.log.pins -= 1

    def step_down(self, epoch: int, why: str) -> None:
        """Become a replica (of `epoch`, if higher): stop serving, close the consumers'
        connections (they look the topic up again), fail the waiting PUBs."""
        was = self.role
        self.role, self.epoch = roles.step_down(was, self.epoch, epoch)
        if self.trace is not None:
            self.trace.record(self, "step_down", was=was, why=why)
        self.doubled = False
        self.members.clear()
        self.syncing.clear()
        self.last_heard = trio.current_time()
        self._fail_waiters()
        if was != PRIMARY:
            return
        log.warning("REPLICATION(%s): stepping down (%s)", self.name, why)
        self.fins_out, self.fins_count = {}, 0
        topic = self.topic
        topic.started = False
        for channel in topic.channels.values():
            for client in list(channel.clients):
                client.close_connection()
            channel.empty()
        topic.memory.clear()
        topic.deferred.clear()
        topic.backend.empty()
        lookup = self.repl.nsqd.lookup
        lookup.hidden.add(self.name)
        for name in topic.channels:
            lookup.notify(unregister(self.name, name), force=True)
        lookup.notify(unregister(self.name), force=True)

    async def adopt(self, epoch: int, why: str) -> None:
        """Meet a higher epoch: persist it, then be a replica of it."""
        if not roles.must_adopt(self.role, self.epoch, epoch):
            return
        self.step_down(epoch, why)
        await self.repl.persist(self.name)

    def refused(self, epoch: int, why: str) -> None:
        """A member refused this primary's stream with a higher epoch."""
        if roles.outranks(epoch, self.epoch):
            self.step_down(epoch, why)
            self.repl.persist_soon(self.name)

    def heard(self, sender: int) -> None:
        if sender != self.primary:
            self.primary = sender
            self.forwarder.primary_changed()
        self.last_heard = trio.current_time()
        if self.waiters and self.role == REPLICA:
            self._fail_waiters()  # PUBs held here: another node leads, answer them now

    def refuse(self, rid: Any = None) -> bytes:
        header: dict[str, Any] = {"topic": self.name, "epoch": self.epoch}
        if rid is not None:
            header["rid"] = rid
        return wire.encode(wire.REFUSE, header)

    def _may_promise(self, epoch: int) -> bool:
        """`roles.may_promise`, on this node's clock: its lease, its failure detector."""
        now = trio.current_time()
        timeout = self.repl.nsqd.options.replication_failover_timeout
        heard = self.primary is not None and not roles.primary_silent(now, self.last_heard, timeout)
        return roles.may_promise(
            epoch,
            self.epoch,
            self.role,
            damaged=self.log.damaged,
            lease_holds=self.role == PRIMARY and self.lease_valid(now),
            heard_primary=heard,
        )
