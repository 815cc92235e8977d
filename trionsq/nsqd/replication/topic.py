"""A replicated topic (docs/replication.md): `ReplicatedTopic`, the Topic nsqd creates for a
topic that ``--replicate-topic`` names, and `TopicReplica`, its role in the replica set, named
after the spec's actions (spec/replication.py): publish / replicate / acknowledge, FINs sent in
batches (replicate_fins), suspect (the failover timeout, with a pre-vote), promise, take
office, step_down, and the join of a member (here solicited by the primary: SYNC).

Only replicated topics pay for any of it: an ordinary Topic never reaches this module. The
hooks are the subclass's `put_frames` (the log write and the stream; on a node that does
not lead the topic, the forward to the primary: forward.py), `get_channel` (the
channel's FINs are observed through its e2e slot, `FinObserver`, which the FIN paths already
call) and nsqd's `wait_durable` (PUB's OK waits for a quorum, as --sync-ack's waits for fsync).

The primary serves as an ordinary topic does; every member, the primary included, keeps the
topic's `ReplicationLog`, from which a member that takes office rebuilds each channel (the log
minus the channel's finished set). A replica's Topic object holds no messages and does not
deliver (`started` is False) until it takes office.

The scans of the log (a summary, a merge, a member's catch-up, the rebuild at takeover, a
compaction) run in worker threads, on a `LogSnapshot` of the file: publishes, the stream and
FINs go on meanwhile in the event loop.

The rules of the roles (their transitions, epochs as ballots, quorums, who may promise,
stepping down, which stream a replica accepts, the lease) are roles.py's, which the spec is
built from: the methods here decide with them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from ...protocol.message import framed_id
from ...protocol.names import is_ephemeral
from ..acks import Receipt
from ..backend import Backend, from_wall_ns, to_wall_ns
from ..channel import Channel
from ..e2e_latency import FinRecorder, Result, disabled_result
from ..topic import Topic, TopicExiting
from . import forward, roles, wire
from .channel import ReplicatedChannel
from .handlers import Handlers
from .log import Record
from .roles import PRIMARY, REPLICA, epoch_text

if TYPE_CHECKING:
    from ..nsqd import NSQD
    from .node import Replication

log = logging.getLogger("trionsq.nsqd")

#: The topic task's period (heartbeats, FIN batches and the lease are checked this often).
TICK = 0.05


class FinObserver:
    """A replicated channel's e2e slot: the FIN paths (protocol_v2's fast path and
    `Channel.finish`) call `record_frame` for every finished message; it queues the FIN for
    the replicas and passes the frame on to the real estimator, if any."""

    __slots__ = ("channel", "inner", "replica")

    def __init__(self, replica: TopicReplica, channel: str, inner: FinRecorder | None) -> None:
        self.replica = replica
        self.channel = channel
        self.inner = inner

    @property
    def percentiles(self) -> tuple[float, ...] | None:
        return None if self.inner is None else self.inner.percentiles

    def record_frame(self, frame: bytes, now: float | None = None) -> None:
        self.replica.finished(self.channel, framed_id(frame))
        if self.inner is not None:
            self.inner.record_frame(frame, now)

    def live_halves(self, now: float | None = None) -> Sequence[Any]:
        return () if self.inner is None else self.inner.live_halves(now)

    def result(self, now: float | None = None) -> Result:
        return disabled_result() if self.inner is None else self.inner.result(now)


class ReplicatedTopic(Topic):
    """A topic that ``--replicate-topic`` names: publishes go through its `TopicReplica`."""

    __slots__ = ("replica",)
    channel_class = ReplicatedChannel
    replicated = True

    def __init__(self, nsqd: NSQD, name: str, backend: Backend, repl: Replication) -> None:
        super().__init__(nsqd, name, backend)
        # The ordinary queues are derived state: the log is the truth (rebuilt at takeover).
        backend.empty()
        self.started = False
        self.replica = TopicReplica(repl, self)

    def put_frames(
        self, frames: list[bytes], defer: float = 0.0, pump_later: list[Topic] | None = None
    ) -> Receipt:
        """The publish's OK waits for a quorum to have the messages accepted so far (or,
        forwarded to the primary, for its answer)."""
        if self.exiting:
            raise TopicExiting("exiting")
        replica = self.replica
        due = to_wall_ns(trio.current_time() + defer) if defer > 0 else 0
        if replica.role != PRIMARY:
            # Another node leads, or an election runs: forwarded to the primary, and the
            # publisher's answer waits for the batch they go in (forward.py).
            return replica.forwarder.add(frames, due), replica.accepted
        replica.publish(frames, due)
        super().put_frames(frames, defer, pump_later)
        return replica, replica.accepted

    def tasks(self) -> list[tuple[Callable[[], Awaitable[None]], str]]:
        replica = self.replica
        tasks: list[tuple[Callable[[], Awaitable[None]], str]] = [
            (replica.run, f"replication:{self.name}")
        ]
        if self.nsqd.options.sync_ack:
            tasks.append((replica.sync_task, f"replication-fsync:{self.name}"))
        return tasks + super().tasks()

    def replication_epoch(self) -> int:
        return int(self.replica.epoch)

    def replication_stats(self) -> dict[str, Any]:
        return self.replica.stats()

    async def admin(self, action: str, channel: str | None = None) -> tuple[int, str | None] | None:
        if channel is not None and is_ephemeral(channel):
            return None
        from .admin import act  # imported when first used, as the admin is rare

        return await act(self, action, channel)

    async def take_over(self) -> tuple[int, str | None]:
        from .admin import take_over

        return await take_over(self)

    def deliver_records(self, records: list[Record]) -> None:
        """Queue messages from the log in every channel that has not finished them (or in
        the topic while it has no channel), deferred ones until their due time."""
        finished = self.replica.log.finished
        now_ns = time.time_ns()
        if not self.channels:
            emptied = self.replica.log.emptied
            if emptied:
                records = [r for r in records if framed_id(r[1]) not in emptied]
            frames = [frame for due, frame in records if due <= now_ns]
            later = [(frame, from_wall_ns(due)) for due, frame in records if due > now_ns]
            if frames:
                Topic.put_frames(self, frames)
            self.deferred.extend(later)
            self.wake.set()
            return
        for channel in self.channels.values():
            done = finished.get(channel.name, set())
            skip = channel.skip if isinstance(channel, ReplicatedChannel) else None
            now_list = []
            later_list = []
            for due, frame in records:
                if framed_id(frame) in done:
                    if skip:
                        skip.discard(framed_id(frame))  # not queued here: nothing to skip
                    continue
                if due > now_ns:
                    later_list.append((frame, from_wall_ns(due)))
                else:
                    now_list.append(frame)
            if now_list:
                channel.put_many(now_list)
            if later_list:
                channel.defer_many(later_list)
            channel.message_count += len(now_list) + len(later_list)
            channel.dispatch()

    def get_channel(self, name: str) -> Channel:
        channel = self.channels.get(name)
        if channel is not None:
            return channel
        channel = super().get_channel(name)
        if not channel.ephemeral:
            replica = self.replica
            if replica.role != PRIMARY:
                channel.backend.empty()
            channel.e2e = FinObserver(replica, name, channel.e2e)
            if isinstance(channel, ReplicatedChannel):
                channel.replica = replica
            replica.channel_created(name)
        return channel

    def delete_channel(self, name: str) -> None:
        existed = name in self.channels
        super().delete_channel(name)
        if existed:
            self.replica.channel_deleted(name)

    def start(self) -> None:
        """After the lookupd channel query: deliver only as the primary."""
        self.replica.lookup_done = True
        if self.replica.role == PRIMARY:
            super().start()

    def close(self) -> int:
        self.replica.forwarder.close()
        lost = super().close()
        self.replica.log.close()
        return lost

    def delete(self) -> None:
        self.replica.forwarder.close()
        super().delete()
        self.replica.log.delete()
        self.replica.deleted()


class TopicReplica(Handlers):
    """One topic's role, epoch and replication state on this node, built from its concerns
    (the classes below it, lowest first: replica_state.py's `ReplicaState`, stream.py,
    fin_batches.py, admin_sync.py, merging.py, election.py, joining.py, handlers.py), and the
    topic's task, which drives them."""

    def __init__(self, repl: Replication, topic: ReplicatedTopic) -> None:
        super().__init__(repl, topic)
        #: Publishes accepted here while another node leads, forwarded to it.
        self.forwarder = forward.Forwarder(self)

    # -- the topic's task --------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeats, FIN batches, the lease and syncs as the primary; the failure detector
        and elections as a replica. Ends with the topic."""
        options = self.repl.nsqd.options
        while not self.topic.exiting:
            now = trio.current_time()
            try:
                self.log.write_fins()
            except OSError as err:
                log.error("REPLICATION(%s): failed to write FINs - %s", self.name, err)
            if self.log.compaction_due():  # on every member: a replica's log is bounded too
                self.repl.spawn(self._compact)
            if self.role == PRIMARY:
                self._primary_tick(now)
            elif self.role == REPLICA and self.log.damaged:
                await self._repair()  # before it may vote or stand
            elif (
                self.role == REPLICA
                and self.lookup_done
                and roles.primary_silent(now, self.last_heard, options.replication_failover_timeout)
                and now >= self.stand_after
            ):
                await self._stand()
                continue
            await trio.sleep(TICK)

    def _primary_tick(self, now: float) -> None:
        options = self.repl.nsqd.options
        if now >= self.next_fins:
            self.flush_fins()
            self.next_fins = now + options.replication_fin_interval
        # The lease first: a primary that was stopped (SIGSTOP, a stalled VM) for longer
        # steps down before it sends anything in its old epoch.
        if roles.lease_binds(self.role, options.replication_degraded) and not self.lease_valid(now):
            self.step_down(self.epoch, "lease expired: no quorum acknowledged its heartbeats")
            return
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + options.replication_heartbeat_interval
            frame = wire.encode(
                wire.HEARTBEAT,
                {"topic": self.name, "epoch": self.epoch, "sent": now, **self.floor_header()},
            )
            for peer in self.repl.peers:
                peer.send(frame)
        for peer in self.repl.peers:
            node_id = peer.node_id
            if (
                peer.connected
                and node_id is not None
                and node_id not in self.members
                and node_id not in self.syncing
            ):
                self.syncing.add(node_id)
                self.repl.spawn(self._sync, peer, self.epoch)
        for channel in self.topic.channels.values():
            if isinstance(channel, ReplicatedChannel) and channel.skip and channel.holds_nothing():
                channel.skip.clear()  # what it skipped never came back (emptied, trimmed)

    async def _compact(self) -> None:
        try:
            await self.log.compact(self.repl.nsqd.run_blocking)
        except (OSError, ValueError) as err:
            log.error("REPLICATION(%s): compaction failed - %s", self.name, err)

    # -- observability ----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        members = []
        for peer in self.repl.peers:
            member = self.members.get(peer.node_id) if peer.node_id is not None else None
            lag = self.accepted - member.acked if member is not None and member.acked >= 0 else None
            members.append(
                {
                    "address": peer.address,
                    "node_id": peer.node_id,
                    "connected": peer.connected,
                    "member": member is not None,
                    "lag_messages": lag if self.role == PRIMARY else None,
                    "lag_bytes": member.unacked_bytes if member is not None else None,
                }
            )
        return {
            "role": self.role,
            "epoch": self.epoch,
            "epoch_text": epoch_text(self.epoch),
            "primary": self.repl.address_of(self.primary),
            "members": members,
            "log_messages": len(self.log),
            "corrupt_records": self.log.corrupt_records,
            "damaged": self.log.damaged,
            "under_replicated": self.under_replicated,
            "failovers": self.failovers,
            **self.forwarder.stats(),
        }
