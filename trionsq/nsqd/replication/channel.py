"""A replicated topic's channel (docs/replication.md section 13): a `Channel` that does not
deliver again what the replica set has finished elsewhere since the message was queued here
(FINs merged from a member that joins: `skip_finished`), that records the messages it
moves to a dead-letter topic, or drops at their TTL, as finished for the replicas, and that
delivers nothing while its primary's lease has run out (checked before each batch: a primary
resumed after a stop longer than the lease does not deliver before it steps down).

Only a replicated topic's channels are of this class (`ReplicatedTopic.channel_class`): an
ordinary channel's delivery path is unchanged. Its own costs one test per batch taken while
nothing is to be skipped.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import trio

from ...protocol.message import framed_id
from ..backend import Backend
from ..channel import SCREEN_BATCH, Channel

if TYPE_CHECKING:
    from ..topic import Topic
    from .topic import TopicReplica


class ReplicatedChannel(Channel):
    __slots__ = ("replica", "skip")

    def __init__(self, topic: Topic, name: str, backend: Backend, ephemeral: bool) -> None:
        super().__init__(topic, name, backend, ephemeral)
        #: Its topic's replica (None for an ephemeral channel, which is not replicated).
        self.replica: TopicReplica | None = None
        #: IDs finished elsewhere whose message may still come to be delivered here: on disk,
        #: in flight (back if it times out or is requeued), or not yet moved from the topic.
        self.skip: set[bytes] = set()

    def skip_finished(self, ids: set[bytes]) -> None:
        """Messages finished elsewhere are not delivered by this channel again: those in its
        memory queue or deferred leave now, the others are left out when taken (`skip`)."""
        pending = set(ids)
        if self.memory:
            found = [framed_id(f) for f in self.memory if framed_id(f) in pending]
            if found:
                kept = [f for f in self.memory if framed_id(f) not in pending]
                self.memory.clear()
                self.memory.extend(kept)
                self._forget(found)
                pending.difference_update(found)
        if self.deferred:
            found = [framed_id(e[2]) for e in self.deferred if framed_id(e[2]) in pending]
            if found:
                self.deferred[:] = [e for e in self.deferred if framed_id(e[2]) not in pending]
                heapq.heapify(self.deferred)
                if self.durable:
                    self.backend.drop_deferred(found)
                self._forget(found)
                pending.difference_update(found)
        self.skip |= pending

    def _forget(self, ids: list[bytes]) -> None:
        backend = self.backend
        if backend.owed:
            for message_id in ids:
                backend.release(message_id)

    def _take_queued(self, count: int) -> list[bytes]:
        replica = self.replica
        if replica is not None and not replica.may_deliver():
            return []  # its lease ran out: it steps down at its topic's next tick
        frames = super()._take_queued(count)
        if self.skip and frames:
            frames = self._without_skipped(frames, count)
        return frames

    def _without_skipped(self, frames: list[bytes], count: int) -> list[bytes]:
        """The frames taken less those to skip, topped up to `count` from the queue (at most
        SCREEN_BATCH looked at per call, as a screen does: the queue scan goes on)."""
        skip = self.skip
        kept: list[bytes] = []
        skipped: list[bytes] = []
        seen = 0
        while frames:
            seen += len(frames)
            for frame in frames:
                message_id = framed_id(frame)
                if message_id in skip:
                    skip.discard(message_id)
                    skipped.append(message_id)
                else:
                    kept.append(frame)
            missing = count - len(kept)
            if missing <= 0 or not (self.memory or self.backend.depth):
                break
            if seen >= SCREEN_BATCH:
                self.rescreen = True
                self.nsqd.scan_notify(trio.current_time())
                break
            frames = super()._take_queued(missing)
            if not skip:
                kept += frames
                break
        self._forget(skipped)
        return kept

    def _release_dropped(self, frames: list[bytes]) -> None:
        """Dead-lettered or expired: finished for this channel on every member (else the
        next primary would deliver them again)."""
        super()._release_dropped(frames)
        if self.replica is not None and frames:
            self.replica.finished_many(self.name, [framed_id(f) for f in frames])

    def holds_nothing(self) -> bool:
        """Nothing queued, deferred or in flight here, nor waiting in the topic."""
        topic = self.topic
        return not (
            self.memory
            or self.backend.depth
            or self.deferred
            or self.in_flight_count
            or topic.memory
            or topic.backend.depth
            or topic.deferred
        )

    def empty(self) -> None:
        super().empty()
        self.skip.clear()
