"""FINs sent to the members in batches (the spec's replicate_fins): each finished message is
recorded in the log's FIN file and queued for the members, sent at the next tick or once a
batch is full.
"""

from __future__ import annotations

import logging

from . import wire
from .channel import ReplicatedChannel
from .roles import PRIMARY
from .stream import Stream

log = logging.getLogger("trionsq.nsqd")


class FinBatches(Stream):
    """FinBatches: see the module's docstring."""

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
        if self.trace is not None:
            self.trace.record(
                self, "fins_sent", count=sum(map(len, fins.values())), to=[*self.members]
            )
        for node_id in list(self.members):
            peer = self.repl.peer_by_id(node_id)
            if peer is not None:
                peer.send(frame)
