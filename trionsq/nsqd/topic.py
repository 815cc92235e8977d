"""A topic: message IDs, its memory queue and backend, its channels, and its message pump.

PUB/MPUB/DPUB put messages synchronously (`put_bodies`): each becomes a framed `bytes` with
a fresh ID and is queued in memory (up to --mem-queue-size) or in the backend. The pump task,
woken once per put batch, copies queued messages to every channel, then lets each channel
dispatch to its subscribers. With no channel (or while paused) messages wait in the topic and
go to the first channel created.

The disk backlog (what the disk queue holds) moves to the channels in bounded passes. While a
channel has subscribers it is paced by them: each consumed channel is kept between a lead
(twice its subscribers' RDY) and twice that queued (`_wanted`), and the rest waits in the
topic's queue. The backlog then moves once, as fast as it is consumed, instead of competing
with delivery to copy the whole of it disk to disk first; and what a consumer reads from a
channel with memory room is decoded once, straight from the topic's queue. With no consumer it
moves at full speed, PUMP_BATCH per pass (undecoded, `put_records`, to channels whose memory
queue is full), as Go's pump does. Either way the channels are owed the whole backlog (Go's
pump would have copied it already): a channel created or emptied meanwhile does not get it
(`owed_backlog`, `Channel.backlog_skip`), and the pump first moves it to the others.

DPUB messages wait in `deferred` until the pump hands them to the channels, which hold them
until their due time. A durable topic (--mem-queue-size=0, or --sync-ack) writes them to its
disk queue's deferred log before DPUB is answered, and lets them go from there only once every
channel holds them on disk.

Bounded queues (bounds.py, opt-in): when the topic or one of its channels has limits,
`bounded` is set and a publish goes through `_put_bounded` (refused when a ``reject`` queue
is full; queued in order and trimmed under ``drop-oldest``); otherwise `put_frames` pays one
attribute check for the feature.

A layer above the core (replication, seam.py) subclasses Topic: what a publish waits for
(`put_frames` hands back an acks.Receipt; an ordinary topic, None), its tasks (`tasks`), and
`replication_epoch`, `replication_stats`, `admin` and `take_over`, which an ordinary topic
answers with nothing.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

import trio

from ..diskqueue import frames_from_records
from ..protocol.lookup_v1 import register, unregister
from ..protocol.message import FRAMED_BODY_OFFSET, encode_new_frames, framed_id
from ..protocol.names import is_ephemeral
from . import bounds
from .backend import (
    READ_RETRY_INTERVAL,
    Backend,
    from_wall_ns,
    queue_with_overflow,
    restore_deferred,
    save_at_exit,
    to_wall_ns,
)
from .channel import Channel
from .dead_letter import Limits
from .wakeup import Wakeup

if TYPE_CHECKING:
    from .acks import Receipt
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")

#: Messages moved to channels per pump pass before yielding to other tasks.
PUMP_BATCH = 20_000
#: The least a consumed channel is kept queued while the topic's disk backlog is paced.
PUMP_LEAD_MIN = 1_000


class TopicExiting(Exception):
    """The topic is being deleted or the daemon is shutting down."""


class Topic:
    __slots__ = (
        "backend",
        "bounded",
        "channels",
        "deferred",
        "delivery_limits",
        "dropped_count",
        "durable",
        "ephemeral",
        "exiting",
        "limit_override",
        "limits",
        "mem_limit",
        "memory",
        "message_bytes",
        "message_count",
        "name",
        "nsqd",
        "owed_at_pause",
        "owes_backlog",
        "paused",
        "rejected_count",
        "started",
        "wake",
    )

    #: The class of its channels (a replicated topic's have their own).
    channel_class: ClassVar[type[Channel]] = Channel

    def __init__(self, nsqd: NSQD, name: str, backend: Backend) -> None:
        self.nsqd = nsqd
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.backend = backend
        self.mem_limit = nsqd.mem_limit(self.ephemeral)
        self.durable = self.mem_limit == 0 and not self.ephemeral
        self.memory: deque[bytes] = deque()
        # DPUB messages not yet copied to channels: (frame, due time on the trio clock), the
        # ones the deferred log kept across a restart first.
        self.deferred: list[tuple[bytes, float]] = [
            (frame, from_wall_ns(due_ns)) for due_ns, frame in backend.held_deferred.values()
        ]
        self.channels: dict[str, Channel] = {}
        self.paused = False
        # False while nsqd asks the lookupds which channels to create first (docs/protocol.md §2.1).
        self.started = True
        self.exiting = False
        # The channels are owed the disk queue's backlog (`owed_backlog`): set by the pump's
        # first pass over it, cleared once it is moved; how much of it when paused.
        self.owes_backlog = False
        self.owed_at_pause = 0
        self.message_count = 0
        self.message_bytes = 0
        self.wake = Wakeup()
        # Bounded queues (bounds.py): this topic's own settings and the limits in force;
        # `bounded` when it or one of its channels has limits (the publish path's one check).
        self.limit_override: bounds.LimitOverride | None = None
        self.limits = bounds.effective(nsqd.options, None)
        self.bounded = self.limits is not None
        self.dropped_count = 0
        self.rejected_count = 0
        #: Its own dead-lettering and TTL settings, for its channels (dead_letter.py).
        self.delivery_limits: Limits | None = None

    @property
    def depth(self) -> int:
        return len(self.memory) + self.backend.depth

    def put_bodies(self, bodies: list[bytes], defer: float = 0.0) -> Receipt | None:
        """Accept published message bodies (all or none), as `put_frames`."""
        if self.exiting:
            raise TopicExiting("exiting")
        ids = self.nsqd.guid.next_ids(len(bodies))
        return self.put_frames(encode_new_frames(ids, time.time_ns(), bodies), defer)

    def put_frames(
        self, frames: list[bytes], defer: float = 0.0, pump_later: list[Topic] | None = None
    ) -> Receipt | None:
        """Accept newly published messages, already framed with their IDs from nsqd's
        generator (the TCP parser frames them as it reads them): all or none. Raises
        TopicExiting, or BackendError when the disk refuses them. With `pump_later`, the
        topic adds itself there instead of moving the messages on: the caller calls `pump`
        once it has answered the publisher. Returns what the publish's OK must wait for
        beyond the disk (acks.py): None here, something for a replicated topic."""
        if self.exiting:
            raise TopicExiting("exiting")
        if self.bounded:
            self._put_bounded(frames, defer)
        elif defer > 0:
            self._defer(frames, defer)
        else:
            queue_with_overflow(self.memory, self.mem_limit, self.backend, frames)  # may raise
        self.message_count += len(frames)
        self.message_bytes += sum(map(len, frames)) - FRAMED_BODY_OFFSET * len(frames)
        if not self.channels:  # the pump has nothing to do (a new channel wakes it)
            return None
        if pump_later is None:
            self.pump()
        elif self not in pump_later:
            pump_later.append(self)
        return None

    def _defer(self, frames: list[bytes], defer: float) -> None:
        due = trio.current_time() + defer
        if self.durable:
            self.backend.hold_deferred([(frame, to_wall_ns(due)) for frame in frames])
        self.deferred.extend((frame, due) for frame in frames)

    def _put_bounded(self, frames: list[bytes], defer: float) -> None:
        """`put_frames` when the topic or a channel has limits (bounds.py): refuse what does
        not fit under ``reject`` (QueueFull), else queue in order and drop-oldest."""
        bounds.admit(self, frames)
        if defer > 0:
            self._defer(frames, defer)
            return
        limits = self.limits
        if limits is None:
            queue_with_overflow(self.memory, self.mem_limit, self.backend, frames)
            return
        # In order (bounds.queue_in_order); may raise, with nothing queued or dropped.
        memory = self.memory
        backend = self.backend
        queue_with_overflow(
            memory, len(memory) if backend.depth else self.mem_limit, backend, frames
        )
        if limits.drop_oldest:
            self._dropped_from_disk(bounds.trim(self))

    def _dropped_from_disk(self, count: int) -> None:
        """Records at the head of the disk queue were dropped: a channel owed the backlog's
        head without having it (`backlog_skip`, `owed_at_pause`) skips that many fewer."""
        if not count:
            return
        self.owed_at_pause = max(self.owed_at_pause - count, 0)
        for channel in self.channels.values():
            if channel.backlog_skip:
                channel.backlog_skip = max(channel.backlog_skip - count, 0)

    def set_limits(self, override: bounds.LimitOverride | None) -> None:
        """Replace the topic's own limit settings (None: the flags apply)."""
        self.limit_override = override or None
        self.limits = bounds.effective(self.nsqd.options, self.limit_override)
        self.refresh_bounded()
        if self.limits is not None and self.limits.drop_oldest:
            self._dropped_from_disk(bounds.trim(self))

    def refresh_bounded(self) -> None:
        """After the topic's or a channel's limits changed, or a channel came or went."""
        self.bounded = self.limits is not None or any(
            channel.limits is not None for channel in self.channels.values()
        )

    def pump(self) -> None:
        """Move what was just published to the channels: now, in the caller's task, in the
        usual case (the messages are in memory and nothing waits before them), since waking
        the pump task would cost as much as the move itself and add its latency to every
        message; else wake the pump task."""
        if self.deferred or self.backend.depth or not self.wake.idle or self.pump_once():
            self.wake.set()

    # -- what a layer above adds (seam.py) -------------------------------------------------

    def tasks(self) -> list[tuple[Callable[[], Awaitable[None]], str]]:
        """The topic's tasks and their names, started under nsqd's root nursery."""
        return [(self.pump_task, f"topic-pump:{self.name}")]

    def replication_epoch(self) -> int | None:
        """The epoch nsqd.dat keeps for a replicated topic; None for any other."""
        return None

    def replication_stats(self) -> dict[str, Any] | None:
        """A replicated topic's ``replication`` in /stats; None for any other."""
        return None

    async def admin(self, action: str, channel: str | None = None) -> tuple[int, str | None] | None:
        """An HTTP admin action (``topic_delete``, ``channel_pause``...) that the topic's
        replica set must agree on: its status and message once done there; None when the
        caller acts here alone (any other topic)."""
        return None

    async def take_over(self) -> tuple[int, str | None]:
        """``/topic/takeover`` (docs/replication.md section 8): only a replicated topic can."""
        return 400, "TOPIC_NOT_REPLICATED"

    # -- the pump -------------------------------------------------------------------------

    async def pump_task(self) -> None:
        """Copy messages to every channel whenever some arrive (or a channel appears); end
        when the topic is deleted or closed."""
        while True:
            await self.wake.wait()
            if self.exiting:
                return
            if self.pump_once():
                if self.backend.read_error is not None:
                    # The disk refuses reads: try again later, not in a busy loop.
                    await trio.sleep(READ_RETRY_INTERVAL)
                # More is queued: go on after letting other tasks run.
                self.wake.set()

    def pump_once(self) -> bool:
        """Move queued messages to the channels, a bounded amount per pass; True if more
        remain to move at once."""
        if self.paused or not self.channels or self.exiting or not self.started:
            return False
        channels = list(self.channels.values())
        if self.deferred:
            self._move_deferred(channels)
        more = self._move_memory(channels) if self.memory else False
        if self.backend.depth or self.owes_backlog:
            more = self._move_backlog(channels) or more
        return more

    def _move_memory(self, channels: list[Channel]) -> bool:
        """Move up to PUMP_BATCH messages of the memory queue; True if more remain."""
        memory = self.memory
        if (
            len(channels) == 1
            and len(memory) <= channels[0].memory_room
            and channels[0].limits is None
        ):
            # One channel whose memory queue takes all of the topic's: hand it over whole
            # (a deque extend, or a swap when the channel's is empty), not message by message.
            channels[0].take_memory(self)
            channels[0].dispatch()
            return False
        if len(memory) <= PUMP_BATCH:
            frames = list(memory)
            memory.clear()
        else:
            popleft = memory.popleft
            frames = [popleft() for _ in range(PUMP_BATCH)]
        for channel in channels:
            channel.put_many(frames)
        for channel in channels:
            channel.dispatch()
        return bool(memory)

    # -- the disk backlog -----------------------------------------------------------------

    def _move_backlog(self, channels: list[Channel]) -> bool:
        """One pass of moving the disk queue's backlog to the channels (see "The disk
        backlog" above); True if the next pass should follow at once."""
        backend = self.backend
        if not backend.depth:
            self._backlog_moved(channels)
            return False
        self.owes_backlog = True
        skips = [channel.backlog_skip for channel in channels if channel.backlog_skip]
        paced = False
        if skips:
            # Some channels are not owed the head of the backlog (created or emptied after
            # it was written): move it to the others, at full speed, before they join in.
            targets = [channel for channel in channels if not channel.backlog_skip]
            count = min(PUMP_BATCH, *skips)
        else:
            targets = channels
            count = PUMP_BATCH
            consumed = [c for c in channels if c.clients and not c.paused]
            if consumed:
                paced = True
                count = min(count, max(_wanted(channel) for channel in consumed))
        if not paced:
            for channel in channels:
                channel.refill_below = 0
        if count <= 0:
            return False
        moved = self._move_records(targets, count)
        if skips:
            for channel in channels:
                if channel.backlog_skip:
                    channel.backlog_skip = max(channel.backlog_skip - moved, 0)
        for channel in targets:
            channel.dispatch()
        if not backend.depth:
            self._backlog_moved(channels)
            return False
        # Paced: the next pass waits for a channel to run low (`Channel._take` wakes the
        # pump), unless this one moved less than asked (a record skipped, a bad segment).
        return not paced or moved < count

    def _move_records(self, targets: list[Channel], count: int) -> int:
        """Take up to `count` records from the disk queue and queue them in every target
        channel, decoded once for the channels whose memory queue has room and undecoded
        (`put_records`) for the others; returns the records taken."""
        backend = self.backend
        if backend.deferred_due or backend.held_deferred:
            # Records are checked one by one (DPUB messages saved at shutdown, or held by
            # the deferred log): decode them.
            frames = backend.take(count)
            taken = len(frames)
            if backend.deferred_due:
                frames = self._restore_deferred(frames, targets)
            for channel in targets:
                channel.put_many(frames)
            return taken
        undecoded = [channel.takes_records for channel in targets]
        if targets and not any(undecoded):
            frames = backend.take(count)
            if frames:
                for channel in targets:
                    channel.put_many(frames)
            return len(frames)
        pieces, taken = backend.take_records(count)
        if not taken:
            return 0
        if not all(undecoded):
            frames = frames_from_records(pieces)
        for channel, records in zip(targets, undecoded, strict=True):
            if records:
                channel.put_records(pieces, taken)
            else:
                channel.put_many(frames)
        return taken

    def _backlog_moved(self, channels: list[Channel]) -> None:
        self.owes_backlog = False
        for channel in channels:
            channel.backlog_skip = channel.refill_below = 0

    def owed_backlog(self) -> int:
        """Records at the head of the disk queue that the channels are owed but do not hold
        yet: the ones Go's pump, which copies the backlog at once, would have moved to them.
        A channel created or emptied now does not get them (`Channel.backlog_skip`)."""
        if not self.owes_backlog or not self.channels:
            return 0
        if self.paused:
            # What was written while paused goes to every channel at unpause.
            return min(self.owed_at_pause, self.backend.depth)
        return self.backend.depth

    def _move_deferred(self, channels: list[Channel]) -> None:
        """Hand the DPUB messages to every channel; they leave the topic's deferred log once
        every channel holds them on disk."""
        deferred, self.deferred = self.deferred, []
        everywhere = True
        for channel in channels:
            channel.message_count += len(deferred)
            everywhere &= channel.defer_many(deferred)
        if self.durable and everywhere:
            self.backend.drop_deferred([framed_id(frame) for frame, _ in deferred])

    def _restore_deferred(self, frames: list[bytes], channels: list[Channel]) -> list[bytes]:
        """DPUB messages saved at shutdown before reaching the channels: defer them in every
        channel until their due time; return the others."""
        due_now, later = restore_deferred(self.backend, frames)
        if later:
            now = trio.current_time()
            entries = [(frame, now + delay) for frame, delay in later]
            for channel in channels:
                channel.message_count += len(entries)
                channel.defer_many(entries)
        return due_now

    # -- channels -------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        channel = self.channels.get(name)
        if channel is None:
            ephemeral = is_ephemeral(name)
            backend = self.nsqd.make_backend(f"{self.name}:{name}", ephemeral, channel=True)
            channel = self.channel_class(self, name, backend, ephemeral)
            # The backlog the other channels are owed is not this one's.
            channel.backlog_skip = self.owed_backlog()
            self.channels[name] = channel
            if channel.limits is not None:
                self.bounded = True
            log.info("TOPIC(%s): new channel(%s)", self.name, name)
            if not ephemeral:
                self.nsqd.persist_metadata(self.name)
            self.nsqd.lookup.notify(register(self.name, name))
            self.wake.set()
        return channel

    def delete_channel(self, name: str) -> None:
        channel = self.channels.pop(name, None)
        if channel is None:
            return
        log.info("TOPIC(%s): deleting channel %s", self.name, name)
        channel.delete()
        if self.bounded:
            self.refresh_bounded()
        if not channel.ephemeral:
            self.nsqd.persist_metadata(self.name)
        self.nsqd.lookup.notify(unregister(self.name, name))
        if self.ephemeral and not self.channels and not self.exiting:
            self.nsqd.delete_topic(self.name)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Begin copying messages to the channels (after the lookupd channel query)."""
        self.started = True
        self.wake.set()

    def set_delivery_limits(self, limits: Limits | None) -> None:
        """Its own dead-lettering and TTL settings (None or empty: none); nsqd.dat keeps them."""
        self.delivery_limits = None if limits is None or limits.is_empty() else limits
        for channel in self.channels.values():
            channel.refresh_screen()
        if not self.ephemeral:
            self.nsqd.persist_metadata(self.name)

    def pause(self) -> None:
        """Stop copying messages to the channels; they wait in the topic."""
        self.owed_at_pause = self.owed_backlog()
        self.paused = True
        self.nsqd.persist_metadata(self.name)

    def unpause(self) -> None:
        self.paused = False
        self.nsqd.persist_metadata(self.name)
        self.wake.set()

    def empty(self) -> None:
        """Drop the messages waiting in the topic (HTTP /topic/empty); channels keep theirs."""
        self.memory.clear()
        self.backend.empty()

    def close(self) -> int:
        """Shutdown: flush channels and the topic's own queue to their backends; how many
        messages were lost (the disk refused them)."""
        self.exiting = True
        log.info("TOPIC(%s): closing", self.name)
        self._pump_closed()
        lost = sum(channel.close() for channel in self.channels.values())
        frames = list(self.memory) + [frame for frame, _ in self.deferred]
        if frames:
            log.info("TOPIC(%s): flushing %d memory messages to backend", self.name, len(frames))
        for frame, due in self.deferred:
            self.backend.deferred_due[framed_id(frame)] = to_wall_ns(due)
        self.memory.clear()
        self.deferred.clear()
        return lost + save_at_exit(self.backend, frames, f"TOPIC({self.name})")

    def delete(self) -> None:
        self.exiting = True
        self._pump_closed()
        for name in list(self.channels):
            self.channels.pop(name).delete()
            self.nsqd.lookup.notify(unregister(self.name, name))
        self.memory.clear()
        self.deferred.clear()
        self.backend.empty()  # as Go's: its queue is emptied, then deleted
        self.backend.delete()

    def _pump_closed(self) -> None:
        """Go's topic waits for its messagePump goroutine to end: here the pump moves
        nothing once the topic is exiting (its task ends when next woken)."""
        log.info("TOPIC(%s): closing ... messagePump", self.name)


def _wanted(channel: Channel) -> int:
    """How many messages of the disk backlog a consumed channel should get now: its queue is
    kept between `lead` and twice that, `lead` being twice its subscribers' RDY (at least
    PUMP_LEAD_MIN; at most half a PUMP_BATCH, or half its memory queue if that is larger than
    twice PUMP_LEAD_MIN, so that what they read is decoded once, into memory); below it,
    `Channel._take` wakes the pump."""
    lead = max(2 * sum(client.rdy for client in channel.clients), PUMP_LEAD_MIN)
    limit = channel.mem_limit if channel.mem_limit >= 2 * PUMP_LEAD_MIN else PUMP_BATCH
    lead = min(lead, limit // 2)
    channel.refill_below = lead
    queued = channel.depth
    return 2 * lead - queued if queued < lead else 0
