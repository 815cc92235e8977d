"""A replicated topic's log on one member (docs/replication.md section 6): the set of the
topic's messages and, per channel, the set of the IDs it has finished. It owns two kinds of
files in the data path, written only for replicated topics:

- ``<topic>.replication.log``: the messages, appended (write(2) before a publish counts),
  each record ``[4-byte length][8-byte due time, Unix ns, 0: now][framed message]``;
- ``<topic>:<channel>.replication.fin``: the IDs the channel has finished, 16 bytes each,
  appended; the file's existence says the channel exists.

Every member, the primary included, keeps it: the channels' ordinary queues are rebuilt from
it ("the log minus the finished set") when a member takes office, so whatever a node held
when it died comes back whichever role it had. A torn record at the log's end (a kill during
a write) is cut off at load. When more records are finished by every channel than are live,
the log is rewritten without them (and the FIN files without their IDs).

Memory: an index entry (ID, offset, length) per live record and the finished IDs; the bodies
stay on disk and are read back at takeover and for a peer that lacks them.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable, Iterator

from ..protocol.message import FRAMED_BODY_OFFSET, framed_id

log = logging.getLogger("trionsq.nsqd")

LOG_SUFFIX = ".replication.log"
FIN_SUFFIX = ".replication.fin"
_HEAD = struct.Struct(">IQ")
ID_SIZE = 16
#: Dropped IDs remembered (in memory: forgotten at restart, which costs duplicates only).
DROPPED_MAX = 1_000_000
#: Compaction runs once this many records are finished everywhere (and more than are live).
COMPACT_MIN = 1000

Record = tuple[int, bytes]
"""``(due time in Unix ns or 0, framed message)``."""


def encode_records(records: Iterable[Record]) -> bytes:
    return b"".join(_HEAD.pack(len(frame) + 8, due) + frame for due, frame in records)


def decode_records(data: bytes | memoryview) -> list[Record]:
    """Records encoded by `encode_records`; raises ValueError on a malformed one."""
    out: list[Record] = []
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < _HEAD.size:
            raise ValueError("truncated record")
        length, due = _HEAD.unpack_from(view, pos)
        if length < 8 + FRAMED_BODY_OFFSET or pos + 4 + length > end:
            raise ValueError("bad record length")
        out.append((due, bytes(view[pos + 12 : pos + 4 + length])))
        pos += 4 + length
    return out


def fsync_handles(fds: list[int]) -> None:
    """fsync and close descriptors from `ReplicationLog.sync_handles` (blocking)."""
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


class ReplicationLog:
    """One replicated topic's messages and finished sets on this member's disk."""

    def __init__(self, data_path: str, topic: str) -> None:
        self.data_path = data_path
        self.topic = topic
        self.path = os.path.join(data_path, topic + LOG_SUFFIX)
        #: message ID -> (offset of its record, record length)
        self.index: dict[bytes, tuple[int, int]] = {}
        #: channel -> the IDs of the log it has finished
        self.finished: dict[str, set[bytes]] = {}
        self._fin_fds: dict[str, int] = {}
        self.dead = 0
        self.bytes = 0
        #: IDs compaction dropped (finished by every channel), the latest DROPPED_MAX: a
        #: member that still holds one is told it is finished rather than asked for it.
        self.dropped: dict[bytes, None] = {}
        self._load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        pos = 0
        while pos + _HEAD.size <= len(data):
            length, _ = _HEAD.unpack_from(data, pos)
            if length < 8 + FRAMED_BODY_OFFSET or pos + 4 + length > len(data):
                break
            frame_id = data[pos + 12 + FRAMED_BODY_OFFSET - 16 : pos + 12 + FRAMED_BODY_OFFSET]
            self.index[frame_id] = (pos, 4 + length)
            pos += 4 + length
        if pos < len(data):
            log.warning(
                "REPLICATION(%s): cutting %d torn bytes off the log", self.topic, len(data) - pos
            )
            os.truncate(self.path, pos)
        self.bytes = pos
        prefix = self.topic + ":"
        for name in os.listdir(self.data_path):
            if name.startswith(prefix) and name.endswith(FIN_SUFFIX):
                channel = name[len(prefix) : -len(FIN_SUFFIX)]
                with open(os.path.join(self.data_path, name), "rb") as f:
                    raw = f.read()
                whole = len(raw) - len(raw) % ID_SIZE
                ids = {raw[i : i + ID_SIZE] for i in range(0, whole, ID_SIZE)}
                self.finished[channel] = ids & self.index.keys()
        self.dead = self._count_dead()

    def _count_dead(self) -> int:
        if not self.finished:
            return 0
        sets = list(self.finished.values())
        return len(set.intersection(*sets) & self.index.keys())

    # -- messages ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self.index

    def append(self, records: list[Record]) -> bytes:
        """Write the records whose IDs the log lacks (one write(2)); returns them encoded.
        (The publish path: IDs and lengths are known, nothing is parsed back.)"""
        index = self.index
        pack = _HEAD.pack
        parts: list[bytes] = []
        entries: list[tuple[bytes, int]] = []
        for due, frame in records:
            message_id = frame[FRAMED_BODY_OFFSET - 16 : FRAMED_BODY_OFFSET]
            if message_id in index:
                continue
            parts.append(pack(len(frame) + 8, due))
            parts.append(frame)
            entries.append((message_id, len(frame) + 12))
        if not entries:
            return b""
        blob = b"".join(parts)
        os.write(self._fd, blob)  # O_APPEND: one write, at the end
        pos = self.bytes
        for message_id, length in entries:
            index[message_id] = (pos, length)
            pos += length
        self.bytes = pos
        return blob

    def append_encoded(self, blob: bytes) -> bytes:
        """`append` of records already encoded (a MSGS frame's blob, as the primary wrote
        them): written as they are when all are new, the usual case; returns what was
        written. Raises ValueError on a malformed record (nothing written)."""
        index = self.index
        unpack = _HEAD.unpack_from
        id_at = FRAMED_BODY_OFFSET - 16 + 12
        entries: list[tuple[bytes, int, int]] = []  # (id, offset in blob, length)
        pos, end = 0, len(blob)
        while pos < end:
            if end - pos < _HEAD.size:
                raise ValueError("truncated record")
            length = unpack(blob, pos)[0] + 4
            if length < 12 + FRAMED_BODY_OFFSET or pos + length > end:
                raise ValueError("bad record length")
            entries.append((blob[pos + id_at : pos + id_at + 16], pos, length))
            pos += length
        new = [e for e in entries if e[0] not in index]
        if len(new) != len(entries):
            unique: dict[bytes, tuple[bytes, int, int]] = {}
            for entry in new:
                unique.setdefault(entry[0], entry)
            new = list(unique.values())
            blob = b"".join(blob[offset : offset + length] for _, offset, length in new)
        if not new:
            return b""
        os.write(self._fd, blob)  # O_APPEND: one write, at the end
        base = self.bytes
        at = 0
        for message_id, _, length in new:
            index[message_id] = (base + at, length)
            at += length
        self.bytes = base + at
        return blob

    def read(self, ids: Iterable[bytes]) -> list[Record]:
        """The records of `ids` the log holds, read back from disk."""
        wanted = sorted((self.index[i] for i in ids if i in self.index), key=lambda e: e[0])
        if not wanted:
            return []
        out: list[Record] = []
        with open(self.path, "rb") as f:
            for offset, length in wanted:
                f.seek(offset)
                raw = f.read(length)
                out.append((_HEAD.unpack_from(raw, 0)[1], raw[12:]))
        return out

    def records(self) -> Iterator[Record]:
        """Every record, in log order (read from disk)."""
        with open(self.path, "rb") as f:
            data = f.read(self.bytes)
        pos = 0
        index = self.index
        while pos < len(data):
            length, due = _HEAD.unpack_from(data, pos)
            frame = data[pos + 12 : pos + 4 + length]
            if framed_id(frame) in index:
                yield due, frame
            pos += 4 + length

    # -- channels and FINs ------------------------------------------------------------------

    def add_channel(self, channel: str) -> None:
        """A new channel: it has finished what every existing channel has finished (a new
        channel is not owed what is gone; what some channel still holds it may get after a
        failover: a duplicate for it, never a loss)."""
        if channel in self.finished:
            return
        sets = list(self.finished.values())
        skip = set.intersection(*sets) if sets else set()
        self.finished[channel] = set()
        self._fin_fd(channel)
        self.finish(channel, skip)

    def delete_channel(self, channel: str) -> None:
        if self.finished.pop(channel, None) is None:
            return
        fd = self._fin_fds.pop(channel, None)
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(self._fin_path(channel))
        except FileNotFoundError:
            pass
        self.dead = self._count_dead()

    def finish(self, channel: str, ids: Iterable[bytes]) -> int:
        """Record that `channel` finished `ids` (those of the log it had not); returns how
        many were new. An unknown channel is created."""
        done = self.finished.get(channel)
        if done is None:
            self.add_channel(channel)
            done = self.finished[channel]
        index = self.index
        new = [i for i in ids if i in index and i not in done]
        if not new:
            return 0
        done.update(new)
        os.write(self._fin_fd(channel), b"".join(new))
        others = [s for c, s in self.finished.items() if c != channel]
        self.dead += sum(1 for i in new if all(i in s for s in others))
        return len(new)

    def unfinished(self, channel: str) -> int:
        return len(self.index) - len(self.finished.get(channel, ()))

    def _fin_path(self, channel: str) -> str:
        return os.path.join(self.data_path, f"{self.topic}:{channel}{FIN_SUFFIX}")

    def _fin_fd(self, channel: str) -> int:
        fd = self._fin_fds.get(channel)
        if fd is None:
            fd = os.open(self._fin_path(channel), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fin_fds[channel] = fd
        return fd

    # -- upkeep -----------------------------------------------------------------------------

    def sync_handles(self) -> list[int]:
        """Duplicates of the files' descriptors, for `fsync_handles` in a worker thread
        (a compaction meanwhile closes the originals, not these)."""
        return [os.dup(fd) for fd in (self._fd, *self._fin_fds.values())]

    def fsync(self) -> None:
        fsync_handles(self.sync_handles())

    def compact_if_needed(self) -> bool:
        """Drop the records every channel has finished once they outnumber the live ones
        (and COMPACT_MIN): rewrite the log and the FIN files (temp file, fsync, rename)."""
        if self.dead < COMPACT_MIN or self.dead < len(self.index) - self.dead:
            return False
        sets = list(self.finished.values())
        gone = set.intersection(*sets) if sets else set()
        live = [r for r in self.records() if framed_id(r[1]) not in gone]
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(encode_records(live))
            f.flush()
            os.fsync(f.fileno())
        os.close(self._fd)
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.index.clear()
        pos = 0
        for _, frame in live:
            self.index[framed_id(frame)] = (pos, len(frame) + 12)
            pos += len(frame) + 12
        self.bytes = pos
        for channel, done in self.finished.items():
            done -= gone
            fd = self._fin_fds.pop(channel, None)
            if fd is not None:
                os.close(fd)
            path = self._fin_path(channel)
            with open(path + ".tmp", "wb") as f:
                f.write(b"".join(done))
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
        self.dead = 0
        dropped = self.dropped
        dropped.update(dict.fromkeys(gone))
        if len(dropped) > DROPPED_MAX:
            for key in list(dropped)[: len(dropped) - DROPPED_MAX]:
                del dropped[key]
        log.debug("REPLICATION(%s): log compacted, %d records dropped", self.topic, len(gone))
        return True

    def close(self) -> None:
        os.close(self._fd)
        for fd in self._fin_fds.values():
            os.close(fd)
        self._fin_fds.clear()

    def delete(self) -> None:
        self.close()
        for channel in list(self.finished):
            self.delete_channel(channel)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
