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

The scans and the compaction read (and rewrite) the whole file: the event loop hands them to a
worker thread. A scan reads a `LogSnapshot` (a descriptor of the file and its length when it
was taken: appends after it are not seen, and a compaction that replaces the file meanwhile
does not change what it reads). A `Compaction` rewrites the file in a worker thread while the
loop goes on appending; the records appended meanwhile are copied after it, and the new file
replaces the old one in the loop, between two appends.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Awaitable, Callable, Container, Iterable, Iterator
from typing import Any, TypeVar

from ..diskqueue.fs import LOCAL
from ..protocol.message import FRAMED_BODY_OFFSET, framed_id

log = logging.getLogger("trionsq.nsqd")

LOG_SUFFIX = ".replication.log"
FIN_SUFFIX = ".replication.fin"
EMPTIED_SUFFIX = ".replication.emptied"
DROPPED_SUFFIX = ".replication.dropped"
_HEAD = struct.Struct(">IQ")
ID_SIZE = 16
#: IDs compaction dropped that the dropped file keeps (the latest; 16 MiB of them): a member
#: that was away longer, and still holds an older one unfinished, has it delivered again.
DROPPED_MAX = 1_000_000
#: Compaction runs once this many records are finished everywhere (and more than are live).
COMPACT_MIN = 1000
#: Bytes of the log a scan reads at a time (its memory, besides what it returns).
SCAN_CHUNK = 4 * 1024 * 1024
#: A compaction copies the records appended while it ran in a worker thread until fewer than
#: this many bytes are left (at most TAIL_ROUNDS times); the rest is copied in the event loop
#: as the new file replaces the old one.
TAIL_IN_LOOP = 256 * 1024
TAIL_ROUNDS = 4
_MIN_LENGTH = 8 + FRAMED_BODY_OFFSET
_LENGTH = struct.Struct(">I")

_T = TypeVar("_T")
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


def _scan_log_ids(data: bytes, min_length: int) -> tuple[list[bytes], int]:
    unpack = _HEAD.unpack_from
    id_at = 12 + FRAMED_BODY_OFFSET - 16
    ids: list[bytes] = []
    pos, end = 0, len(data)
    while end - pos >= _HEAD.size:
        length = unpack(data, pos)[0]
        if length < min_length or pos + 4 + length > end:
            break
        ids.append(data[pos + id_at : pos + id_at + 16])
        pos += 4 + length
    return ids, pos


EncodeFrames = Callable[[list[bytes], int], bytes]
CountRecords = Callable[[bytes, int], tuple[int, int]]
ScanIds = Callable[[bytes, int], tuple[list[bytes], int]]
#: The compiled loops (trionsq/protocol/_speedups.c), None where it was not built.
COMPILED_ENCODE_FRAMES: EncodeFrames | None = None
COMPILED_COUNT_RECORDS: CountRecords | None = None
COMPILED_SCAN_IDS: ScanIds | None = None
try:
    from ..protocol._speedups import count_log_records as COMPILED_COUNT_RECORDS
    from ..protocol._speedups import encode_log_records as COMPILED_ENCODE_FRAMES
    from ..protocol._speedups import scan_log_ids as COMPILED_SCAN_IDS
except ImportError:  # not built: the Python loops above
    pass
_encode: EncodeFrames = _encode_frames
_count: CountRecords = _count_log_records
_scan_ids: ScanIds = _scan_log_ids


def use_compiled_loops(compiled: bool) -> None:
    """Use the compiled loops (when built) or the Python ones (the reference: tests run
    both)."""
    global _encode, _count, _scan_ids
    _encode = (compiled and COMPILED_ENCODE_FRAMES) or _encode_frames
    _count = (compiled and COMPILED_COUNT_RECORDS) or _count_log_records
    _scan_ids = (compiled and COMPILED_SCAN_IDS) or _scan_log_ids


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
    return _scan_ids(data, _MIN_LENGTH)


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


def _pread(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        data = os.pread(fd, size, offset)
        if not data:
            break
        parts.append(data)
        size -= len(data)
        offset += len(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_chunk(fd: int, offset: int, end: int, max_bytes: int) -> bytes:
    """The whole records of the log open as `fd` from `offset` on (a record's start), not
    past `end`: as many as fit in `max_bytes`, at least one (blocking). Raises ValueError on
    a malformed record."""
    if offset >= end:
        return b""
    data = _pread(fd, min(end - offset, max_bytes), offset)
    pos = _count(data, _MIN_LENGTH)[1]
    if pos:
        return data if pos == len(data) else data[:pos]
    if len(data) < 4:
        data = _pread(fd, 4, offset)
        if len(data) < 4:
            raise ValueError("truncated record")
    length = _LENGTH.unpack_from(data)[0]
    if length < _MIN_LENGTH or offset + 4 + length > end:
        raise ValueError("bad record length")
    data = _pread(fd, 4 + length, offset)
    if len(data) != 4 + length:
        raise ValueError("truncated record")
    return data


def record_spans(blob: bytes) -> Iterator[tuple[bytes, int, int]]:
    """(ID, start, end) of each record of `blob` (whole records, encoded by
    `encode_records`)."""
    unpack = _LENGTH.unpack_from
    id_at = 12 + FRAMED_BODY_OFFSET - 16
    pos, end = 0, len(blob)
    while pos < end:
        stop = pos + 4 + unpack(blob, pos)[0]
        yield blob[pos + id_at : pos + id_at + 16], pos, stop
        pos = stop


def without_ids(
    blob: bytes, ids: Container[bytes], kept_ids: set[bytes] | None = None
) -> tuple[bytes, int]:
    """The records of `blob` (whole records) whose IDs are not in `ids`, and how many; their
    IDs are added to `kept_ids` if given."""
    kept: list[bytes] = []
    whole = True
    for message_id, start, stop in record_spans(blob):
        if message_id in ids:
            whole = False
        else:
            kept.append(blob[start:stop])
            if kept_ids is not None:
                kept_ids.add(message_id)
    return (blob if whole else b"".join(kept)), len(kept)


class LogSnapshot:
    """The log as it was when taken: a descriptor of its file and its length then. Appends
    made after are not seen, and a compaction that replaces the file meanwhile does not change
    what it reads. Its reads block (a worker thread's work); `close` it when done."""

    def __init__(self, path: str, size: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.size = size

    def chunks(self, offset: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The records from `offset` to `end` (its length), SCAN_CHUNK bytes at a time."""
        stop = self.size if end is None else end
        while offset < stop:
            data = read_chunk(self.fd, offset, stop, SCAN_CHUNK)
            offset += len(data)
            yield data

    def ids(self) -> set[bytes]:
        held: set[bytes] = set()
        for data in self.chunks():
            held.update(scan_ids(data)[0])
        return held

    def ids_and_first_lacking(self, theirs: set[bytes]) -> tuple[set[bytes], int]:
        """`ids`, and the offset of the first record whose ID is not in `theirs` (its
        length if there is none): a peer holding `theirs` lacks nothing before it."""
        held: set[bytes] = set()
        first = -1
        offset = 0
        for data in self.chunks():
            ids = scan_ids(data)[0]
            held.update(ids)
            if first < 0 and not theirs.issuperset(ids):
                for message_id, start, _ in record_spans(data):
                    if message_id not in theirs:
                        first = offset + start
                        break
            offset += len(data)
        return held, self.size if first < 0 else first

    def records(self) -> list[Record]:
        out: list[Record] = []
        for data in self.chunks():
            out += decode_records(data)
        return out

    def records_from(self, offset: int, max_bytes: int) -> tuple[list[Record], int]:
        """The records from `offset` on, about `max_bytes` of them, and where they end."""
        data = read_chunk(self.fd, offset, self.size, max_bytes)
        return decode_records(data), offset + len(data)

    def read(self, ids: Iterable[bytes]) -> list[Record]:
        wanted = set(ids)
        out: list[Record] = []
        if wanted:
            for data in self.chunks():
                if not wanted.isdisjoint(scan_ids(data)[0]):
                    out += [r for r in decode_records(data) if framed_id(r[1]) in wanted]
        return out

    def read_lacking(self, theirs: set[bytes]) -> list[Record]:
        out: list[Record] = []
        for data in self.chunks():
            if not theirs.issuperset(scan_ids(data)[0]):
                out += [r for r in decode_records(data) if framed_id(r[1]) not in theirs]
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_ID = re.compile(rb".{%d}" % ID_SIZE, re.DOTALL)
#: Bytes of IDs split at a time (in a worker thread, the event loop runs between two).
_SPLIT_STEP = ID_SIZE * 16384


def split_ids(blob: bytes) -> list[bytes]:
    """The 16-byte IDs `blob` holds one after another (a trailing piece is left out)."""
    out: list[bytes] = []
    for start in range(0, len(blob), _SPLIT_STEP):
        out += _ID.findall(blob, start, start + _SPLIT_STEP)
    return out


def _read_ids(path: str) -> set[bytes]:
    """The IDs of a FIN file or the emptied file (a torn last one left out)."""
    with open(path, "rb") as f:
        return set(split_ids(f.read()))


def remember_dropped(path: str, ids: set[bytes]) -> None:
    """Append `ids` to the dropped file, fsynced; past 2 x DROPPED_MAX, keep the latest
    DROPPED_MAX (blocking; the data directory is fsynced by the compaction's end)."""
    if not ids:
        return
    with open(path, "ab") as f:
        f.write(b"".join(ids))
        f.flush()
        os.fsync(f.fileno())
        size = f.tell()
    if size > 2 * DROPPED_MAX * ID_SIZE:
        with open(path, "rb") as f:
            f.seek(size - size % ID_SIZE - DROPPED_MAX * ID_SIZE)
            kept = f.read(DROPPED_MAX * ID_SIZE)
        with open(path + ".tmp", "wb") as f:
            f.write(kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)


def fsync_dir(path: str) -> None:
    """Make the directory's entries durable: a file created or renamed in it (blocking; a
    few per topic's lifetime: its files' creation and each compaction)."""
    LOCAL.fsync_dir(path)


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
        #: The IDs compaction dropped (finished by every channel), the latest DROPPED_MAX,
        #: on disk only (read when a peer holds an ID this log does not: `read_dropped`): a
        #: member that still holds one is told it is finished rather than asked for it, and
        #: a restart does not forget them.
        self.dropped_path = os.path.join(data_path, topic + DROPPED_SUFFIX)
        #: IDs /topic/empty dropped: finished for every channel, present and future.
        self.emptied: set[bytes] = set()
        #: Readers that follow the file as it grows (a member's catch-up): no compaction
        #: starts while there are any.
        self.pins = 0
        #: Compactions so far: an offset into the file is one into its generation's file.
        self.generation = 0
        self.closed = False
        self._compaction: Compaction | None = None
        #: channel -> FIN IDs written to its old FIN file while a compaction runs
        self._fins_since: dict[str, list[bytes]] = {}
        self._load()
        self._fd = self._open_append(self.path)

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        """Count the log's records (a torn tail is cut off), and read the FIN files and the
        emptied file, keeping of them the IDs the log holds. The log is read a chunk at a
        time: memory grows with the FIN files, not the log."""
        prefix = self.topic + ":"
        fins: dict[str, set[bytes]] = {}
        for name in os.listdir(self.data_path):
            if name.startswith(prefix) and name.endswith(FIN_SUFFIX):
                channel = name[len(prefix) : -len(FIN_SUFFIX)]
                fins[channel] = _read_ids(os.path.join(self.data_path, name))
        try:
            emptied = _read_ids(self._emptied_path())
        except FileNotFoundError:
            emptied = set()
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            self.finished = {channel: set() for channel in fins}  # of messages not held
            return
        wanted = set(emptied).union(*fins.values())
        held: set[bytes] = set()  # of `wanted`
        count = pos = 0
        fd = os.open(self.path, os.O_RDONLY)
        try:
            while pos < size:
                try:
                    data = read_chunk(fd, pos, size, SCAN_CHUNK)
                except ValueError:
                    break  # torn (or malformed): this record and what follows are cut off
                ids = scan_ids(data)[0]
                count += len(ids)
                if wanted:
                    held.update(wanted.intersection(ids))
                pos += len(data)
        finally:
            os.close(fd)
        if pos < size:
            log.warning(
                "REPLICATION(%s): cutting %d torn bytes off the log", self.topic, size - pos
            )
            os.truncate(self.path, pos)
        self.bytes = pos
        self.count = count
        self.finished = {channel: done & held for channel, done in fins.items()}
        self.emptied = emptied & held
        self._recount_dead()

    def _recount_dead(self) -> None:
        """`dead`: the records every channel has finished (with no channel, those emptied).
        Counted from the finished sets, without a scan of the log: a FIN of a message it
        never held counts too until a compaction, which this count only triggers, drops it."""
        sets = list(self.finished.values())
        self.dead = len(set.intersection(*sets)) if sets else len(self.emptied)

    # -- messages ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.count

    def snapshot(self) -> LogSnapshot:
        """The log as it is now, for a scan in a worker thread (`LogSnapshot`)."""
        return LogSnapshot(self.path, self.bytes)

    @property
    def compacting(self) -> bool:
        return self._compaction is not None

    def _scan(self, fn: Callable[[LogSnapshot], _T]) -> _T:
        snapshot = self.snapshot()
        try:
            return fn(snapshot)
        finally:
            snapshot.close()

    def ids(self) -> set[bytes]:
        """The IDs of the messages the log holds (a scan of the log, blocking: the event
        loop scans a `snapshot` in a worker thread)."""
        return self._scan(LogSnapshot.ids)

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
        """The records of `ids` the log holds, read back from disk (a scan, blocking)."""
        return self._scan(lambda snapshot: snapshot.read(ids))

    def read_lacking(self, theirs: set[bytes]) -> list[Record]:
        """The records whose IDs are not in `theirs` (a scan, blocking)."""
        return self._scan(lambda snapshot: snapshot.read_lacking(theirs))

    def records(self) -> Iterator[Record]:
        """Every record, in log order (read from disk, blocking)."""
        yield from self._scan(LogSnapshot.records)

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
        self._fins_unwritten.pop(channel, None)
        if self._compaction is not None:  # its rewritten FIN file is not put in place
            self._compaction.deleted.add(channel)
        fd = self._fin_fds.pop(channel, None)
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(self._fin_path(channel))
        except FileNotFoundError:
            pass
        self._recount_dead()

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
        compacting = self._compaction is not None
        for channel, ids in unwritten.items():
            if channel in self.finished:
                os.write(self._fin_fd(channel), b"".join(ids))
                if compacting:  # the rewritten FIN file gets them too
                    self._fins_since.setdefault(channel, []).extend(ids)

    def empty_topic(self, ids: Iterable[bytes]) -> int:
        """Record IDs dropped from the topic's queue (/topic/empty): finished for every
        channel and for those created later (written and fsynced at once: an admin action,
        acknowledged once on disk); returns how many were new."""
        new = [i for i in dict.fromkeys(ids) if i not in self.emptied]
        if not new:
            return 0
        self.emptied.update(new)
        fd = self._open_append(self._emptied_path())
        try:
            os.write(fd, b"".join(new))
            os.fsync(fd)
        finally:
            os.close(fd)
        for channel in list(self.finished):
            self.finish(channel, new)
        self.write_fins()
        self._recount_dead()
        return len(new)

    def _emptied_path(self) -> str:
        return os.path.join(self.data_path, self.topic + EMPTIED_SUFFIX)

    def read_dropped(self) -> set[bytes]:
        """The IDs compaction dropped (blocking: a worker thread's work)."""
        try:
            return _read_ids(self.dropped_path)
        except FileNotFoundError:
            return set()

    def unfinished(self, channel: str) -> int:
        return self.count - len(self.finished.get(channel, ()))

    def _fin_path(self, channel: str) -> str:
        return os.path.join(self.data_path, f"{self.topic}:{channel}{FIN_SUFFIX}")

    def _fin_fd(self, channel: str) -> int:
        fd = self._fin_fds.get(channel)
        if fd is None:
            fd = self._fin_fds[channel] = self._open_append(self._fin_path(channel))
        return fd

    def _open_append(self, path: str) -> int:
        """`path` opened to append; created if there is none, and then its directory synced
        (the file's entry is durable before anything fsynced in it is relied on)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return os.open(path, os.O_WRONLY | os.O_APPEND)
        fsync_dir(self.data_path)
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
        """`start_compaction`, its rewrite and `finish_compaction`, all at once (blocking):
        the event loop runs the rewrite in a worker thread (`compact`)."""
        compaction = self.start_compaction()
        if compaction is None:
            return False
        try:
            compaction.rewrite()
        except BaseException:
            self.abandon_compaction(compaction)
            raise
        return self.finish_compaction(compaction)

    async def compact(self, run_blocking: Callable[..., Awaitable[Any]]) -> bool:
        """Compact if it is time, the reading and writing in worker threads (`run_blocking`):
        the rewrite, then the records appended meanwhile until few are left; those few are
        copied by `finish_compaction`, in the loop, between two appends."""
        compaction = self.start_compaction()
        if compaction is None:
            return False
        try:
            await run_blocking(compaction.rewrite)
            for _ in range(TAIL_ROUNDS):
                if self.closed or self.bytes - compaction.copied <= TAIL_IN_LOOP:
                    break
                await run_blocking(compaction.copy_tail, self.bytes)
        except BaseException:
            self.abandon_compaction(compaction)
            raise
        return self.finish_compaction(compaction)

    def compaction_due(self) -> bool:
        """The records every channel has finished outnumber the live ones (and COMPACT_MIN),
        no compaction runs and no reader follows the file (`pins`)."""
        return (
            self.dead >= COMPACT_MIN
            and self.dead >= self.count - self.dead
            and self._compaction is None
            and not self.pins
            and not self.closed
        )

    def start_compaction(self) -> Compaction | None:
        """A compaction of the log, if one is due (`compaction_due`)."""
        if not self.compaction_due():
            return None
        sets = list(self.finished.values())
        gone = set.intersection(*sets) if sets else set(self.emptied)
        fins = {channel: done - gone for channel, done in self.finished.items()}
        paths = {channel: self._fin_path(channel) for channel in fins}
        self._compaction = Compaction(self, gone, fins, paths)
        self._fins_since = {}
        return self._compaction

    def abandon_compaction(self, compaction: Compaction) -> None:
        if self._compaction is compaction:
            self._compaction = None
            self._fins_since = {}
        compaction.discard()

    def finish_compaction(self, compaction: Compaction) -> bool:
        """Put the rewritten files in place of the old ones (in the event loop: no append
        comes between the last records copied and the switch)."""
        if self.closed or self._compaction is not compaction:
            self.abandon_compaction(compaction)
            return False
        try:
            compaction.copy_tail(self.bytes)
            os.replace(compaction.tmp, self.path)
        except BaseException:
            self.abandon_compaction(compaction)
            raise
        self._compaction = None
        self.generation += 1
        since, self._fins_since = self._fins_since, {}
        os.close(self._fd)
        self._fd, compaction.fd = compaction.fd, -1
        self.count = compaction.count
        self.bytes = compaction.bytes
        held = compaction.held
        for channel, done in self.finished.items():
            done &= held  # what compaction dropped, and IDs of messages never held
            tmp = None if channel in compaction.deleted else compaction.fin_tmps.pop(channel, None)
            if tmp is None:
                continue  # created meanwhile: its file keeps a few IDs no longer needed
            if channel in since:
                with open(tmp, "ab") as f:
                    f.write(b"".join(since[channel]))
            fd = self._fin_fds.pop(channel, None)
            if fd is not None:
                os.close(fd)
            os.replace(tmp, self._fin_path(channel))
        compaction.discard()  # and the FIN files of channels deleted meanwhile
        if self.emptied:
            self.emptied &= held
            path = self._emptied_path()
            with open(path + ".tmp", "wb") as f:
                f.write(b"".join(self.emptied))
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
        # The renames are durable before anything written to the new files is acknowledged
        # as synced (--sync-ack): after a power failure the old files must not come back.
        fsync_dir(self.data_path)
        self._recount_dead()
        log.debug(
            "REPLICATION(%s): log compacted, %d records dropped",
            self.topic,
            len(compaction.gone - held),
        )
        return True

    def close(self) -> None:
        self.closed = True
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
        for path in (self.path, self._emptied_path(), self.dropped_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


class Compaction:
    """One rewrite of the log without the records every channel has finished (`gone`), and
    of the FIN files without their IDs, into temporary files: `rewrite` and `copy_tail`
    block (a worker thread's work); `ReplicationLog.start_compaction` and `finish_compaction`
    run in the event loop, where the appends are."""

    def __init__(
        self,
        log: ReplicationLog,
        gone: set[bytes],
        fins: dict[str, set[bytes]],
        fin_paths: dict[str, str],
    ) -> None:
        self.gone = gone
        self.dropped_path = log.dropped_path
        self.source = log.snapshot()
        self.tmp = log.path + ".tmp"
        #: The new log file (appended; the log's descriptor once it replaces the old one).
        self.fd = -1
        #: Bytes of the old file read so far (their records, less `gone`, in the new one).
        self.copied = 0
        self.count = 0
        self.bytes = 0
        #: The IDs of the new file's records.
        self.held: set[bytes] = set()
        self._fins = fins
        self._fin_paths = fin_paths
        #: channel -> its rewritten FIN file
        self.fin_tmps: dict[str, str] = {}
        #: Channels deleted meanwhile (one created again under the name keeps its own file).
        self.deleted: set[str] = set()

    def rewrite(self) -> None:
        """The records of the old file up to its length at the start, less `gone`, to the
        new file; the FIN files less the IDs no longer held; all fsynced."""
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        self._copy(self.source.size, self.gone)
        os.fsync(self.fd)
        held = self.held
        for channel, done in self._fins.items():
            tmp = self._fin_paths[channel] + ".tmp"
            with open(tmp, "wb") as f:
                f.write(b"".join(done & held))
                f.flush()
                os.fsync(f.fileno())
            self.fin_tmps[channel] = tmp
        self._fins = {}
        # Before the new files replace the old: what they leave out is remembered as dropped
        # (an ID remembered for a compaction then abandoned is finished everywhere all the
        # same).
        remember_dropped(self.dropped_path, self.gone - held)

    def copy_tail(self, end: int) -> None:
        """The records appended to the old file since, up to `end`, to the new one, fsynced
        (what was fsynced in the old file is fsynced in the new before it replaces it)."""
        if end > self.copied:
            self._copy(end, ())
            os.fsync(self.fd)

    def _copy(self, end: int, gone: Container[bytes]) -> None:
        for data in self.source.chunks(self.copied, end):
            blob, count = without_ids(data, gone, self.held)
            if blob:
                os.write(self.fd, blob)
            self.count += count
            self.bytes += len(blob)
            self.copied += len(data)

    def discard(self) -> None:
        """Close it, and remove the temporary files not put in place."""
        self.source.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
        for tmp in self.fin_tmps.values():
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        self.fin_tmps.clear()
