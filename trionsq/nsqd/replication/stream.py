"""Publish, replicate, acknowledge (docs/replication.md section 6; the spec's actions of those
names): the messages a primary accepted written to the log and streamed to the members of its
epoch, their acknowledgements counted, and the publishers released once a quorum has them
(`AckQueue`), or failed.
"""

from __future__ import annotations

import logging

import trio

from ..acks import Waiter
from . import wire
from .batching import FLUSH_AT
from .catchup import CATCH_UP_BASE
from .log import fsync_handles
from .replica_state import Member, ReplicaState
from .roles import PRIMARY

log = logging.getLogger("trionsq.nsqd")


class Stream(ReplicaState):
    """Stream: see the module's docstring."""

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
            short = len(self.members) < self.repl.quorum - 1
            if short:
                self.under_replicated += count
            self._stream(written)
            if short:
                # Too few members for the quorum to wait on theirs: alone (a takeover) or
                # degraded, this write may be what the publishers wait for.
                self._release_waiters()

    def _disk_failed(self, what: str, err: OSError) -> None:
        """The log's disk refused: every waiting PUB fails (E_PUB_FAILED), nsqd is unhealthy."""
        reason = f"failed to {what} replication log - {err.strerror or err}"
        log.error("REPLICATION(%s): %s", self.name, reason)
        self.repl.nsqd.health = f"NOK - {reason}"
        self._fail_waiters()

    def _stream(self, encoded: bytes) -> None:
        """Send records (encoded as the log holds them) to every member."""
        if self.trace is not None:
            self.trace.record(self, "wrote", sender=self.node_id, total=self.accepted)
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
        # What this node has written itself (not what waits in the outbox for the write).
        total = self.accepted - self.outbox_count
        if need > 0:
            acks = [member.acked for member in self.members.values()]
            if len(acks) >= need:
                # The need-th highest acknowledgement (the highest: a set of 2 or 3).
                total = max(acks) if need == 1 else sorted(acks, reverse=True)[need - 1]
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
            total = self.quorum_total()
            if self.trace is not None:
                self.trace.acknowledged(self, total)
            self.waiters.release(total)

    def _fail_waiters(self) -> None:
        self.waiters.fail_all()

    def wait_for(self, target: int, waiter: Waiter) -> bool:
        """Register `waiter` for the messages accepted up to `target` being on a quorum
        (failed if the primary steps down, or --replication-ack-timeout passes). False:
        they already are, and the waiter is not registered."""
        if self.role == PRIMARY and self.quorum_total() >= target:
            if self.trace is not None:
                self.trace.acknowledged(self, target)
            return False
        deadline = trio.current_time() + self.repl.nsqd.options.replication_ack_timeout
        self.waiters.add(target, deadline, waiter)
        return True
