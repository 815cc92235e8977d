"""The topic's channels and admin state kept the same on every member (docs/replication.md
section 10): channels created and deleted, paused states and deletions sent to the members,
and a member's state merged (the newer version wins).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...protocol.lookup_v1 import register
from ...protocol.names import is_ephemeral
from . import wire
from .fin_batches import FinBatches
from .roles import CANDIDATE, PRIMARY

if TYPE_CHECKING:
    from .peer import Peer

log = logging.getLogger("trionsq.nsqd")


class AdminSync(FinBatches):
    """AdminSync: see the module's docstring."""

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
        if self.trace is not None:
            self.trace.record(self, "deleted")

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
