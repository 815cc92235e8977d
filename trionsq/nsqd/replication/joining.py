"""A member joining the primary's epoch (the spec's join, here solicited by the primary: SYNC):
its state merged, then what it lacks sent by a paced catch-up (catchup.py), then the stream.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from . import wire
from .catchup import CatchUp, catch_up
from .election import Election
from .replica_state import Member
from .roles import PRIMARY, epoch_text

if TYPE_CHECKING:
    from .peer import Peer

log = logging.getLogger("trionsq.nsqd")


class Joining(Election):
    """Joining: see the module's docstring."""

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
        if self.trace is not None:
            self.trace.record(self, "join", member=peer.node_id, pos=self.accepted)
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
