"""What the admin actions left on a replicated topic, as every member keeps it
(docs/replication.md sections 6 and 13):

- `AdminState`: whether the topic and each channel is paused, and which channels were
  deleted. Each entry carries the version ``(epoch, sequence)`` the primary of that epoch gave
  it, so that two members' states merge by keeping the newer entry of each (as their messages
  and FIN sets merge by union): a candidate adopts what a promiser recorded, a joining member
  what the primary holds. Kept in ``<topic>.replication.admin`` (JSON, written atomically),
  which exists only once an admin action touched the topic. nsqd.dat keeps the paused flags
  as for any topic; this file is what members compare.
- `Tombstones`: the replicated topics deleted, each with its floor, the lowest epoch a later
  topic of that name can have: a copy in a lower epoch is of the deleted topic (a member that
  was away when it was deleted) and is deleted when it meets a member that knows
  (``replication.deleted`` in the data path, JSON).

Emptied messages are not here: they are finished IDs, in the log's FIN files and its emptied
set (log.py).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...diskqueue.files import write_file_atomically
from ...diskqueue.fs import LOCAL

if TYPE_CHECKING:
    from ..topic import Topic
    from .log import ReplicationLog

log = logging.getLogger("trionsq.nsqd")

ADMIN_SUFFIX = ".replication.admin"
TOMBSTONES_FILE = "replication.deleted"

Version = tuple[int, int]
NO_VERSION: Version = (0, 0)


@dataclass
class Entry:
    """The topic's (``exists`` always True) or one channel's admin state, and its version."""

    version: Version
    paused: bool = False
    exists: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"v": list(self.version), "paused": self.paused, "exists": self.exists}


def _entry(raw: Any) -> Entry:
    """An entry from JSON; raises ValueError on a malformed one."""
    if not isinstance(raw, dict):
        raise ValueError("admin entry is not an object")
    version = raw.get("v")
    if (
        not isinstance(version, list)
        or len(version) != 2
        or not all(isinstance(x, int) and x >= 0 for x in version)
    ):
        raise ValueError("bad admin entry version")
    paused, exists = raw.get("paused", False), raw.get("exists", True)
    if not isinstance(paused, bool) or not isinstance(exists, bool):
        raise ValueError("bad admin entry")
    return Entry((version[0], version[1]), paused, exists)


def parse_version(raw: Any) -> Version | None:
    """A version from a frame's header (None if absent or malformed)."""
    if isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, int) for x in raw):
        return (raw[0], raw[1])
    return None


class AdminState:
    """One replicated topic's admin entries on this member."""

    def __init__(self, data_path: str, topic: str) -> None:
        self.path = os.path.join(data_path, topic + ADMIN_SUFFIX)
        self.topic: Entry | None = None
        self.channels: dict[str, Entry] = {}
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read())
            self._merge_json(raw)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as err:
            log.error("REPLICATION(%s): ignoring unreadable %s - %s", topic, self.path, err)

    # -- reading ----------------------------------------------------------------------------

    def deleted(self, channel: str) -> bool:
        entry = self.channels.get(channel)
        return entry is not None and not entry.exists

    def channel_version(self, channel: str) -> Version:
        entry = self.channels.get(channel)
        return NO_VERSION if entry is None else entry.version

    def next_version(self, epoch: int) -> Version:
        """A version above every entry's, for a change the primary of `epoch` makes (only
        that primary makes versions in its epoch)."""
        entries = [*self.channels.values(), *([self.topic] if self.topic else [])]
        seq = max((e.version[1] for e in entries if e.version[0] == epoch), default=0)
        return (epoch, seq + 1)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"channels": {n: e.to_json() for n, e in self.channels.items()}}
        if self.topic is not None:
            out["topic"] = self.topic.to_json()
        return out

    # -- changing ---------------------------------------------------------------------------

    def set_topic(self, paused: bool, version: Version) -> bool:
        """Record the topic's paused state at `version`; False (nothing changes) if the
        entry is as new or newer."""
        if self.topic is not None and self.topic.version >= version:
            return False
        self.topic = Entry(version, paused)
        return True

    def set_channel(self, channel: str, version: Version, *, exists: bool, paused: bool) -> bool:
        """Record a channel's state at `version`; False if its entry is as new or newer."""
        entry = self.channels.get(channel)
        if entry is not None and entry.version >= version:
            return False
        self.channels[channel] = Entry(version, paused, exists)
        return True

    def forget_channel(self, channel: str) -> None:
        self.channels.pop(channel, None)

    def merge(self, raw: Any) -> bool:
        """Adopt the newer entries of another member's state (`to_json`); True if any
        changed. Raises ValueError on a malformed state (nothing is adopted)."""
        if raw is None:
            return False
        return self._merge_json(raw)

    def _merge_json(self, raw: Any) -> bool:
        if not isinstance(raw, dict) or not isinstance(raw.get("channels", {}), dict):
            raise ValueError("bad admin state")
        topic = _entry(raw["topic"]) if raw.get("topic") is not None else None
        channels = {str(n): _entry(e) for n, e in raw.get("channels", {}).items()}
        changed = False
        if topic is not None:
            changed |= self.set_topic(topic.paused, topic.version)
        for name, entry in channels.items():
            changed |= self.set_channel(
                name, entry.version, exists=entry.exists, paused=entry.paused
            )
        return changed

    def save(self) -> None:
        """Write the file (atomically, fsynced) before the change counts."""
        data = json.dumps(self.to_json(), separators=(",", ":")).encode()
        write_file_atomically(LOCAL, self.path, data, sync_dir=True)

    def delete(self) -> None:
        self.topic = None
        self.channels.clear()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- applying ---------------------------------------------------------------------------

    def apply(self, topic: Topic, replication_log: ReplicationLog) -> None:
        """Make the topic's objects what the entries say: deleted channels gone (their files
        too), the others present with their paused state, the topic paused or not."""
        for name, entry in list(self.channels.items()):
            if not entry.exists:
                if name in topic.channels:
                    topic.delete_channel(name)
                replication_log.delete_channel(name)
                continue
            channel = topic.channels.get(name) or topic.get_channel(name)
            if channel.paused != entry.paused:
                if entry.paused:
                    channel.pause()
                else:
                    channel.unpause()
        if self.topic is not None and topic.paused != self.topic.paused:
            if self.topic.paused:
                topic.pause()
            else:
                topic.unpause()


class Tombstones:
    """The deleted replicated topics of this member, and their floors."""

    def __init__(self, data_path: str) -> None:
        self.path = os.path.join(data_path, TOMBSTONES_FILE)
        self.floors: dict[str, int] = {}
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read())
            if not isinstance(raw, dict):
                raise ValueError("not an object")
            self.floors = {str(k): int(v) for k, v in raw.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as err:
            log.error("REPLICATION: ignoring unreadable %s - %s", self.path, err)

    def floor(self, topic: str) -> int:
        return self.floors.get(topic, 0)

    def add(self, topic: str, floor: int) -> None:
        """Record (durably) that the topic's copies below epoch `floor` are deleted."""
        if floor <= self.floors.get(topic, 0):
            return
        self.floors[topic] = floor
        data = json.dumps(self.floors, separators=(",", ":"), sort_keys=True).encode()
        write_file_atomically(LOCAL, self.path, data, sync_dir=True)
