"""A replicated topic's log on one member (docs/replication.md section 6): the set of the
topic's messages and, per channel, the set of the IDs it has finished. It owns two kinds of
files in the data path, written only for replicated topics:

- ``<topic>.replication.log``: the messages, appended (write(2) before a publish counts),
  each record ``[4-byte length][8-byte due time, Unix ns, 0: now][framed message]``;
- ``<topic>:<channel>.replication.fin``: the IDs the channel has finished, 16 bytes each,
  appended; the file's existence says the channel exists;
- ``<topic>.replication.emptied``: the IDs an HTTP ``/topic/empty`` dropped from the topic's
  queue (finished for every channel, those created later included), once there are some.

Every member, the primary included, keeps it: the channels' ordinary queues are rebuilt from
it ("the log minus the finished set") when a member takes office, so whatever a node held
when it died comes back whichever role it had. A torn record at the log's end (a kill during
a write) is cut off at load. When more records are finished by every channel than are live,
the log is rewritten without them (and the FIN files without their IDs).

Memory: the finished IDs, nothing per message published (the publish and stream paths append
without indexing); which IDs the log holds, and their bodies, are read back from disk (a scan
of the log) for a summary, a merge, a peer that lacks them, a takeover and a compaction.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterable, Iterator

from ..protocol.message import FRAMED_BODY_OFFSET, framed_id

log = logging.getLogger("trionsq.nsqd")

LOG_SUFFIX = ".replication.log"
FIN_SUFFIX = ".replication.fin"
EMPTIED_SUFFIX = ".replication.emptied"
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


def _encode_frames(frames: list[bytes], due: int) -> bytes:
    pack = _HEAD.pack
    return b"".join([pack(len(frame) + 8, due) + frame for frame in frames])


def _count_log_records(data: bytes, min_length: int) -> tuple[int, int]:
    unpack = _HEAD.unpack_from
    count = 0
    pos, end = 0, len(data)
    while end - pos >= _HEAD.size:
        length = unpack(data, pos)[0]
        if length < min_length or pos + 4 + length > end:
            break
        pos += 4 + length
        count += 1
    return count, pos


EncodeFrames = Callable[[list[bytes], int], bytes]
CountRecords = Callable[[bytes, int], tuple[int, int]]
#: The compiled loops (trionsq/protocol/_speedups.c), None where it was not built.
COMPILED_ENCODE_FRAMES: EncodeFrames | None = None
COMPILED_COUNT_RECORDS: CountRecords | None = None
try:
    from ..protocol._speedups import count_log_records as COMPILED_COUNT_RECORDS
    from ..protocol._speedups import encode_log_records as COMPILED_ENCODE_FRAMES
except ImportError:  # not built: the Python loops above
    pass
_encode: EncodeFrames = _encode_frames
_count: CountRecords = _count_log_records


def use_compiled_loops(compiled: bool) -> None:
    """Use the compiled loops (when built) or the Python ones (the reference: tests run
    both)."""
    global _encode, _count
    _encode = (compiled and COMPILED_ENCODE_FRAMES) or _encode_frames
    _count = (compiled and COMPILED_COUNT_RECORDS) or _count_log_records


use_compiled_loops(not os.environ.get("TRIONSQ_PURE_PYTHON"))


def encode_frames(frames: list[bytes], due: int) -> bytes:
    """The records of message frames, all with the due time `due`."""
    return _encode(frames, due)


def count_records(data: bytes) -> int:
    """How many records `data` holds (encoded by `encode_records`); raises ValueError on a
    malformed or torn one."""
    count, pos = _count(data, 8 + FRAMED_BODY_OFFSET)
    if pos != len(data):
        raise ValueError("bad record length")
    return count


def scan_ids(data: bytes) -> tuple[list[bytes], int]:
    """The message IDs of the whole records at the head of `data` (encoded by
    `encode_records`), and where they end: at a torn or malformed record, or the end."""
    unpack = _HEAD.unpack_from
    id_at = 12 + FRAMED_BODY_OFFSET - 16
    ids: list[bytes] = []
    pos, end = 0, len(data)
    while pos + _HEAD.size <= end:
        length = unpack(data, pos)[0]
        if length < 8 + FRAMED_BODY_OFFSET or pos + 4 + length > end:
            break
        ids.append(data[pos + id_at : pos + id_at + 16])
        pos += 4 + length
    return ids, pos


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
        #: Records in the log (which IDs they hold only the file says: `ids` scans it).
        self.count = 0
        #: channel -> the IDs of the log it has finished
        self.finished: dict[str, set[bytes]] = {}
        #: channel -> finished IDs not yet appended to its FIN file (`write_fins`)
        self._fins_unwritten: dict[str, list[bytes]] = {}
        self._fin_fds: dict[str, int] = {}
        self.dead = 0
        self.bytes = 0
        #: IDs compaction dropped (finished by every channel), the latest DROPPED_MAX: a
        #: member that still holds one is told it is finished rather than asked for it.
        self.dropped: dict[bytes, None] = {}
        #: IDs /topic/empty dropped: finished for every channel, present and future.
        self.emptied: set[bytes] = set()
        self._load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        ids, pos = scan_ids(data)
        if pos < len(data):
            log.warning(
                "REPLICATION(%s): cutting %d torn bytes off the log", self.topic, len(data) - pos
            )
            os.truncate(self.path, pos)
        self.bytes = pos
        self.count = len(ids)
        held = set(ids)
        prefix = self.topic + ":"
        for name in os.listdir(self.data_path):
            if name.startswith(prefix) and name.endswith(FIN_SUFFIX):
                channel = name[len(prefix) : -len(FIN_SUFFIX)]
                with open(os.path.join(self.data_path, name), "rb") as f:
                    raw = f.read()
                whole = len(raw) - len(raw) % ID_SIZE
                done = {raw[i : i + ID_SIZE] for i in range(0, whole, ID_SIZE)}
                self.finished[channel] = done & held
        try:
            with open(self._emptied_path(), "rb") as f:
                raw = f.read()
            whole = len(raw) - len(raw) % ID_SIZE
            self.emptied = {raw[i : i + ID_SIZE] for i in range(0, whole, ID_SIZE)} & held
        except FileNotFoundError:
            pass
        self.dead = self._count_dead(held)

    def _count_dead(self, held: set[bytes]) -> int:
        if not self.finished:
            return len(self.emptied & held)
        sets = list(self.finished.values())
        return len(set.intersection(*sets) & held)

    # -- messages ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.count

    def ids(self) -> set[bytes]:
        """The IDs of the messages the log holds (a scan of the log: for a summary or a
        merge, not for the publish path)."""
        with open(self.path, "rb") as f:
            data = f.read(self.bytes)
        return set(scan_ids(data)[0])

    def append(self, records: list[Record], known: set[bytes] | None = None) -> bytes:
        """Write the records (one write(2)); returns them encoded. With `known` (the IDs
        the log holds, from `ids`), those it holds are left out and `known` is updated.
        Without (the publish path: IDs this node just made, which no earlier record has),
        nothing is left out: a clock set back could repeat an ID, and that message must not
        be dropped as a copy of another."""
        if known is not None:
            unique: dict[bytes, Record] = {}
            for record in records:
                message_id = framed_id(record[1])
                if message_id not in known:
                    unique.setdefault(message_id, record)
            known.update(unique)
            records = list(unique.values())
        if not records:
            return b""
        blob = encode_records(records)
        os.write(self._fd, blob)  # O_APPEND: one write, at the end
        self.count += len(records)
        self.bytes += len(blob)
        return blob

    def append_frames(self, batches: list[tuple[int, list[bytes]]]) -> bytes:
        """The publish path: write message frames, each batch with its due time (one
        write(2)); returns them encoded. Nothing is left out (see `append`)."""
        if len(batches) == 1:
            due, frames = batches[0]
            blob = encode_frames(frames, due)
            count = len(frames)
        else:
            blob = b"".join([encode_frames(frames, due) for due, frames in batches])
            count = sum(len(frames) for _, frames in batches)
        if count:
            os.write(self._fd, blob)  # O_APPEND: one write, at the end
            self.count += count
            self.bytes += len(blob)
        return blob

    def append_encoded(self, blob: bytes) -> int:
        """`append` of records already encoded (a MSGS frame's blob, as the primary wrote
        them, which holds no message the log has: the primary streams to a member only what
        follows what it sent it when it joined); returns how many. Raises ValueError on a
        malformed record (nothing written)."""
        count = count_records(blob)
        if count:
            os.write(self._fd, blob)  # O_APPEND: one write, at the end
            self.count += count
            self.bytes += len(blob)
        return count

    def read(self, ids: Iterable[bytes]) -> list[Record]:
        """The records of `ids` the log holds, read back from disk (a scan of the log)."""
        wanted = set(ids)
        if not wanted:
            return []
        return [r for r in self.records() if framed_id(r[1]) in wanted]

    def read_lacking(self, theirs: set[bytes]) -> list[Record]:
        """The records whose IDs are not in `theirs` (a scan of the log)."""
        return [r for r in self.records() if framed_id(r[1]) not in theirs]

    def records(self) -> Iterator[Record]:
        """Every record, in log order (read from disk)."""
        with open(self.path, "rb") as f:
            data = f.read(self.bytes)
        yield from decode_records(data)

    # -- channels and FINs ------------------------------------------------------------------

    def add_channel(self, channel: str) -> None:
        """A new channel: it has finished what every existing channel has finished (a new
        channel is not owed what is gone; what some channel still holds it may get after a
        failover: a duplicate for it, never a loss)."""
        if channel in self.finished:
            return
        sets = list(self.finished.values())
        skip = set.intersection(*sets) if sets else set()
        skip |= self.emptied
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
        self.dead = self._count_dead(self.ids())

    def finish(self, channel: str, ids: Iterable[bytes]) -> int:
        """Record that `channel` finished `ids` (those it had not); returns how many were
        new. An unknown channel is created. The IDs reach its FIN file at `write_fins`
        (a crash before loses them: duplicates after a failover, never a loss)."""
        done = self.finished.get(channel)
        if done is None:
            self.add_channel(channel)
            done = self.finished[channel]
        new = [i for i in ids if i not in done]
        if not new:
            return 0
        done.update(new)
        unwritten = self._fins_unwritten.get(channel)
        if unwritten is None:
            self._fins_unwritten[channel] = new
        else:
            unwritten += new
        others = [s for c, s in self.finished.items() if c != channel]
        self.dead += sum(1 for i in new if all(i in s for s in others))
        return len(new)

    def write_fins(self) -> None:
        """Append the finished IDs `finish` recorded to the FIN files (one write each)."""
        if not self._fins_unwritten:
            return
        unwritten, self._fins_unwritten = self._fins_unwritten, {}
        for channel, ids in unwritten.items():
            if channel in self.finished:
                os.write(self._fin_fd(channel), b"".join(ids))

    def empty_topic(self, ids: Iterable[bytes]) -> int:
        """Record IDs dropped from the topic's queue (/topic/empty): finished for every
        channel and for those created later (written and fsynced at once: an admin action,
        acknowledged once on disk); returns how many were new."""
        new = [i for i in dict.fromkeys(ids) if i not in self.emptied]
        if not new:
            return 0
        self.emptied.update(new)
        fd = os.open(self._emptied_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"".join(new))
            os.fsync(fd)
        finally:
            os.close(fd)
        for channel in list(self.finished):
            self.finish(channel, new)
        self.write_fins()
        self.dead = self._count_dead(self.ids())
        return len(new)

    def _emptied_path(self) -> str:
        return os.path.join(self.data_path, self.topic + EMPTIED_SUFFIX)

    def unfinished(self, channel: str) -> int:
        return self.count - len(self.finished.get(channel, ()))

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
        self.write_fins()
        return [os.dup(fd) for fd in (self._fd, *self._fin_fds.values())]

    def dup_handle(self) -> int:
        """A duplicate of the log's descriptor, for `fsync_handles` in a worker thread."""
        return os.dup(self._fd)

    def fsync(self) -> None:
        fsync_handles(self.sync_handles())

    def compact_if_needed(self) -> bool:
        """Drop the records every channel has finished once they outnumber the live ones
        (and COMPACT_MIN): rewrite the log and the FIN files (temp file, fsync, rename)."""
        if self.dead < COMPACT_MIN or self.dead < self.count - self.dead:
            return False
        sets = list(self.finished.values())
        gone = set.intersection(*sets) if sets else set(self.emptied)
        live = [r for r in self.records() if framed_id(r[1]) not in gone]
        live_ids = {framed_id(frame) for _, frame in live}
        self._fins_unwritten.clear()  # the FIN files are rewritten from the sets below
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(encode_records(live))
            f.flush()
            os.fsync(f.fileno())
        os.close(self._fd)
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.count = len(live)
        self.bytes = sum(len(frame) + 12 for _, frame in live)
        for channel, done in self.finished.items():
            done &= live_ids  # IDs of messages the log never held go too
            fd = self._fin_fds.pop(channel, None)
            if fd is not None:
                os.close(fd)
            path = self._fin_path(channel)
            with open(path + ".tmp", "wb") as f:
                f.write(b"".join(done))
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
        if self.emptied:
            self.emptied &= live_ids
            path = self._emptied_path()
            with open(path + ".tmp", "wb") as f:
                f.write(b"".join(self.emptied))
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
        try:
            self.write_fins()
        except OSError as err:
            log.error("REPLICATION(%s): failed to write FINs - %s", self.topic, err)
        os.close(self._fd)
        for fd in self._fin_fds.values():
            os.close(fd)
        self._fin_fds.clear()

    def delete(self) -> None:
        self.close()
        for channel in list(self.finished):
            self.delete_channel(channel)
        for path in (self.path, self._emptied_path()):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
