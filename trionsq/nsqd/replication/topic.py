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
"""

from __future__ import annotations

import errno
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import trio

from ...protocol.message import framed_id
from ...protocol.names import is_ephemeral
from ..backend import Backend, from_wall_ns, to_wall_ns
from ..channel import Channel
from ..e2e_latency import E2ELatency, Result, disabled_result
from ..lookup import register, unregister
from ..topic import Topic, TopicExiting
from ..wakeup import Wakeup
from . import forward, wire
from .acks import AckQueue, Owed, Waiter
from .admin_state import AdminState, parse_version
from .catchup import CATCH_UP_BASE, CatchUp, catch_up
from .channel import ReplicatedChannel
from .log import (
    LogSnapshot,
    Record,
    ReplicationLog,
    decode_records,
    encode_records,
    fsync_handles,
    scan_ids,
    split_ids,
)

if TYPE_CHECKING:
    from ..nsqd import NSQD
    from .node import Replication
    from .peer import Peer

log = logging.getLogger("trionsq.nsqd")

PRIMARY, REPLICA, CANDIDATE = "primary", "replica", "candidate"
NODE_BITS = 1024
#: The topic task's period (heartbeats, FIN batches and the lease are checked this often).
TICK = 0.05
#: Messages accepted that are written and streamed at once rather than at the end of the
#: scheduler pass.
FLUSH_AT = 64
#: Bytes of the log read (in a worker thread) and queued in the channels at a time when a
#: member takes office: the event loop goes on between two.
REBUILD_CHUNK = 256 * 1024

_T = TypeVar("_T")


class Merged(NamedTuple):
    """A peer's state merged here (`TopicReplica.merge_from`)."""

    #: The IDs the peer holds.
    theirs: set[bytes]
    #: Where in this node's log the first message the peer lacks is: (generation, offset).
    start: tuple[int, int]
    #: IDs the peer holds that this node dropped as finished everywhere.
    obsolete: set[bytes]


def epoch_text(epoch: int) -> str:
    return f"{epoch // NODE_BITS}.{epoch % NODE_BITS}"


class FinObserver:
    """A replicated channel's e2e slot: the FIN paths (protocol_v2's fast path and
    `Channel.finish`) call `record_frame` for every finished message; it queues the FIN for
    the replicas and passes the frame on to the real estimator, if any."""

    __slots__ = ("channel", "inner", "replica")

    def __init__(self, replica: TopicReplica, channel: str, inner: E2ELatency | None) -> None:
        self.replica = replica
        self.channel = channel
        self.inner = inner

    @property
    def percentiles(self) -> Any:
        return None if self.inner is None else self.inner.percentiles

    def record_frame(self, frame: bytes, now: float | None = None) -> None:
        self.replica.finished(self.channel, framed_id(frame))
        if self.inner is not None:
            self.inner.record_frame(frame, now)

    def live_halves(self, now: float | None = None) -> Any:
        return [] if self.inner is None else self.inner.live_halves(now)

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
    ) -> None:
        if self.exiting:
            raise TopicExiting("exiting")
        replica = self.replica
        due = to_wall_ns(trio.current_time() + defer) if defer > 0 else 0
        if replica.role != PRIMARY:
            # Another node leads, or an election runs: forwarded to the primary, and the
            # publisher's answer waits for the batch they go in (forward.py).
            replica.owed_to = replica.forwarder.add(frames, due)
            return
        replica.publish(frames, due)
        super().put_frames(frames, defer, pump_later)

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
            channel.e2e = FinObserver(replica, name, channel.e2e)  # type: ignore[assignment]
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


class Member:
    """A replica of the primary's epoch: what it has acknowledged, what is sent and not."""

    __slots__ = ("acked", "catch_up", "hb_acked", "joined_at", "unacked", "unacked_bytes")

    def __init__(self, acked: int) -> None:
        self.acked = acked
        #: Send time (trio clock) of the latest heartbeat it acknowledged.
        self.hb_acked = -1e18
        self.unacked: deque[tuple[int, int]] = deque()
        self.unacked_bytes = 0
        #: Its catch-up's frames not yet acknowledged when it joined the stream (their bytes
        #: are in `unacked_bytes`), and the stream position it joined at: it holds every
        #: message up to there once they are.
        self.catch_up: CatchUp | None = None
        self.joined_at = 0


class TopicReplica:
    """One topic's role, epoch and replication state on this node."""

    def __init__(self, repl: Replication, topic: ReplicatedTopic) -> None:
        self.repl = repl
        self.topic = topic
        self.name = topic.name
        nsqd = repl.nsqd
        self.node_id = nsqd.options.node_id
        self.log = ReplicationLog(repl.data_path, topic.name)
        #: Paused states and deleted channels, versioned (admin_state.py).
        self.admin = AdminState(repl.data_path, topic.name)
        self.role = REPLICA
        #: The lowest epoch of this topic: a topic of this name was deleted below it. A copy
        #: nsqd.dat holds in a lower epoch is of the deleted topic (deleted at start).
        self.floor = repl.tombstones.floor(topic.name)
        saved = repl.saved_epochs.pop(topic.name, None)
        self.epoch = max(saved, 0) if saved is not None else self.floor
        #: POST /topic/takeover: this node's vote counts twice until the other member of its
        #: two-member set joins again (docs/replication.md section 8).
        self.doubled = False
        self.primary: int | None = None
        #: The primary a candidate stopped hearing from (`_poll` does not wait for it).
        self.primary_before: int | None = None
        #: The members whose state a damaged log was repaired from so far (`_repair`).
        self.repaired_from: set[int] = set()
        now = trio.current_time()
        #: When the primary was last heard from (-inf: stand at once, a topic just created
        #: here by a publisher or consumer).
        self.last_heard = now if repl.loading_or_remote(topic.name) else -1e18
        #: A replica stands no earlier than this (after a failed attempt: a short random
        #: pause). Apart from `last_heard`, which votes read: a failed candidate must not
        #: look to the others as if it had heard from the primary.
        self.stand_after = 0.0
        self.lookup_done = True
        self.accepted = 0
        #: Accepted, not yet in the log (`flush`).
        self.outbox: list[tuple[int, list[bytes]]] = []  # (due time, frames)
        self.outbox_count = 0
        #: --sync-ack: messages accepted whose log records this node has fsynced, and the
        #: wake-up of the task that fsyncs (`sync_task`).
        self.sync_ack = nsqd.options.sync_ack
        self.synced = 0
        self.sync_wake = Wakeup()
        self.members: dict[int, Member] = {}
        self.syncing: set[int] = set()
        #: Peers being fed what they lack before they join the stream (catchup.py).
        self.catching_up: dict[int, CatchUp] = {}
        #: Merges (a promise, a sync) one at a time: each appends what the log lacked when it
        #: scanned it.
        self.merge_lock = trio.Lock()
        self.waiters = AckQueue()
        #: Publishes accepted here while another node leads, forwarded to it.
        self.forwarder = forward.Forwarder(self)
        #: What the answers of the latest publish here wait for (`ClientV2.owed`'s key): this
        #: topic's quorum as the primary, else the forwarded batch the messages went in.
        self.owed_to: Owed = self
        self.fins_out: dict[str, list[bytes]] = {}
        self.fins_count = 0
        self.next_fins = 0.0
        self.next_heartbeat = 0.0
        self.took_office = 0.0
        self.failovers = 0
        self.under_replicated = 0
        self.elections = 0

    # -- sizes ------------------------------------------------------------------------------

    @property
    def quorum(self) -> int:
        return self.repl.quorum - 1 if self.doubled else self.repl.quorum

    def not_primary(self) -> str:
        primary = self.repl.address_of(self.primary)
        where = f"; primary: {primary}" if primary else ""
        epoch = epoch_text(self.epoch)
        return f"not the primary of replicated topic {self.name} (epoch {epoch}{where})"

    # -- publish, replicate, acknowledge ----------------------------------------------------

    def publish(self, frames: list[bytes], due: int) -> None:
        """Accept messages published to this primary (here, or forwarded by a replica):
        they are written to the log and streamed by `end_of_batch`, once per scheduler pass
        for every publisher served in it (one write(2) and one MSGS frame per member for all
        of them), and their PUBs answered once a quorum has them (`wait_replicated`)."""
        self.outbox.append((due, frames))
        self.outbox_count += len(frames)
        self.accepted += len(frames)
        if self.outbox_count >= FLUSH_AT:
            # An MPUB's worth: written and streamed at once, so that the members work on it
            # while this node reads the next (waiting for the pass would line every
            # publisher up behind one acknowledgement).
            self.flush()
        else:
            self.repl.batching.schedule(self)

    def end_of_batch(self) -> None:
        """Write and stream what was accepted, and send the forwarded batch (at the end of a
        batch of the loop's passes, `batching.FlushWhenIdle`)."""
        self.flush()
        if self.forwarder.open is not None:
            self.forwarder.seal()

    async def sync_task(self) -> None:
        """--sync-ack: fsync the log after writes (one fsync for every write made while the
        previous one ran: a group commit), then release the publishers it covers."""
        while not self.topic.exiting:
            await self.sync_wake.wait()
            target = self.accepted - self.outbox_count
            try:
                await self.repl.nsqd.run_blocking(fsync_handles, [self.log.dup_handle()])
            except OSError as err:
                self._disk_failed("fsync", err)
                continue
            if target > self.synced:
                self.synced = target
                self._release_waiters()

    def flush(self) -> None:
        """Write what `publish` accepted to the log, and stream it as the primary. A disk
        that refuses fails every waiting PUB (E_PUB_FAILED) and marks nsqd unhealthy."""
        if not self.outbox:
            return
        batches, self.outbox = self.outbox, []
        count, self.outbox_count = self.outbox_count, 0
        try:
            written = self.log.append_frames(batches)
        except OSError as err:
            self._disk_failed("write", err)
            return
        if self.sync_ack:
            self.sync_wake.set()
        if self.role == PRIMARY:
            if len(self.members) < self.repl.quorum - 1:
                self.under_replicated += count
            self._stream(written)

    def _disk_failed(self, what: str, err: OSError) -> None:
        """The log's disk refused: every waiting PUB fails (E_PUB_FAILED), nsqd is unhealthy."""
        reason = f"failed to {what} replication log - {err.strerror or err}"
        log.error("REPLICATION(%s): %s", self.name, reason)
        self.repl.nsqd.health = f"NOK - {reason}"
        self._fail_waiters()

    def _stream(self, encoded: bytes) -> None:
        """Send records (encoded as the log holds them) to every member."""
        if not self.members:
            return
        frame = wire.encode_stream(wire.MSGS, self.name, self.epoch, self.accepted, encoded)
        window = self.repl.nsqd.options.replication_window
        for node_id, member in list(self.members.items()):
            peer = self.repl.peer_by_id(node_id)
            if peer is None or not peer.send(frame):
                self._drop_member(node_id, "disconnected")
                continue
            member.unacked.append((self.accepted, len(frame)))
            member.unacked_bytes += len(frame)
            if member.unacked_bytes > window:
                # Flow control: it leaves the stream (memory stays bounded); it is caught up
                # from the log when it is synced again.
                self._drop_member(node_id, "behind by more than --replication-window")

    def _drop_member(self, node_id: int, why: str) -> None:
        if self.members.pop(node_id, None) is not None:
            log.warning("REPLICATION(%s): node %d leaves the stream (%s)", self.name, node_id, why)
            self._release_waiters()

    def quorum_total(self) -> int:
        """Messages accepted so far that a quorum (this node included) has written (and,
        with --sync-ack, fsynced: the members acknowledge only once fsynced)."""
        need = self.quorum - 1
        total = self.accepted
        if need > 0:
            acks = sorted((m.acked for m in self.members.values()), reverse=True)
            if len(acks) >= need:
                total = acks[need - 1]
            elif self.repl.nsqd.options.replication_degraded != "accept" or self.role != PRIMARY:
                return -1
        return min(total, self.synced) if self.sync_ack else total

    def acknowledged(self, node_id: int, epoch: int, total: int) -> None:
        member = self.members.get(node_id)
        if total >= CATCH_UP_BASE:
            self._catch_up_acknowledged(node_id, epoch, total, member)
            return
        if member is None or epoch != self.epoch or self.role != PRIMARY:
            return
        if member.catch_up is not None:  # the catch-up's frames came before this one
            member.unacked_bytes -= member.catch_up.all_acknowledged()
            member.catch_up = None
        if total > member.acked:
            member.acked = total
        unacked = member.unacked
        while unacked and unacked[0][0] <= total:
            member.unacked_bytes -= unacked.popleft()[1]
        self._release_waiters()

    def _catch_up_acknowledged(
        self, node_id: int, epoch: int, total: int, member: Member | None
    ) -> None:
        if epoch != self.epoch or self.role != PRIMARY:
            return
        if member is None:
            state = self.catching_up.get(node_id)
            if state is not None:
                state.acknowledged(total)
            return
        if member.catch_up is None:
            return
        member.unacked_bytes -= member.catch_up.acknowledged(total)
        if not member.catch_up.unacked:
            member.catch_up = None
            if member.joined_at > member.acked:
                member.acked = member.joined_at
            self._release_waiters()

    def _release_waiters(self) -> None:
        if self.waiters:
            self.waiters.release(self.quorum_total())

    def _fail_waiters(self) -> None:
        self.waiters.fail_all()

    def wait_for(self, target: int, waiter: Waiter) -> bool:
        """Register `waiter` for the messages accepted up to `target` being on a quorum
        (failed if the primary steps down, or --replication-ack-timeout passes). False:
        they already are, and the waiter is not registered."""
        if self.role == PRIMARY and self.quorum_total() >= target:
            return False
        deadline = trio.current_time() + self.repl.nsqd.options.replication_ack_timeout
        self.waiters.add(target, deadline, waiter)
        return True

    # -- FINs and channels ------------------------------------------------------------------

    def finished(self, channel: str, message_id: bytes) -> None:
        """A consumer FINished the message at this primary: log it, batch it."""
        if self.outbox:
            self.flush()  # a message delivered before its log write (same pass)
        if self.log.finish(channel, (message_id,)):
            self.fins_out.setdefault(channel, []).append(message_id)
            self.fins_count += 1
            if self.fins_count >= 1000:
                self.flush_fins()
        else:  # finished already (a FIN merged from a member): it is not to come back
            queued = self.topic.channels.get(channel)
            if isinstance(queued, ReplicatedChannel) and queued.skip:
                queued.skip.discard(message_id)

    def finished_many(self, channel: str, ids: list[bytes]) -> None:
        """Messages that left a channel for good at this primary without a FIN (moved to a
        dead-letter topic, dropped at their TTL): finished, as FINs are."""
        if self.outbox:
            self.flush()
        new = [i for i in ids if i not in self.log.finished.get(channel, ())]
        if self.log.finish(channel, new) and self.role == PRIMARY:
            self.fins_out.setdefault(channel, []).extend(new)
            self.fins_count += len(new)
            if self.fins_count >= 1000:
                self.flush_fins()

    def flush_fins(self) -> None:
        if not self.fins_count:
            return
        fins, self.fins_out, self.fins_count = self.fins_out, {}, 0
        if self.role != PRIMARY:
            return
        names = list(fins)
        frame = wire.encode(
            wire.FINS,
            {"topic": self.name, "epoch": self.epoch, "channels": {n: len(fins[n]) for n in names}},
            b"".join(b"".join(fins[n]) for n in names),
        )
        for node_id in list(self.members):
            peer = self.repl.peer_by_id(node_id)
            if peer is not None:
                peer.send(frame)

    def channel_created(self, name: str) -> None:
        self.log.add_channel(name)
        if self.role == PRIMARY:
            header: dict[str, Any] = {"op": "create", "channel": name}
            if self.admin.deleted(name):
                # Created again after a delete: a newer entry than the delete's.
                version = self.admin.next_version(self.epoch)
                self.admin.set_channel(name, version, exists=True, paused=False)
                self.admin.save()
                header["v"] = list(version)
            self._send_members(wire.CHANNEL, header)
            self.repl.nsqd.lookup.notify(register(self.name, name), force=True)

    def channel_deleted(self, name: str) -> None:
        if is_ephemeral(name):
            return
        self.log.delete_channel(name)
        if self.role == PRIMARY:
            dropped = self.fins_out.pop(name, None)
            if dropped:
                self.fins_count -= len(dropped)
            if not self.admin.deleted(name):
                version = self.admin.next_version(self.epoch)
                self.admin.set_channel(name, version, exists=False, paused=False)
                self.admin.save()
            version = self.admin.channel_version(name)
            self._send_members(wire.CHANNEL, {"op": "delete", "channel": name, "v": list(version)})

    def deleted(self) -> None:
        """The topic was deleted: its admin file goes, waiting PUBs fail, tasks end."""
        self.admin.delete()
        self.outbox, self.outbox_count = [], 0
        self._fail_waiters()

    def floor_header(self) -> dict[str, Any]:
        """``{"floor": F}`` for a topic created again after a delete (a member holding a
        copy below F deletes it), else nothing."""
        return {"floor": self.floor} if self.floor else {}

    def _send_members(self, kind: int, header: dict[str, Any], blob: bytes = b"") -> None:
        frame = wire.encode(kind, {"topic": self.name, "epoch": self.epoch, **header}, blob)
        for node_id in list(self.members):
            peer = self.repl.peer_by_id(node_id)
            if peer is not None:
                peer.send(frame)

    # -- summaries ---------------------------------------------------------------------------

    async def _scan(self, fn: Callable[[LogSnapshot], _T]) -> _T:
        """`fn` of a snapshot of the log, in a worker thread. Raises OSError (a malformed
        record too: the file was damaged under this node)."""
        snapshot = self.log.snapshot()
        try:
            result: _T = await self.repl.nsqd.run_blocking(fn, snapshot)
            return result
        except ValueError as err:
            raise OSError(errno.EIO, f"malformed replication log - {err}") from None
        finally:
            snapshot.close()

    async def summary(self) -> tuple[dict[str, Any], bytes]:
        """What this node holds: every message ID (a scan of the log), and per channel its
        finished IDs."""
        count, held = await self._scan(_joined_ids)
        names = list(self.log.finished)
        emptied = self.log.emptied
        header = {
            "count": count,
            "channels": {n: len(self.log.finished[n]) for n in names},
            "admin": self.admin.to_json(),
            "emptied": len(emptied),
        }
        blob = held + b"".join(b"".join(self.log.finished[n]) for n in names)
        return header, blob + b"".join(emptied)

    @staticmethod
    def parse_summary(
        header: dict[str, Any], blob: bytes
    ) -> tuple[set[bytes], dict[str, list[bytes]]]:
        try:
            count = int(header.get("count", 0))
            channels = {str(name): int(n) for name, n in (header.get("channels") or {}).items()}
        except (AttributeError, TypeError, ValueError):
            raise wire.WireError("bad summary") from None
        if count < 0 or any(n < 0 for n in channels.values()):
            raise wire.WireError("bad summary")
        pos = count * 16
        ids = set(split_ids(blob[:pos]))
        fins: dict[str, list[bytes]] = {}
        for name, n in channels.items():
            fins[name] = split_ids(blob[pos : pos + n * 16])
            pos += n * 16
        try:
            pos += int(header.get("emptied", 0)) * 16  # `summary_emptied`
        except (TypeError, ValueError):
            raise wire.WireError("bad summary") from None
        if pos != len(blob):
            raise wire.WireError("bad summary")
        return ids, fins

    @staticmethod
    def summary_emptied(header: dict[str, Any], blob: bytes) -> list[bytes]:
        """The IDs /topic/empty dropped, at the end of a summary."""
        count = int(header.get("emptied", 0))
        start = len(blob) - count * 16
        return [blob[start + i * 16 : start + i * 16 + 16] for i in range(count)]

    def merge_admin(self, raw: Any, emptied: list[bytes]) -> None:
        """Adopt another member's newer admin entries and its emptied IDs; as the primary,
        pass what changed on to the members. A malformed state is logged and left out."""
        try:
            changed = self.admin.merge(raw)
        except ValueError as err:
            log.error("REPLICATION(%s): ignoring a bad admin state - %s", self.name, err)
            changed = False
        if changed:
            self.admin.save()
            if self.role != CANDIDATE:  # a candidate applies them as it takes office
                self.admin.apply(self.topic, self.log)
        new = self.log.empty_topic(emptied) if emptied else 0
        if (changed or new) and self.role == PRIMARY:
            self.send_admin_state(None)

    def send_admin_state(self, peer: Peer | None) -> None:
        """The admin state and emptied IDs, to `peer` (a member joining) or every member."""
        emptied = self.log.emptied
        header = {"op": "state", "admin": self.admin.to_json(), "count": len(emptied)}
        if peer is None:
            self._send_members(wire.TOPIC, header, b"".join(emptied))
        else:
            peer.send(
                wire.encode(
                    wire.TOPIC,
                    {"topic": self.name, "epoch": self.epoch, **header},
                    b"".join(emptied),
                )
            )

    async def read_summary(
        self, peer: Peer, header: dict[str, Any], blob: bytes
    ) -> tuple[set[bytes], dict[str, list[bytes]]] | None:
        """`parse_summary` in a worker thread; None (logged) if it is malformed."""
        try:
            parsed: tuple[set[bytes], dict[str, list[bytes]]] = await self.repl.nsqd.run_blocking(
                self.parse_summary, header, blob
            )
        except wire.WireError as err:
            log.error("REPLICATION(%s): node %s - %s", self.name, peer.node_id, err)
            return None
        return parsed

    async def merge_summary(self, peer: Peer, header: dict[str, Any], blob: bytes) -> Merged | None:
        """A peer's summary (a promise, a sync) merged here: its admin state, its messages
        and FINs (`merge_from`). None if the summary is malformed or the bodies could not be
        fetched."""
        summary = await self.read_summary(peer, header, blob)
        if summary is None:
            return None
        self.merge_admin(header.get("admin"), self.summary_emptied(header, blob))
        return await self.merge_from(peer, *summary)

    async def merge_from(
        self, peer: Peer, ids: set[bytes], fins: dict[str, list[bytes]]
    ) -> Merged | None:
        """Adopt a peer's messages and FINs (a promise or a sync): union. A message the peer
        holds that this node's compaction dropped (finished by every channel here) is not
        fetched: it is `obsolete` for the peer. None if the bodies could not be fetched."""
        async with self.merge_lock:
            generation = self.log.generation
            try:
                held, first_lacking = await self._scan(
                    lambda snapshot: snapshot.ids_and_first_lacking(ids)
                )
            except OSError as err:
                log.error("REPLICATION(%s): failed to read the log - %s", self.name, err)
                return None
            try:
                missing, obsolete, ours_only = await self.repl.nsqd.run_blocking(
                    _lacking, ids, held, self.log.read_dropped
                )
            except OSError as err:
                log.error("REPLICATION(%s): failed to read the dropped IDs - %s", self.name, err)
                return None
            written = b""
            if missing:
                answer = await peer.ask(
                    wire.WANT,
                    {"topic": self.name},
                    b"".join(missing),
                    timeout=self.repl.nsqd.options.replication_ack_timeout,
                )
                if answer is None or answer[0] != wire.BODIES:
                    return None
                try:
                    records = await self.repl.nsqd.run_blocking(decode_records, answer[2])
                except ValueError as err:
                    log.error(
                        "REPLICATION(%s): node %s - bad BODIES - %s", self.name, peer.node_id, err
                    )
                    return None
                self.flush()  # the totals streamed below must cover only what the log holds
                written = self.log.append(records, known=held)
                if written and self.sync_ack:
                    self.sync_wake.set()
            # The peer's FINs before its messages are served: what it knows finished is not
            # delivered again (a message this node had compacted away and forgotten, which
            # the peer still holds as finished, would otherwise be).
            self._merge_fins(fins, held)
            if ours_only:
                theirs_dropped = await self._merge_dropped(peer, ours_only, held)
                if theirs_dropped is None:
                    return None
                ids |= theirs_dropped  # not caught up with: it has no use for them
            if written and self.role == PRIMARY:
                # Messages only the peer had: served, and sent to the other members.
                records = decode_records(written)
                self.accepted += len(records)
                self.topic.deliver_records(records)
                self._stream(written)
            return Merged(ids, (generation, first_lacking), obsolete)

    async def _merge_dropped(
        self, peer: Peer, ours_only: list[bytes], held: set[bytes]
    ) -> set[bytes] | None:
        """Ask the peer which of the messages this node holds and it does not its compaction
        dropped (finished by every channel there), and finish those here for every channel:
        a member that missed their FINs learns them from one that compacted them away.
        Returns those IDs; None if the peer did not answer."""
        answer = await peer.ask(
            wire.ASK_DROPPED,
            {"topic": self.name},
            b"".join(ours_only),
            timeout=self.repl.nsqd.options.replication_ack_timeout,
        )
        if answer is None or answer[0] != wire.DROPPED:
            return None
        finished = set(split_ids(answer[2])).intersection(ours_only)
        if finished:
            self._merge_fins({name: list(finished) for name in self.log.finished}, held)
        return finished

    def _merge_fins(self, fins: dict[str, list[bytes]], held: set[bytes]) -> None:
        """A peer's finished sets, merged. As the primary, the messages they finish that a
        channel still holds (queued, deferred, in flight) are not delivered by it again, and
        the FINs go to the other members."""
        primary = self.role == PRIMARY
        for name, done in fins.items():
            if self.admin.deleted(name):
                continue
            finished = self.log.finished.get(name)
            if finished is None:
                finished = self.log.finished[name] = set()
            new = set(done)
            new -= finished
            if not new:
                continue
            self.log.finish(name, new)
            if not primary:
                continue
            channel = self.topic.channels.get(name)
            if isinstance(channel, ReplicatedChannel):
                channel.skip_finished(new & held)
            self.fins_out.setdefault(name, []).extend(new)
            self.fins_count += len(new)

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
                and now - self.last_heard >= options.replication_failover_timeout
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
        if not self.lease_valid(now) and options.replication_degraded == "refuse":
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

    def leads(self, epoch: int) -> bool:
        """This node is still the primary of `epoch`, and the topic open."""
        return self.role == PRIMARY and self.epoch == epoch and not self.topic.exiting

    def may_deliver(self) -> bool:
        """Before each delivery batch of its channels (docs/replication.md section 8): a
        primary delivers only while its lease holds (unless --replication-degraded=accept)."""
        if self.role != PRIMARY or self.repl.nsqd.options.replication_degraded == "accept":
            return True
        return self.lease_valid(trio.current_time())

    def lease_valid(self, now: float) -> bool:
        options = self.repl.nsqd.options
        need = self.quorum - 1
        if need <= 0 or now - self.took_office < options.replication_lease:
            return True
        recent = sum(
            1 for m in self.members.values() if now - m.hb_acked < options.replication_lease
        )
        return recent >= need

    def heartbeat_acked(self, node_id: int, epoch: int, sent: float) -> None:
        member = self.members.get(node_id)
        if member is not None and epoch == self.epoch and sent > member.hb_acked:
            member.hb_acked = sent

    async def _sync(self, peer: Peer, epoch: int) -> None:
        """Make `peer` a member of this epoch: its summary, union both ways (what it lacks
        by a paced catch-up, catchup.py), then the stream."""
        assert peer.node_id is not None
        node_id = peer.node_id
        try:
            answer = await peer.ask(
                wire.SYNC, {"topic": self.name, "epoch": epoch, **self.floor_header()}
            )
            if answer is None or self.role != PRIMARY or self.epoch != epoch:
                return
            kind, header, blob = answer
            if kind == wire.REFUSE:
                self.refused(int(header.get("epoch", 0)), f"node {node_id} refused the sync")
                return
            if kind != wire.SUMMARY:
                return
            merged = await self.merge_summary(peer, header, blob)
            if merged is None or not self.leads(epoch) or not peer.connected:
                return
            sent = await catch_up(self, peer, epoch, merged.theirs, merged.start, merged.obsolete)
            if sent is not None:
                log.info(
                    "REPLICATION(%s): node %d joins epoch %s (%d messages sent to it)",
                    self.name,
                    node_id,
                    epoch_text(epoch),
                    sent,
                )
        finally:
            self.syncing.discard(node_id)

    def join_stream(self, peer: Peer, epoch: int, state: CatchUp, obsolete: set[bytes]) -> None:
        """The end of a catch-up (in the event loop, between two appends: the log's end was
        just sent): `peer` is a member from here on, sent the channels and the finished sets,
        then every message accepted."""
        assert peer.node_id is not None
        member = Member(acked=-1)
        member.hb_acked = trio.current_time()
        member.joined_at = self.accepted
        if state.unacked:
            member.catch_up = state
            member.unacked_bytes = state.unacked_bytes
        else:
            member.acked = self.accepted
        self.members[peer.node_id] = member
        self.doubled = False  # a forced takeover's double vote ends when a member is back
        # The admin state first: the channels below are not ones it knows deleted.
        self.send_admin_state(peer)
        for name in self.log.finished:
            peer.send(
                wire.encode(
                    wire.CHANNEL,
                    {"topic": self.name, "epoch": epoch, "op": "ensure", "channel": name},
                )
            )
        # What it holds that this node dropped as finished everywhere: finished for it.
        names = list(self.log.finished)
        fins = {n: [*self.log.finished[n], *obsolete] for n in names}
        peer.send(
            wire.encode(
                wire.FINS,
                {"topic": self.name, "epoch": epoch, "channels": {n: len(fins[n]) for n in names}},
                b"".join(b"".join(fins[n]) for n in names),
            )
        )
        self._release_waiters()

    # -- elections ---------------------------------------------------------------------------

    async def _stand(self, force: bool = False) -> bool:
        """suspect: a pre-vote, then PREPARE in a new epoch, promises merged, take office.
        `force` (POST /topic/takeover): no pre-vote, and this node's vote counts twice.
        True if it took office."""
        options = self.repl.nsqd.options
        timeout = options.replication_failover_timeout
        proposed = (self.epoch // NODE_BITS + 1) * NODE_BITS + self.node_id
        connected = [p for p in self.repl.peers if p.connected]
        floor = self.floor_header()
        yes = 2 if force else 1
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
        if yes < self.quorum or self.role != REPLICA or self.epoch >= proposed:
            self._retry_later(max(retry_after) if retry_after else None)
            return False
        self.elections += 1
        self.epoch = proposed
        self.role = CANDIDATE
        self.primary_before, self.primary = self.primary, None
        await self.repl.persist(self.name)
        log.info("REPLICATION(%s): standing in epoch %s", self.name, epoch_text(proposed))
        promised = 2 if force else 1

        async def prepare(peer: Peer) -> bool:
            answer = await peer.ask(
                wire.PREPARE, {"topic": self.name, "epoch": proposed, **floor}, timeout=timeout
            )
            if answer is None or self.epoch != proposed or self.role != CANDIDATE:
                return False
            kind, header, blob = answer
            if kind == wire.REFUSE:
                higher = int(header.get("epoch", 0))
                if higher > self.epoch:
                    with trio.CancelScope(shield=True):  # the epoch met is persisted
                        await self.adopt(higher, f"node {peer.node_id} promised a higher epoch")
                return False
            if kind != wire.PROMISE:
                return False
            return await self.merge_summary(peer, header, blob) is not None

        promised += await self._poll(connected, prepare, self.quorum - promised)
        if self.role == CANDIDATE and self.epoch == proposed and promised >= self.quorum:
            self.doubled = force
            self.take_office()
            return True
        if self.role == CANDIDATE:
            self.role = REPLICA
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
        self.role = PRIMARY
        self.primary = self.node_id
        self.members.clear()
        self.syncing.clear()
        now = trio.current_time()
        self.took_office = now
        self.next_heartbeat = 0.0
        self.failovers += 1
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
        nursery = self.repl.nsqd._nursery
        assert nursery is not None
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
            nursery.start_soon(self._rebuild, snapshot, self.epoch)
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
        self.owed_to = self
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
        if epoch > self.epoch:
            self.epoch = epoch
        self.role = REPLICA
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
        if epoch <= self.epoch and self.role == REPLICA:
            return
        self.step_down(epoch, why)
        await self.repl.persist(self.name)

    def refused(self, epoch: int, why: str) -> None:
        """A member refused this primary's stream with a higher epoch."""
        if epoch > self.epoch:
            self.step_down(epoch, why)
            self.repl.persist_soon(self.name)

    # -- requests from the other members ----------------------------------------------------

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

    async def on_heartbeat(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        if epoch < self.epoch:
            return [self.refuse()]
        if epoch > self.epoch or self.role != REPLICA:
            await self.adopt(epoch, f"node {sender} leads epoch {epoch_text(epoch)}")
        self.heard(sender)
        return [
            wire.encode(
                wire.HEARTBEAT_ACK,
                {"topic": self.name, "epoch": epoch, "sent": header.get("sent", 0)},
            )
        ]

    def on_msgs(self, sender: int, header: dict[str, Any], blob: bytes) -> list[bytes]:
        epoch = int(header["epoch"])
        if epoch < self.epoch:
            return [self.refuse()]
        if epoch > self.epoch or self.role != REPLICA:
            return []  # not synced into that epoch yet: the primary syncs it first
        try:
            self.log.append_encoded(blob)
        except ValueError as err:
            raise wire.WireError(f"bad MSGS - {err}") from None
        self.heard(sender)
        return [wire.encode_stream(wire.ACK, self.name, epoch, int(header["total"]))]

    def on_fins(self, sender: int, header: dict[str, Any], blob: bytes) -> list[bytes]:
        epoch = int(header["epoch"])
        if epoch != self.epoch or self.role != REPLICA:
            return [self.refuse()] if epoch < self.epoch else []
        pos = 0
        for name, n in (header.get("channels") or {}).items():
            count = int(n)
            ids = [blob[pos + i * 16 : pos + i * 16 + 16] for i in range(count)]
            pos += count * 16
            if self.admin.deleted(str(name)):
                continue
            if str(name) not in self.log.finished:
                self.log.finished[str(name)] = set()
            self.log.finish(str(name), ids)
        self.heard(sender)
        return []

    def on_channel(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        if epoch != self.epoch or self.role != REPLICA:
            return [self.refuse()] if epoch < self.epoch else []
        name = str(header.get("channel", ""))
        op = header.get("op")
        topic = self.topic
        version = parse_version(header.get("v"))
        if op == "create":
            if version is not None:
                if self.admin.set_channel(name, version, exists=True, paused=False):
                    self.admin.save()
            elif self.admin.deleted(name):
                self.admin.forget_channel(name)  # the primary knows no delete: it wins
                self.admin.save()
            if not self.admin.deleted(name):
                self.log.add_channel(name)
                topic.get_channel(name)
        elif op == "ensure" and not self.admin.deleted(name):
            if name not in self.log.finished:
                self.log.finished[name] = set()
                self.log.finish(name, ())
            if name not in topic.channels:
                topic.get_channel(name)
        elif op == "delete":
            if version is not None and self.admin.set_channel(
                name, version, exists=False, paused=False
            ):
                self.admin.save()
            if name in topic.channels:
                topic.delete_channel(name)
            self.log.delete_channel(name)
        self.heard(sender)
        return []

    def _may_promise(self, epoch: int) -> bool:
        now = trio.current_time()
        timeout = self.repl.nsqd.options.replication_failover_timeout
        if epoch <= self.epoch or self.log.damaged:
            return False
        if self.role == PRIMARY:
            return not self.lease_valid(now)
        if self.role == REPLICA:
            return now - self.last_heard >= timeout or self.primary is None
        return True  # a candidate yields to a higher ballot

    def on_prevote(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        answer: dict[str, Any] = {"topic": self.name, "yes": self._may_promise(epoch)}
        waiting = epoch > self.epoch and self.role == REPLICA and not self.log.damaged
        if not answer["yes"] and waiting:
            # Not yet: it heard from the primary less than the failover timeout ago. When it
            # will have, the candidate asks again (it need not wait for a random pause).
            timeout = self.repl.nsqd.options.replication_failover_timeout
            answer["after"] = max(0.0, self.last_heard + timeout - trio.current_time())
        return [wire.encode(wire.PREVOTE_REPLY, {**answer, "rid": header.get("rid")})]

    async def on_prepare(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        rid = header.get("rid")
        if not self._may_promise(epoch):
            if epoch <= self.epoch:
                return [self.refuse(rid)]
            return [wire.encode(wire.REFUSE, {"topic": self.name, "epoch": 0, "rid": rid})]
        self.step_down(epoch, f"promised epoch {epoch_text(epoch)} to node {sender}")
        self.primary = None
        await self.repl.persist(self.name)
        summary, blob = await self.summary()
        return [wire.encode(wire.PROMISE, {**summary, "topic": self.name, "rid": rid}, blob)]

    async def on_sync(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        rid = header.get("rid")
        if epoch < self.epoch:
            return [self.refuse(rid)]
        if epoch > self.epoch or self.role != REPLICA:
            await self.adopt(epoch, f"node {sender} leads epoch {epoch_text(epoch)}")
        self.heard(sender)
        summary, blob = await self.summary()
        return [wire.encode(wire.SUMMARY, {**summary, "topic": self.name, "rid": rid}, blob)]

    async def on_ask_summary(self, header: dict[str, Any]) -> list[bytes]:
        """This node's state, for a member repairing its log (`_repair`): no side effect."""
        summary, blob = await self.summary()
        header = {**summary, "topic": self.name, "rid": header.get("rid")}
        return [wire.encode(wire.SUMMARY, header, blob)]

    async def on_ask_dropped(self, header: dict[str, Any], blob: bytes) -> list[bytes]:
        """Which of the IDs asked about this node's compaction dropped (`_merge_dropped`)."""
        asked = split_ids(blob)

        def dropped_of() -> bytes:
            dropped = self.log.read_dropped()
            return b"".join(i for i in asked if i in dropped)

        try:
            found = await self.repl.nsqd.run_blocking(dropped_of)
        except OSError as err:
            log.error("REPLICATION(%s): failed to read the dropped IDs - %s", self.name, err)
            found = b""
        return [wire.encode(wire.DROPPED, {"topic": self.name, "rid": header.get("rid")}, found)]

    async def on_want(self, header: dict[str, Any], blob: bytes) -> list[bytes]:
        ids = split_ids(blob)
        bodies = await self._scan(lambda snapshot: encode_records(snapshot.read(ids)))
        return [wire.encode(wire.BODIES, {"topic": self.name, "rid": header.get("rid")}, bodies)]

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


def _joined_ids(snapshot: LogSnapshot) -> tuple[int, bytes]:
    """The IDs of the log's records, joined, and how many (a repeated ID is there twice:
    the receiver makes a set of them)."""
    pieces = [b"".join(scan_ids(data)[0]) for data in snapshot.chunks()]
    joined = b"".join(pieces)
    return len(joined) // 16, joined


def _lacking(
    ids: set[bytes], held: set[bytes], read_dropped: Callable[[], set[bytes]]
) -> tuple[list[bytes], set[bytes], list[bytes]]:
    """Of `ids` (a peer's): those this node lacks, those it dropped as finished everywhere
    (the file of dropped IDs is read only if the peer holds any ID not held here); and the
    IDs this node holds that the peer does not (blocking, a worker thread's work)."""
    ours_only = list(held - ids)
    theirs_only = ids - held
    if not theirs_only:
        return [], set(), ours_only
    dropped = read_dropped()
    obsolete = theirs_only & dropped
    return [i for i in theirs_only if i not in obsolete], obsolete, ours_only
