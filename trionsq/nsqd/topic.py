"""A topic: message IDs, its memory queue and backend, its channels, and its message pump.

PUB/MPUB/DPUB put messages synchronously (`put_bodies`): each becomes a framed `bytes` with
a fresh ID and is queued in memory (up to --mem-queue-size) or in the backend. The pump task,
woken once per put batch, copies queued messages to every channel, then lets each channel
dispatch to its subscribers. With no channel (or while paused) messages wait in the topic and
go to the first channel created.

DPUB messages wait in `deferred` until the pump hands them to the channels, which hold them
until their due time. A durable topic (--mem-queue-size=0, or --sync-ack) writes them to its
disk queue's deferred log before DPUB is answered, and lets them go from there only once every
channel holds them on disk.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING

import trio

from ..protocol.message import FRAMED_BODY_OFFSET, encode_new_frames, framed_id
from ..protocol.names import is_ephemeral
from .backend import (
    Backend,
    from_wall_ns,
    queue_with_overflow,
    restore_deferred,
    save_at_exit,
    to_wall_ns,
)
from .channel import Channel
from .lookup import register, unregister
from .wakeup import Wakeup

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")

#: Messages moved to channels per pump pass before yielding to other tasks.
PUMP_BATCH = 20_000


class TopicExiting(Exception):
    """The topic is being deleted or the daemon is shutting down."""


class Topic:
    __slots__ = (
        "backend",
        "channels",
        "deferred",
        "durable",
        "ephemeral",
        "exiting",
        "mem_limit",
        "memory",
        "message_bytes",
        "message_count",
        "name",
        "nsqd",
        "paused",
        "started",
        "wake",
    )

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
        # False while nsqd asks the lookupds which channels to create first (reference §2.1).
        self.started = True
        self.exiting = False
        self.message_count = 0
        self.message_bytes = 0
        self.wake = Wakeup()

    @property
    def depth(self) -> int:
        return len(self.memory) + self.backend.depth

    def put_bodies(self, bodies: list[bytes], defer: float = 0.0) -> None:
        """Accept published message bodies (all or none). Raises TopicExiting, or
        BackendError when the disk refuses them."""
        if self.exiting:
            raise TopicExiting("exiting")
        ids = self.nsqd.guid.next_ids(len(bodies))
        self.put_frames(encode_new_frames(ids, time.time_ns(), bodies), defer)

    def put_frames(self, frames: list[bytes], defer: float = 0.0) -> None:
        """Accept newly published messages, already framed with their IDs from nsqd's
        generator (the TCP parser frames them as it reads them): all or none. Raises
        TopicExiting, or BackendError when the disk refuses them."""
        if self.exiting:
            raise TopicExiting("exiting")
        if defer > 0:
            due = trio.current_time() + defer
            if self.durable:
                self.backend.hold_deferred([(frame, to_wall_ns(due)) for frame in frames])
            self.deferred.extend((frame, due) for frame in frames)
        else:
            queue_with_overflow(self.memory, self.mem_limit, self.backend, frames)  # may raise
        self.message_count += len(frames)
        self.message_bytes += sum(map(len, frames)) - FRAMED_BODY_OFFSET * len(frames)
        if self.channels:  # with none, the pump has nothing to do (a new channel wakes it)
            self.wake.set()

    # -- the pump -------------------------------------------------------------------------

    async def pump(self) -> None:
        """Copy messages to every channel whenever some arrive (or a channel appears); end
        when the topic is deleted or closed."""
        while True:
            await self.wake.wait()
            if self.exiting:
                return
            if self.pump_once():
                # More is queued: go on after letting other tasks run.
                self.wake.set()

    def pump_once(self) -> bool:
        """Move up to PUMP_BATCH messages to the channels; True if more remain."""
        if self.paused or not self.channels or self.exiting or not self.started:
            return False
        channels = list(self.channels.values())
        if self.deferred:
            self._move_deferred(channels)
        memory = self.memory
        backend = self.backend
        batch = PUMP_BATCH
        if not memory and backend.depth and not backend.deferred_due and not backend.held_deferred:
            room = min(channel.memory_room for channel in channels)
            if room <= 0 and all(channel.takes_records for channel in channels):
                # Disk to disk: move the records without decoding them.
                pieces, count = backend.take_records(PUMP_BATCH)
                for channel in channels:
                    channel.put_records(pieces, count)
                for channel in channels:
                    channel.dispatch()
                return backend.depth > 0
            if room > 0:
                # Decode only what the channels' memory queues take; the rest moves
                # undecoded on the next pass.
                batch = min(room, PUMP_BATCH)
        if len(channels) == 1 and memory and len(memory) <= channels[0].memory_room:
            # One channel whose memory queue takes all of the topic's: hand it over whole
            # (a deque extend, or a swap when the channel's is empty), not message by message.
            channels[0].take_memory(self)
            channels[0].dispatch()
            return self.backend.depth > 0
        if len(memory) <= batch:
            frames = list(memory)
            memory.clear()
            if len(frames) < batch and self.backend.depth:
                taken = self.backend.take(batch - len(frames))
                if self.backend.deferred_due:
                    taken = self._restore_deferred(taken, channels)
                frames += taken
        else:
            popleft = memory.popleft
            frames = [popleft() for _ in range(PUMP_BATCH)]
        if frames:
            for channel in channels:
                channel.put_many(frames)
            for channel in channels:
                channel.dispatch()
        return bool(memory) or self.backend.depth > 0

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
            channel = Channel(self, name, backend, ephemeral)
            self.channels[name] = channel
            log.info("TOPIC(%s): new channel(%s)", self.name, name)
            if not ephemeral:
                self.nsqd.persist_metadata()
            self.nsqd.lookup.notify(register(self.name, name))
            self.wake.set()
        return channel

    def delete_channel(self, name: str) -> None:
        channel = self.channels.pop(name, None)
        if channel is None:
            return
        log.info("TOPIC(%s): deleting channel %s", self.name, name)
        channel.delete()
        if not channel.ephemeral:
            self.nsqd.persist_metadata()
        self.nsqd.lookup.notify(unregister(self.name, name))
        if self.ephemeral and not self.channels and not self.exiting:
            self.nsqd.delete_topic(self.name)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Begin copying messages to the channels (after the lookupd channel query)."""
        self.started = True
        self.wake.set()

    def pause(self) -> None:
        """Stop copying messages to the channels; they wait in the topic."""
        self.paused = True
        self.nsqd.persist_metadata()

    def unpause(self) -> None:
        self.paused = False
        self.nsqd.persist_metadata()
        self.wake.set()

    def empty(self) -> None:
        """Drop the messages waiting in the topic (HTTP /topic/empty); channels keep theirs."""
        self.memory.clear()
        self.backend.empty()

    def close(self) -> None:
        """Shutdown: flush channels and the topic's own queue to their backends."""
        self.exiting = True
        for channel in self.channels.values():
            channel.close()
        frames = list(self.memory) + [frame for frame, _ in self.deferred]
        for frame, due in self.deferred:
            self.backend.deferred_due[framed_id(frame)] = to_wall_ns(due)
        self.memory.clear()
        self.deferred.clear()
        self.backend.clear_deferred()
        save_at_exit(self.backend, frames, f"TOPIC({self.name})")

    def delete(self) -> None:
        self.exiting = True
        for name in list(self.channels):
            self.channels.pop(name).delete()
            self.nsqd.lookup.notify(unregister(self.name, name))
        self.memory.clear()
        self.deferred.clear()
        self.backend.delete()
