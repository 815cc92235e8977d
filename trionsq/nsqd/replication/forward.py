"""Publishes to a replica, forwarded to the topic's primary (docs/replication.md sections 5
and 13): a replicated topic's `Forwarder` on a member that does not lead it, and the
primary's side, `answer_forwarded`.

A replica does not write what its publishers send: it forwards the messages (their IDs and
due times as its parser made them) to the primary in one ``PUB_FORWARD`` per scheduler pass
and topic (`ForwardBatch`: every connection that published in the pass), and their answers
wait for the primary's ``PUB_FORWARD_REPLY``, sent once a quorum has the messages, exactly as
a PUB's OK on the primary. A publisher's read batch waits for each batch its messages went
into (a key of `ClientV2.owed`, as a topic that publishes here is), so a failed batch fails
only its own publishers (fatal ``E_PUB_FAILED``, HTTP 503; they publish again).

While no primary is known (an election), or its connection is down, a sealed batch waits, up
to --replication-ack-timeout after it was opened; if this node takes office meanwhile, it
publishes the batch itself. A node that no longer leads refuses a batch without writing it:
the batch waits for the next primary the same way. A batch sent fails when its connection
drops, when another node is heard to lead, when the primary fails it (no quorum in time, its
disk), or --replication-ack-timeout (plus `REPLY_GRACE`) after it was sent with no answer.
The primary may have written a failed batch: its messages may be delivered although their
publisher saw a failure, as after any failed PUB in NSQ.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..acks import Waiter, wait_durable
from ..backend import BackendError, from_wall_ns
from ..bounds import QueueFull
from ..topic import Topic, TopicExiting
from . import wire
from .batching import FLUSH_AT
from .log import decode_records, encode_frames
from .roles import PRIMARY

if TYPE_CHECKING:
    from .node import Replication
    from .peer import Answer, Peer
    from .stream import Stream
    from .topic import TopicReplica

log = logging.getLogger("trionsq.nsqd")

#: How long after the primary's own --replication-ack-timeout a forwarded batch's answer may
#: still come (its round trip, the primary's 50 ms expiry tick) before the batch fails here.
REPLY_GRACE = 1.0
#: A batch holding this many bytes of messages is sent at once (its frame stays far below
#: replication_wire.MAX_FRAME whatever --max-msg-size and --max-body-size allow).
SEAL_BYTES = 1024 * 1024

Send = Callable[[bytes], Awaitable[None]]


class ForwardBatch:
    """The messages one scheduler pass accepted for the topic here, and the answers that
    wait for them (`wait_for`: a key of `ClientV2.owed`)."""

    __slots__ = (
        "answer_by",
        "count",
        "entries",
        "forwarder",
        "ok",
        "refused_by",
        "rid",
        "size",
        "target",
        "to",
        "wait_until",
        "waiters",
    )

    def __init__(self, forwarder: Forwarder, wait_until: float) -> None:
        self.forwarder = forwarder
        self.entries: list[tuple[int, list[bytes]]] = []  # (due time, frames)
        self.count = 0
        self.size = 0
        self.waiters: list[Waiter] = []
        #: Unsent by then (no primary): it fails.
        self.wait_until = wait_until
        #: Sent: the request ID, the node it went to, when it fails without an answer.
        self.rid = 0
        self.to: int | None = None
        self.answer_by = 0.0
        #: A node that refused it (it no longer leads): not sent there again.
        self.refused_by: int | None = None
        #: Published by this node after all (it took office): the stream position it waits for.
        self.target: int | None = None
        #: The answer, once there is one.
        self.ok: bool | None = None

    def wait_for(self, target: int, waiter: Waiter) -> bool:
        """Register `waiter` for the primary's answer (`target` is not used: a batch is one
        wait). False: the batch already succeeded, and the waiter is not registered."""
        if self.ok is not None:
            if self.ok:
                return False
            waiter.done(False)
            return True
        if self.target is not None:
            return self.forwarder.replica.wait_for(self.target, waiter)
        self.waiters.append(waiter)
        return True

    def finish(self, ok: bool) -> None:
        self.ok = ok
        self.entries = []
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            waiter.done(ok)


class Forwarder:
    """One replicated topic's forwarded batches on this node."""

    def __init__(self, replica: Stream) -> None:
        self.replica = replica
        #: Accepting messages in this scheduler pass.
        self.open: ForwardBatch | None = None
        #: Sealed, waiting for a primary to send them to.
        self.waiting: list[ForwardBatch] = []
        #: Sent, waiting for the answer.
        self.sent: set[ForwardBatch] = set()
        #: Messages forwarded and acknowledged by the primary / whose forward failed (/stats;
        #: what this node published itself once it took office counts in its topic's
        #: message_count instead).
        self.forwarded = 0
        self.failed = 0

    def add(self, frames: list[bytes], due: int) -> ForwardBatch:
        """Accept published messages for the primary; returns the batch their answers wait
        for. Sent at the end of a batch of scheduler passes (`seal`, `TopicReplica.end_of_batch`),
        or at once from `FLUSH_AT` messages or `SEAL_BYTES` on (an MPUB's worth)."""
        batch = self.open
        if batch is None:
            timeout = self.replica.repl.nsqd.options.replication_ack_timeout
            batch = self.open = ForwardBatch(self, trio.current_time() + timeout)
        batch.entries.append((due, frames))
        batch.count += len(frames)
        batch.size += sum(map(len, frames))
        if batch.count >= FLUSH_AT or batch.size >= SEAL_BYTES:
            self.seal()
        else:
            self.replica.repl.batching.schedule(self.replica)
        return batch

    def seal(self) -> None:
        batch = self.open
        if batch is None:
            return
        self.open = None
        self.waiting.append(batch)
        self.send_waiting()

    def send_waiting(self) -> None:
        """Send the sealed batches to the primary (publish them here if this node leads)."""
        if not self.waiting:
            return
        replica = self.replica
        if replica.role == PRIMARY:
            self._publish_here()
            return
        primary = replica.primary
        if primary is None or primary == replica.node_id:
            return  # an election: they wait for its outcome (until their deadline)
        peer = replica.repl.peer_by_id(primary)
        if peer is None:
            return
        waiting, self.waiting = self.waiting, []
        for index, batch in enumerate(waiting):
            if batch.refused_by == primary:
                self.waiting.append(batch)  # until another node leads
            elif not self._send(peer, batch):
                self.waiting += waiting[index:]
                return

    def _send(self, peer: Peer, batch: ForwardBatch) -> bool:
        blob = b"".join(encode_frames(frames, due) for due, frames in batch.entries)
        header = {"topic": self.replica.name, "count": batch.count}

        def answered(answer: Answer | None) -> None:
            self._answered(batch, answer)

        rid = peer.request(wire.PUB_FORWARD, header, blob, answered)
        if rid is None:
            return False
        options = self.replica.repl.nsqd.options
        batch.rid = rid
        batch.to = peer.node_id
        batch.answer_by = trio.current_time() + options.replication_ack_timeout + REPLY_GRACE
        self.sent.add(batch)
        return True

    def _answered(self, batch: ForwardBatch, answer: Answer | None) -> None:
        if batch not in self.sent:
            return  # failed meanwhile (timed out, or another node leads)
        self.sent.discard(batch)
        if answer is None:
            self._finish(batch, False, "the connection to the primary dropped")
            return
        kind, header, _ = answer
        if kind == wire.PUB_FORWARD_REPLY and header.get("ok") is True:
            self._finish(batch, True, "")
        elif kind == wire.PUB_FORWARD_REPLY and header.get("refused") is True:
            # It no longer leads, and wrote nothing: the next primary gets the batch (until
            # its deadline, counted from when it was opened).
            batch.refused_by, batch.to = batch.to, None
            self.waiting.append(batch)
        else:
            self._finish(batch, False, str(header.get("error") or "failed"))

    def _finish(self, batch: ForwardBatch, ok: bool, why: str) -> None:
        if ok:
            self.forwarded += batch.count
        else:
            self.failed += batch.count
            log.warning(
                "REPLICATION(%s): %d forwarded messages failed - %s",
                self.replica.name,
                batch.count,
                why,
            )
        batch.finish(ok)

    def _publish_here(self) -> None:
        """This node took office: it publishes what waited for a primary itself."""
        replica = self.replica
        waiting, self.waiting = self.waiting, []
        for batch in waiting:
            try:
                for due, frames in batch.entries:
                    put_here(replica, frames, due)
            except (TopicExiting, BackendError, QueueFull) as err:
                self._finish(batch, False, str(err))
                continue
            batch.target = replica.accepted
            batch.entries = []
            waiters, batch.waiters = batch.waiters, []
            for waiter in waiters:
                if not replica.wait_for(batch.target, waiter):
                    waiter.done(True)

    def primary_changed(self) -> None:
        """Another node is heard to lead, or this one took office: what was sent to a
        former primary fails (its publishers publish again), what waited is sent (or
        published here)."""
        primary = self.replica.primary
        for batch in [b for b in self.sent if b.to != primary]:
            self._drop_sent(batch, "the primary changed")
        for batch in self.waiting:
            batch.refused_by = None  # (a refusal was about a former term)
        self.send_waiting()

    def expire(self, now: float) -> None:
        """Every 50 ms: fail what is past its deadline; send what waited, if it can now."""
        if self.waiting:
            for batch in [b for b in self.waiting if b.wait_until <= now]:
                self.waiting.remove(batch)
                self._finish(batch, False, "no primary within --replication-ack-timeout")
            self.send_waiting()
        if self.sent:
            for batch in [b for b in self.sent if b.answer_by <= now]:
                self._drop_sent(batch, "no answer from the primary in time")

    def _drop_sent(self, batch: ForwardBatch, why: str) -> None:
        self.sent.discard(batch)
        peer = self.replica.repl.peer_by_id(batch.to)
        if peer is not None:
            peer.forget(batch.rid)
        self._finish(batch, False, why)

    def close(self) -> None:
        """The topic closes: every batch fails."""
        self.seal()
        for batch in self.waiting:
            self._finish(batch, False, "the topic is closing")
        self.waiting = []
        for batch in list(self.sent):
            self._drop_sent(batch, "the topic is closing")

    def stats(self) -> dict[str, Any]:
        return {"forwarded_messages": self.forwarded, "forward_failed_messages": self.failed}


def put_here(replica: Stream, frames: list[bytes], due: int) -> None:
    """Publish messages made elsewhere (IDs, timestamps and due time kept) as the primary:
    to the log and the stream, and to the channels. Raises as `Topic.put_frames`."""
    topic = replica.topic
    if topic.exiting:
        raise TopicExiting("exiting")
    replica.publish(frames, due)
    defer = from_wall_ns(due) - trio.current_time() if due else 0.0
    Topic.put_frames(topic, frames, max(defer, 0.0))


# -- the primary's side ---------------------------------------------------------------------


def answer_forwarded(
    repl: Replication, header: dict[str, Any], blob: bytes, send: Send
) -> list[bytes]:
    """A replica's PUB_FORWARD: publish the messages as this node's own, and answer once a
    quorum has them (`_answer_when_replicated`, its own task: the connection serves the
    peer's other requests meanwhile). Returns an immediate answer (a refusal), if any."""
    name = header.get("topic")
    rid = header.get("rid")
    if not isinstance(name, str):
        raise wire.WireError("PUB_FORWARD without a topic")
    try:
        records = decode_records(blob)
    except ValueError as err:
        raise wire.WireError(f"bad PUB_FORWARD - {err}") from None
    replica = repl.replica_of(name, create=False)
    if replica is None or replica.role != PRIMARY:
        # Nothing written: the replica may send the batch to the next primary.
        why = f"not the primary of replicated topic {name}"
        if replica is not None:
            why = replica.not_primary()
        return [_reply(name, rid, False, why, refused=True)]
    try:
        for due, group in itertools.groupby(records, key=lambda record: record[0]):
            put_here(replica, [frame for _, frame in group], due)
    except (TopicExiting, BackendError, QueueFull) as err:
        return [_reply(name, rid, False, f"failed - {err}")]
    repl.spawn(_answer_when_replicated, repl, replica, replica.accepted, name, rid, send)
    return []


def _reply(name: str, rid: Any, ok: bool, error: str = "", refused: bool = False) -> bytes:
    header: dict[str, Any] = {"topic": name, "rid": rid, "ok": ok}
    if error:
        header["error"] = error
    if refused:
        header["refused"] = True
    return wire.encode(wire.PUB_FORWARD_REPLY, header)


async def _answer_when_replicated(
    repl: Replication, replica: TopicReplica, target: int, name: str, rid: Any, send: Send
) -> None:
    ok = await wait_durable(repl.nsqd, {replica: target})
    error = "" if ok else "not written by a quorum of replicas in time (or fsync failed)"
    try:
        await send(_reply(name, rid, ok, error))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the replica's connection dropped: it fails the batch itself
