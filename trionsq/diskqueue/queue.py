"""`DiskQueue`: one topic's or channel's messages on disk, in go-diskqueue's format.

Records are ``[4-byte big-endian length][message payload]`` appended to numbered segment files
(files.py names them). The daemon keeps messages as wire frames (trionsq.protocol.message), so
`put_many` takes frames and `take` returns frames: a record is a frame without its 8-byte
frame header.

Everything here runs in the event loop and never waits for the disk to make data durable:
appends are plain writes into the page cache (a killed process loses nothing written), and
`DiskSyncer` (syncer.py) fsyncs and writes the metadata file in a worker thread, following
--sync-every and --sync-timeout (and, with --sync-ack, before publishes are acknowledged).
Opening is recovery.py's `recover` (blocking: nsqd runs it in a worker thread at start-up);
files are reached through a `FileSystem` (fs.py), so that tests can cut a simulated disk's
power.

The read position that is persisted is not where the reader is but where consumption is
*committed*. A channel's queue is opened with ``track_consumption=True``: a message it hands
out stays owed (`release` ends that, on FIN) and the metadata's read position never passes the
oldest owed message, so a crash redelivers messages that were in flight rather than losing
them (go-diskqueue persists the reader's position and loses them). Messages after the owed
one that were already finished come back too: delivery is at least once.

Deferred messages of a durable topic or channel live in the queue's `DeferredLog`
(deferred.py) while they wait; a record read from the queue whose message that log holds is
skipped (the log's copy stands for it).

A read the disk refuses (an OSError: EIO, a file that cannot be opened) is not corruption: the
records read before it are handed out, the reader stays where it was, `read_error` says why,
and the next `take` tries again (the daemon retries after READ_RETRY_INTERVAL). go-diskqueue
renames the segment ``.bad`` on any read error and loses what it held; only records that are
read and found malformed are treated so here.

Beyond go-diskqueue, every segment this queue writes gets a checksum side file
(checksums.py): the record units of each append are built with it (`SideWriter`) and written by
the sync round that fsynced the records; a segment's reader checks records against them before
handing them out (`_check_ahead`), and a record that fails its check is moved to
``<name>.diskqueue.bad``, logged and counted (`corrupt_records`) instead of being handed out.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..protocol.crc32c import crc32c
from . import checksums
from .checksums import BAD, CHECKED, UNCHECKED, UNIT, Ahead, SideReader, SideWriter
from .deferred import DeferredLog, Held
from .files import (
    Metadata,
    bad_records_file_name,
    data_file_name,
    deferred_file_name,
    deferred_log_name,
    encode_deferred,
    metadata_file_name,
    side_file_name,
    write_file_atomically,
)
from .fs import LOCAL, O_CREAT, O_RDONLY, O_TRUNC, O_WRONLY, FileSystem, write_all
from .peek import QueuePeek
from .recovery import Recovered, log_recovery, recover

if TYPE_CHECKING:
    from .syncer import DiskSyncer

log = logging.getLogger("trionsq.diskqueue")

_LENGTH = struct.Struct(">I")
_FRAME_HEADER = struct.Struct(">Ii")
_FRAME_TYPE_MESSAGE = 2
#: A frame is [4-byte size][4-byte frame type][payload]; a record is [4-byte length][payload].
_FRAME_OVERHEAD = 8
#: Offsets of the message ID in a record (after the length, timestamp and attempts).
_RECORD_ID = slice(14, 30)
_ID_IN_PAYLOAD = 10
_FRAME_ID = slice(18, 34)
#: Bytes read from a segment at a time.
READ_CHUNK = 1 << 20
#: Runs of read records (`DiskQueue._runs`) a tracking queue keeps before it drops those no
#: owed message needs (then again each time their number doubles).
_RUNS_KEPT = 1 << 12
#: Records of one size handed out at once by the read loops (and the fewest worth it).
_BLOCK = 512
_BLOCK_MIN = 8

#: Bytes of checksum units a queue holds for a segment before it gives up on checking it (a
#: sync that keeps failing would let them grow without end).
_SIDE_HELD_MAX = 64 << 20

_NOTHING: dict[bytes, Held] = {}


def _noop() -> None:
    pass


class SyncJob(NamedTuple):
    """The blocking part of one queue's sync, in two steps: `fsync` makes its data durable;
    `persist` (run only once every queue of the sync round has done `fsync`) writes its
    metadata and deletes what its metadata no longer needs. A move between queues (topic to
    channel) is then never recorded as done before the copy it made is durable."""

    fsync: Callable[[], None]
    persist: Callable[[], None]


class DiskQueueError(Exception):
    """A write the queue refuses (closed, or a record size outside the limits)."""


class Records(list[bytes]):
    """What `take_records` returns: whole records in one or more pieces, and, when every one
    of them was checked against its segment's side file (checksums.py), their record units,
    so that `put_records` need not compute them again."""

    units: bytes | None = None


#: One side-file job of a sync round: the side, its descriptor, where and what to write,
#: whether to fsync what was written before, and whether to fsync after (its segment is done).
_SideJob = tuple[SideWriter, int, int, bytes, bool, bool]


class _CorruptRecord(Exception):
    #: Records consumed by the read before it met the corruption.
    consumed = 0


class _ReadFailed(Exception):
    """The disk refused a read (`error`) after `consumed` records of the batch."""

    def __init__(self, error: OSError, consumed: int) -> None:
        super().__init__(error)
        self.error = error
        self.consumed = consumed


class DiskQueue:
    """A FIFO of message frames in ``<data_path>/<name>.diskqueue.*`` (docs/protocol.md §7)."""

    def __init__(
        self,
        name: str,
        data_path: str,
        *,
        max_bytes_per_file: int,
        min_msg_size: int,
        max_msg_size: int,
        sync_every: int,
        syncer: DiskSyncer | None = None,
        track_consumption: bool = False,
        fs: FileSystem = LOCAL,
        recovered: Recovered | None = None,
        delay_deferred_drops: bool = False,
        logger: logging.Logger | None = None,
    ) -> None:
        """`recovered`: the state `recover` found on disk for this queue (run beforehand in a
        worker thread); without it the queue recovers itself, blocking. `delay_deferred_drops`:
        see deferred.py (--sync-ack). `logger`: where its lines go (go-diskqueue's logf; nsqd
        passes its own), else ``trionsq.diskqueue``."""
        #: The queue's log (go-diskqueue's lines: ``DISKQUEUE(name): ...``).
        self.logger = logger if logger is not None else log
        self.name = name
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        self.min_msg_size = min_msg_size
        self.max_msg_size = max_msg_size
        self.sync_every = max(sync_every, 1)
        self._fs = fs
        #: Messages not yet handed out by `take`.
        self.depth = 0
        #: Bytes of the records not yet handed out (length prefixes included): what a bounded
        #: queue's --max-queue-bytes limits. Kept per append and per read batch; after a
        #: skipped bad or missing segment it is an estimate until the reader reaches the writer.
        self.depth_bytes = 0
        #: Why the last read failed, until a read works again (see the module docstring).
        self.read_error: OSError | None = None
        #: Message ID -> due time (Unix ns) of messages that were deferred at shutdown.
        self.deferred_due: dict[bytes, int] = {}
        self._track = track_consumption
        #: Message ID -> sequence number (`_handed`) of the messages handed out and not
        #: released (truthy exactly when something is owed).
        self.owed: dict[bytes, int] = {}
        # Records read by a tracking queue are numbered in read order (a skipped second copy
        # too): `_handed` is the next number. `_runs` locates them: (first number, file,
        # position, size) per run of records read one after another, record `first + i` at
        # `position + i * size` (size 0: a run of one), up to the next run's first number.
        # The committed position is that of the oldest owed record, found from `owed` only
        # when a sync asks (`_committed`): a read or a release costs a dict operation.
        self._handed = 0
        self._runs: list[tuple[int, int, int, int]] = []
        self._runs_trim_at = _RUNS_KEPT
        self._oldest_owed = -1  # the number of the oldest owed record at the last sync
        self._read_file = 0
        self._read_pos = 0
        self._read_end = 0  # size of the read file, once writes moved past it
        self._rfd: int | None = None
        self._rbuf = b""
        self._rview = memoryview(self._rbuf)
        self._rbuf_pos = 0  # file position of _rbuf[0]
        self._roff = 0  # next record's offset in _rbuf
        self._write_file = 0
        self._write_pos = 0
        self._wfd: int | None = None
        self._retired_fds: list[int] = []  # write files to fsync and close in the next sync
        # Segments that were on disk at open (ascending, not yet deleted), and the first file
        # this process writes: files from there on are numbered one after another.
        self._old_segments: list[int] = []
        self._segments_at_open: list[int] = []
        self._first_own_file = 0
        self._lowest_own = 0  # lowest own file that may still exist
        self._undeleted: list[str] = []  # finished segments a failed sync did not delete
        self._ops_since_sync = 0
        # Data written (or files created) since the syncer last captured the queue.
        self._unsynced_data = False
        self._new_files = False
        self._deferred_file_exists = False
        #: Records that failed their checksum and were moved to ``<name>.diskqueue.bad``.
        self.corrupt_records = 0
        # Checksum side files (checksums.py): those of the segments this process writes (the
        # write file's, and rolled ones until their units are on disk), the write file's, how
        # the write file's goes on after a restart (from recovery: file, bytes kept, bytes to
        # append), what the running sync job writes of them (and its results), and the read
        # file's checks.
        self._sides: dict[int, SideWriter] = {}
        self._side: SideWriter | None = None
        self._side_resume: tuple[int, int, bytes] | None = None
        self._side_jobs: tuple[list[_SideJob], list[bool | OSError | None]] = ([], [])
        self._chk: SideReader | None = None
        # The file records that failed their checksum are moved to.
        self._bad_fd: int | None = None
        self._bad_size = 0
        self._bad_dirty = False
        self._log: DeferredLog | None = None
        self._delay_drops = delay_deferred_drops
        #: The deferred log's messages (empty while there is no log): read from it on the hot
        #: path, so it is an attribute rather than a property.
        self._held: dict[bytes, Held] = _NOTHING
        self.closed = False
        self.deleted = False
        self._syncer = syncer
        if recovered is None:
            recovered = recover(
                fs, name, data_path, min_msg_size=min_msg_size, max_msg_size=max_msg_size
            )
        self._apply(recovered)
        if syncer is not None:
            syncer.add(self)

    # -- opening --------------------------------------------------------------------------

    def _apply(self, recovered: Recovered) -> None:
        log_recovery(self.name, recovered, self.logger)
        meta = recovered.meta
        self.depth = max(meta.depth, 0)
        self.depth_bytes = recovered.queued_bytes
        self._read_file, self._read_pos = meta.read_file, meta.read_pos
        self._write_file, self._write_pos = meta.write_file, meta.write_pos
        self._segments_at_open = list(recovered.segments)
        self._old_segments = [n for n in recovered.segments if n < meta.write_file]
        self._first_own_file = self._lowest_own = meta.write_file
        self.deferred_due = recovered.deferred_due
        self._deferred_file_exists = recovered.deferred_file_exists
        self._side_resume = recovered.side_resume
        if recovered.held or recovered.log_size:
            self._log = DeferredLog(
                self._fs,
                deferred_log_name(self.data_path, self.name),
                recovered.held,
                recovered.log_size,
                delay_drops=self._delay_drops,
                logger=self.logger,
            )
            self._held = self._log.held

    # -- writing --------------------------------------------------------------------------

    def put(self, frame: bytes) -> None:
        self.put_many([frame])

    def put_many(self, frames: list[bytes]) -> None:
        """Append message frames. Raises OSError when the disk refuses (nothing of the failed
        write is kept) and DiskQueueError when closed or a size is out of limits."""
        if not frames:
            return
        if self.closed:
            raise DiskQueueError("exiting")
        payloads = [frame[_FRAME_OVERHEAD:] for frame in frames]
        lengths = array("I", map(len, payloads))
        for size in (min(lengths), max(lengths)):
            if not self.min_msg_size <= size <= self.max_msg_size:
                raise DiskQueueError(
                    f"invalid message write size ({size}) minMsgSize={self.min_msg_size} "
                    f"maxMsgSize={self.max_msg_size}"
                )
        # The payloads' CRC-32Cs, for the segment's side file (checksums.py).
        crcs = array("I", map(crc32c, payloads)) if checksums.ENABLED else None
        count = len(frames)
        pos = self._write_pos
        total = sum(lengths) + 4 * count
        if pos + total <= self.max_bytes_per_file or (pos == 0 and count == 1):
            # No roll (the common case): the records at once.
            parts: list[bytes] = [b""] * (2 * count)
            parts[0::2] = map(_LENGTH.pack, lengths)
            parts[1::2] = payloads
            self._append(parts, count, pos + total, lengths, crcs)
        else:
            self._put_rolling(lengths, payloads, crcs)
        if self.owed:
            # A message handed out and now written again (requeued, or saved at shutdown):
            # the new copy stands for it.
            for frame in frames:
                self.release(frame[_FRAME_ID])

    def _put_rolling(
        self, lengths: array[int], payloads: list[bytes], crcs: array[int] | None
    ) -> None:
        """Append records that do not all fit the write file: roll before each record where
        go would."""
        pack = _LENGTH.pack
        limit = self.max_bytes_per_file
        parts: list[bytes] = []
        first = 0
        pos = self._write_pos
        for i, length in enumerate(lengths):
            if pos > 0 and pos + 4 + length > limit:
                if i > first:
                    self._append(parts, i - first, pos, lengths[first:i], crcs and crcs[first:i])
                    parts, first = [], i
                self._roll()
                pos = 0
            parts.append(pack(length))
            parts.append(payloads[i])
            pos += 4 + length
        self._append(parts, len(lengths) - first, pos, lengths[first:], crcs and crcs[first:])

    def put_records(self, pieces: list[bytes], count: int) -> None:
        """Append `count` whole records given as go-diskqueue bytes (from another queue's
        `take_records`; their sizes were checked when read, and their checksum units come
        with them when they were checked: `Records`). Raises as `put_many`."""
        if not count:
            return
        if self.closed:
            raise DiskQueueError("exiting")
        units = getattr(pieces, "units", None)
        total = sum(map(len, pieces))
        limit = self.max_bytes_per_file
        pos = self._write_pos
        if pos + total <= limit:
            self._append(pieces, count, pos + total, units=units, raw=True)
            return
        # The run crosses a segment boundary: roll before each record where go would.
        records: list[memoryview] = []
        for piece in pieces:
            view = memoryview(piece)
            i = 0
            while i < len(piece):
                size = 4 + _LENGTH.unpack_from(piece, i)[0]
                records.append(view[i : i + size])
                i += size
        parts: list[memoryview] = []
        first = 0
        for i, record in enumerate(records):
            if pos > 0 and pos + len(record) > limit:
                if parts:
                    chunk = units and units[UNIT * first : UNIT * i]
                    self._append(parts, len(parts), pos, units=chunk, raw=True)
                    parts, first = [], i
                self._roll()
                pos = 0
            parts.append(record)
            pos += len(record)
        self._append(parts, len(parts), pos, units=units and units[UNIT * first :], raw=True)

    def _append(
        self,
        parts: Sequence[bytes | memoryview],
        count: int,
        new_pos: int,
        lengths: array[int] | None = None,
        crcs: array[int] | None = None,
        *,
        units: bytes | None = None,
        raw: bool = False,
    ) -> None:
        """Write `count` records (`parts` joined) at the write position. Their side-file units
        come as `units`, or are made from their `lengths` and payload `crcs`, or (`raw`) from
        the records themselves."""
        fs = self._fs
        fd = self._wfd if self._wfd is not None else self._open_write_file()
        data = b"".join(parts)
        try:
            write_all(fs, fd, data, self._write_pos)
        except OSError:
            # Leave no partial record behind: the next write starts where this one did.
            try:
                fs.ftruncate(fd, self._write_pos)
            except OSError:
                self._retired_fds.append(fd)
                self._wfd = None
            raise
        self.depth_bytes += new_pos - self._write_pos
        self._write_pos = new_pos
        self.depth += count
        side = self._side
        if side is not None and not side.failed:
            if units is None:
                if crcs is not None and lengths is not None:
                    units = checksums.record_units(lengths, crcs)
                elif raw:
                    units = _units_of(data)
            if units is not None:
                side.add(data, units, lengths)
                if len(side.buf) > _SIDE_HELD_MAX:
                    # Syncs have not written them for that long (they fail): the records from
                    # here on go unchecked rather than the memory.
                    self.logger.warning(
                        "DISKQUEUE(%s) %d bytes of checksums not written; the rest of %s is "
                        "not checked",
                        self.name,
                        len(side.buf),
                        data_file_name(self.data_path, self.name, side.num),
                    )
                    self._retire_side(side, drop=True)
        self._data_written()
        self._count_ops(count)

    def _open_write_file(self) -> int:
        path = data_file_name(self.data_path, self.name, self._write_file)
        fresh = self._write_pos == 0
        fd = self._fs.open(path, O_WRONLY | O_CREAT | (O_TRUNC if fresh else 0), 0o600)
        try:
            if not fresh:
                self._fs.ftruncate(fd, self._write_pos)
        except OSError:
            self._fs.close(fd)
            raise
        self._wfd = fd
        self._new_files |= fresh
        self.logger.info("DISKQUEUE(%s): writeOne() opened %s", self.name, path)
        if checksums.ENABLED:
            self._open_side(fresh)
        return fd

    def _open_side(self, fresh: bool) -> None:
        """The write file's side file: a new one with a new segment; after a restart, the one
        recovery checked (`Recovered.side_resume`), or none."""
        num = self._write_file
        side = self._sides.get(num)
        if side is not None:
            if not fresh:
                self._side = side  # the write file was reopened after a failed write
                return
            self._retire_side(side, drop=True)
        keep, pending = 0, b""
        if not fresh:
            resume, self._side_resume = self._side_resume, None
            if resume is None or resume[0] != num:
                return
            _, keep, pending = resume
        path = side_file_name(self.data_path, self.name, num)
        fd = None
        try:
            fd = self._fs.open(path, O_WRONLY | O_CREAT | (O_TRUNC if fresh else 0), 0o600)
            if not fresh:
                self._fs.ftruncate(fd, keep)
        except OSError as err:
            if fd is not None:
                _close_all(self._fs, [fd])
            self.logger.warning(
                "DISKQUEUE(%s) failed to open %s - %s; its records are not checked",
                self.name,
                path,
                err.strerror or err,
            )
            return
        side = SideWriter(num, fd, flushed=keep, pending=pending, fresh=fresh)
        side.dirty = not fresh  # the truncation
        self._sides[num] = self._side = side

    def _retire_side(self, side: SideWriter, *, drop: bool = False) -> None:
        """`side`'s segment gets no more records: its units are written by the next sync, then
        its descriptor is closed; with `drop`, none are written and the next sync closes it."""
        side.retired = True
        if side is self._side:
            self._side = None
        if drop:
            side.drop()
            self._forget_side(side)

    def _forget_side(self, side: SideWriter) -> None:
        """`side` is done with: the next sync closes its descriptor."""
        if side.fd is not None:
            self._retired_fds.append(side.fd)
            side.fd = None
        if self._sides.get(side.num) is side:
            del self._sides[side.num]
        if side is self._side:
            self._side = None

    def _roll(self) -> None:
        """Continue in the next segment (the finished one is fsynced by the next sync)."""
        if self._read_file == self._write_file:
            self._read_end = self._write_pos
        if self._wfd is not None:
            self._retired_fds.append(self._wfd)
            self._wfd = None
        if self._side is not None:
            self._retire_side(self._side)
        self._write_file += 1
        self._write_pos = 0
        self._request_sync()

    def _data_written(self) -> None:
        if not self._unsynced_data:
            self._unsynced_data = True
            if self._syncer is not None:
                self._syncer.mark_dirty(self)

    # -- deferred messages ----------------------------------------------------------------

    def hold_deferred(self, entries: Iterable[tuple[bytes, int]]) -> None:
        """Keep (frame, due time in Unix ns) entries in the deferred log until
        `drop_deferred`. Raises OSError when the disk refuses, DiskQueueError when closed."""
        if self.closed:
            raise DiskQueueError("exiting")
        log = self._log
        if log is None:
            log = self._log = DeferredLog(
                self._fs,
                deferred_log_name(self.data_path, self.name),
                delay_drops=self._delay_drops,
                logger=self.logger,
            )
            self._held = log.held
        log.hold(entries)
        self._new_files = True
        self._data_written()

    def drop_deferred(self, message_ids: Iterable[bytes]) -> None:
        """The messages left the deferred log (they were written elsewhere first)."""
        if self._log is not None and not self.closed:
            self._log.drop(message_ids)
            self._data_written()

    @property
    def held_deferred(self) -> dict[bytes, Held]:
        """Message ID -> (due time in Unix ns, frame) of the messages the deferred log holds."""
        return self._held

    def clear_deferred(self) -> None:
        """Hold no deferred messages any more: they are being written to the queue (at
        shutdown). The log is removed by the next sync, once that copy is durable; a crash
        before leaves both, and the log's copy stands for the queue's."""
        if self._log is not None:
            self._log.remove()
            self._data_written()

    # -- reading --------------------------------------------------------------------------

    def take(self, max_count: int) -> list[bytes]:
        """Hand out up to `max_count` frames, oldest first."""
        out: list[bytes] = []
        self._consume(max_count, lambda want, end: self._read_records(out, want, end))
        if len(self._runs) > self._runs_trim_at:
            self._forget_runs(min(self.owed.values()) if self.owed else self._handed)
        return out

    def drop(self, max_count: int) -> int:
        """Drop up to `max_count` messages from the head, as if handed out and finished at
        once (a bounded queue's drop-oldest); returns how many."""
        frames = self.take(max_count)
        if self.owed or self.deferred_due:
            for frame in frames:
                message_id = frame[_FRAME_ID]
                self.release(message_id)
                self.deferred_due.pop(message_id, None)
        return len(frames)

    def take_records(self, max_count: int) -> tuple[list[bytes], int]:
        """Up to `max_count` records as go-diskqueue bytes (whole records, in one or more
        pieces) and their count: for moving messages to other queues (`put_records`)
        without decoding them. Not for a queue that tracks consumption or whose deferred log
        holds messages (those records are checked one by one)."""
        assert not self._track and not self._held, "these records must be decoded"
        pieces = Records()
        units: list[bytes | None] | None = [] if checksums.ENABLED else None
        count = self._consume(max_count, lambda want, end: self._read_raw(pieces, want, end), units)
        if units and None not in units:
            joined = b"".join(units)  # type: ignore[arg-type]
            if len(joined) == UNIT * count:
                pieces.units = joined
        return pieces, count

    def _consume(
        self,
        max_count: int,
        read: Callable[[int, int], int],
        units: list[bytes | None] | None = None,
    ) -> int:
        """Run `read(wanted, end)` over the segments until `max_count` records are consumed
        or the reader reaches the writer; returns the records consumed. Where the read file
        has a side file, records are checked before `read` gets them (`_check_ahead`), and
        `units` gets the side-file units of the records consumed (None for records read
        unchecked)."""
        done = 0
        while done < max_count:
            if self._read_file == self._write_file and self._read_pos >= self._write_pos:
                break
            try:
                if self._rfd is None and not self._open_read_file():
                    continue
                end = self._write_pos if self._read_file == self._write_file else self._read_end
                if self._read_pos >= end:
                    self._next_read_file()
                    continue
                chk = self._chk
                if chk is not None:
                    if not chk.ready:
                        self._check_ahead(chk, end)
                        continue
                    item = chk.ready[0]
                    if item.kind == BAD:
                        self._set_aside(chk, item, end)
                        continue
                    if item.end < end:
                        end = item.end
                n = read(max_count - done, end)
                done += n
                if chk is not None:
                    self._checked(chk, n, units)
                elif units is not None and n:
                    units.append(None)
            except _CorruptRecord as err:
                done += err.consumed
                if units is not None:
                    units.append(None)
                self._skip_bad_read_file(str(err))
            except _ReadFailed as err:
                done += err.consumed
                if units is not None:
                    units.append(None)
                self._read_failed(err.error)
                break
            except OSError as err:  # opening the read file
                self._read_failed(err)
                break
            else:
                if self.read_error is not None:
                    self._read_recovered()
        if (
            self._rfd is not None
            and self._read_file < self._write_file
            and self._read_pos >= self._read_end
        ):
            # Like go's reader, leave a finished file as its last record is read: the persisted
            # position is then never the end of a finished file (go would rename it .bad).
            self._next_read_file()
        at_tail = self._read_file == self._write_file and self._read_pos >= self._write_pos
        if at_tail:
            self.depth_bytes = 0
        if self.depth and at_tail:
            self.logger.error(
                "DISKQUEUE(%s) depth %d at tail, metadata corruption or data loss, resetting 0",
                self.name,
                self.depth,
            )
            self.depth = 0
        elif not self.depth and not at_tail:
            # Records remain that the depth does not count (it is only a count kept beside the
            # positions): keep it at one until the reader reaches the writer, or the consumers
            # would stop asking for them.
            self.depth = 1
        return done

    # The two read loops below are the disk paths' hot loops, shaped by what CPython charges:
    # a record read one by one costs a dozen bytecode-level steps (its length, bounds,
    # slices, the frame's header). Where the records that follow all have the first one's
    # length (one producer's messages often do), `_same_size` confirms it with four strided
    # slices, and a block of them is then handed out with list comprehensions and C-level
    # dict and array operations instead (`_take_block`), or just counted (`_read_raw`).

    def _read_records(self, out: list[bytes], want: int, end: int) -> int:
        """Decode up to `want` records of the read file (before `end`) into frames appended
        to `out`; returns the records consumed (a skipped copy counts)."""
        buf, view, off, base = self._rbuf, self._rview, self._roff, self._rbuf_pos
        unpack = _LENGTH.unpack_from
        pack = _FRAME_HEADER.pack
        lo, hi = self.min_msg_size, self.max_msg_size
        track = self._track
        held = self._held
        owed = self.owed
        runs = self._runs
        file = self._read_file
        consumed = 0
        try:
            while consumed < want and base + off < end:
                count = 0
                if off + 4 <= len(buf):
                    length = unpack(buf, off)[0]
                    size = 4 + length
                    count = min((min(len(buf), end - base) - off) // size, want - consumed, _BLOCK)
                    if (
                        count >= _BLOCK_MIN
                        and lo <= length <= hi
                        and self._take_block(out, buf, off, count, length, base + off)
                    ):
                        consumed += count
                        off += count * size
                        continue
                # One by one: the records that were not a block, or the buffer's last ones.
                limit = min(want, consumed + max(count, _BLOCK_MIN))
                while consumed < limit and base + off < end:
                    if off + 4 > len(buf):
                        buf, view, off, base = self._refill(off, 4, end)
                    length = unpack(buf, off)[0]
                    if length < lo or length > hi:
                        raise _CorruptRecord(f"invalid message read size ({length})")
                    stop = off + 4 + length
                    if stop > len(buf):
                        buf, view, off, base = self._refill(off, 4 + length, end)
                        stop = off + 4 + length
                    consumed += 1
                    if track or held:
                        message_id = buf[off + _RECORD_ID.start : off + _RECORD_ID.stop]
                        # A second copy (a crash made the writer repeat it) of a message
                        # handed out or held deferred is skipped: that one stands for both.
                        # It keeps its number, so that the persisted depth still counts it.
                        if track:
                            seq = self._handed
                            self._handed = seq + 1
                            runs.append((seq, file, base + off, 0))
                            if (held and message_id in held) or owed.setdefault(
                                message_id, seq
                            ) != seq:
                                off = stop
                                continue
                        elif message_id in held:
                            off = stop
                            continue
                    out.append(pack(length + 4, _FRAME_TYPE_MESSAGE) + view[off + 4 : stop])
                    off = stop
        except _CorruptRecord as err:
            err.consumed = consumed
            raise
        except OSError as err:
            raise _ReadFailed(err, consumed) from err
        finally:
            self._read_done(off, base, consumed)
        return consumed

    def _take_block(
        self, out: list[bytes], buf: bytes, off: int, count: int, length: int, position: int
    ) -> bool:
        """Hand out the `count` records from offset `off` of the buffer (file position
        `position`) at once, if they all have `length` and none is a second copy of a message
        owed or held; else False (the caller reads them one by one)."""
        size = 4 + length
        if not _same_size(buf, off, count, size):
            return False
        starts = range(off + 4, off + count * size, size)  # where their payloads start
        if self._track or self._held:
            ids = [buf[p + _ID_IN_PAYLOAD : p + _ID_IN_PAYLOAD + 16] for p in starts]
            if self._held and not self._held.keys().isdisjoint(ids):
                return False
            if self._track:
                owed = self.owed
                if not owed.keys().isdisjoint(ids):
                    return False
                known = len(owed)
                first = self._handed
                owed.update(zip(ids, range(first, first + count), strict=True))
                if len(owed) != known + count:  # a message twice in the block
                    for message_id in ids:
                        owed.pop(message_id, None)
                    return False
                self._handed = first + count
                self._runs.append((first, self._read_file, position, size))
        header = _FRAME_HEADER.pack(size, _FRAME_TYPE_MESSAGE)
        out += [header + buf[p : p + length] for p in starts]
        return True

    def _read_raw(self, pieces: list[bytes], want: int, end: int) -> int:
        """Up to `want` whole records of the read file (before `end`), undecoded, appended to
        `pieces` as contiguous runs; returns how many."""
        buf, off, base = self._rbuf, self._roff, self._rbuf_pos
        unpack = _LENGTH.unpack_from
        lo, hi = self.min_msg_size, self.max_msg_size
        run_start = off
        consumed = 0
        try:
            while consumed < want and base + off < end:
                count = 0
                if off + 4 <= len(buf):
                    length = unpack(buf, off)[0]
                    size = 4 + length
                    count = min((min(len(buf), end - base) - off) // size, want - consumed, _BLOCK)
                    if (
                        count >= _BLOCK_MIN
                        and lo <= length <= hi
                        and _same_size(buf, off, count, size)
                    ):
                        consumed += count
                        off += count * size
                        continue
                limit = min(want, consumed + max(count, _BLOCK_MIN))
                while consumed < limit and base + off < end:
                    if off + 4 > len(buf):
                        if off > run_start:
                            pieces.append(buf[run_start:off])
                            run_start = off
                        buf, _, off, base = self._refill(off, 4, end)
                        run_start = off
                    length = unpack(buf, off)[0]
                    if length < lo or length > hi:
                        raise _CorruptRecord(f"invalid message read size ({length})")
                    stop = off + 4 + length
                    if stop > len(buf):
                        if off > run_start:
                            pieces.append(buf[run_start:off])
                            run_start = off
                        buf, _, off, base = self._refill(off, 4 + length, end)
                        run_start = off
                        stop = off + 4 + length
                    off = stop
                    consumed += 1
        except _CorruptRecord as err:
            err.consumed = consumed
            raise
        except OSError as err:
            raise _ReadFailed(err, consumed) from err
        finally:
            if off > run_start:
                pieces.append(buf[run_start:off])
            self._read_done(off, base, consumed)
        return consumed

    def _read_done(self, off: int, base: int, consumed: int) -> None:
        self._roff = off
        self.depth_bytes = max(self.depth_bytes - (base + off - self._read_pos), 0)
        self._read_pos = base + off
        self.depth = max(self.depth - consumed, 0)
        self._count_ops(consumed)

    def _refill(self, off: int, need: int, end: int) -> tuple[bytes, memoryview, int, int]:
        """Read on so that `need` bytes from offset `off` of the buffer are buffered; a segment
        that ends first is corrupt (truncated)."""
        assert self._rfd is not None
        buf = self._rbuf
        have = len(buf) - off
        file_pos = self._rbuf_pos + len(buf)
        want = min(max(READ_CHUNK, need) - have, end - file_pos)
        data = self._fs.pread(self._rfd, want, file_pos) if want > 0 else b""
        if have + len(data) < need:
            raise _CorruptRecord(
                f"short read: {have + len(data)} of {need} bytes at {self._rbuf_pos + off}"
            )
        self._rbuf = buf = buf[off:] + data
        self._rview = view = memoryview(buf)
        self._rbuf_pos += off
        self._roff = 0
        return buf, view, 0, self._rbuf_pos

    # -- checksums ------------------------------------------------------------------------
    # A read file with a side file (checksums.py) is read a run of records at a time: before
    # the read loops get records, `_check_ahead` checks them against their units (a run with
    # one CRC-32C over its bytes, else record by record) and queues what lies ahead in
    # `SideReader.ready`; `_consume` then lets the read loops go only up to the end of the
    # first item, and moves a record that failed its check aside (`_set_aside`).

    def _open_checks(self, fd: int) -> SideReader | None:
        """The checks of the read file just opened on `fd`: None if it has no side file, or
        one that does not belong to it. A side file that cannot be read is no read error:
        the records are read unchecked."""
        if not checksums.ENABLED:
            return None
        fs = self._fs
        own = self._sides.get(self._read_file)
        path = side_file_name(self.data_path, self.name, self._read_file)
        try:
            sfd = fs.open(path, O_RDONLY)
        except OSError:
            return None
        try:
            if own is not None:
                return SideReader(fs, sfd, 0, own, self.min_msg_size, self.max_msg_size)
            size = fs.fsize(sfd)
            first = checksums.parse_header(fs.pread(sfd, checksums.HEADER_SIZE, 0))
            if first is not None:
                chk = SideReader(fs, sfd, size, None, self.min_msg_size, self.max_msg_size)
                if checksums.matches(fs, fd, fs.fsize(fd), chk, first):
                    return chk
                self.logger.warning(
                    "DISKQUEUE(%s) ignoring %s: it does not belong to %s",
                    self.name,
                    path,
                    data_file_name(self.data_path, self.name, self._read_file),
                )
        except OSError:
            pass
        _close_all(fs, [sfd])
        return None

    def _check_ahead(self, chk: SideReader, end: int) -> None:
        """Queue in `chk.ready` what lies ahead of the reader (which is at the end of what was
        queued before): runs of records checked, records to read unchecked (no units for
        them), or a record that failed its check."""
        pos = self._read_pos
        runs = chk.runs
        try:
            while True:
                if not runs:
                    if chk.fill():
                        continue
                    break
                start, stop = runs[0][0], runs[0][1]
                if stop <= pos:
                    runs.popleft()  # the reader started after them
                elif start < pos:
                    self._split_run(chk, pos)
                else:
                    break
        except OSError:  # the side file cannot be read: no more checks
            self._stop_checks(chk, end)
            return
        if not runs:
            chk.ready.append(Ahead(UNCHECKED, end))
            return
        if runs[0][0] > pos:
            chk.ready.append(Ahead(UNCHECKED, min(runs[0][0], end)))
            return
        # Runs whose bytes match their group's CRC, as many as are buffered (the first one
        # read in if need be), handed out as one item; runs whose units are still in memory
        # (appended since the last sync) need no check.
        checked: list[bytes | None] = []
        while runs:
            start, stop, _, units, data_crc, units_crc, memory = runs[0]
            if start != pos or stop > end:
                break
            if memory:
                checked.append(units)
                runs.popleft()
                pos = stop
                continue
            if data_crc is None:
                break
            base = self._rbuf_pos
            if stop > base + len(self._rbuf):
                if checked:
                    break
                # Read up to the end of a run (about READ_CHUNK on), so that the next read
                # does not carry a run's beginning over.
                self._refill(self._roff, stop - pos, _runs_end(runs, pos, end))
                base = self._rbuf_pos
            if crc32c(self._rview[start - base : stop - base]) != data_crc:
                break
            # The units go on with the records (`put_records`) only if they can be believed.
            checked.append(units if crc32c(units) == units_crc else None)
            runs.popleft()
            pos = stop
        if checked:
            joined = None if None in checked else b"".join(checked)  # type: ignore[arg-type]
            chk.ready.append(Ahead(CHECKED, pos, joined))
        else:
            self._check_records(chk, end)

    def _check_records(self, chk: SideReader, end: int) -> None:
        """Check the first run's records one by one (it has no group, or its bytes do not
        match their group's CRC): queue the good ones, then one that does not match its unit;
        if its units cannot be believed, stop the checks."""
        run = chk.runs.popleft()
        start, stop, n, units, _, _, _ = run
        if not checksums.believed(run):
            self._stop_checks(chk, end)
            return
        words = checksums._words(units)
        lengths, crcs = words[0::2], words[1::2]
        real_stop = start + 4 * n + sum(lengths)
        chk.mend(stop, real_stop)
        lo, hi = self.min_msg_size, self.max_msg_size
        pos = start
        for i in range(n):
            length = lengths[i]
            record_end = pos + 4 + length
            if not lo <= length <= hi or record_end > end:
                # A length go's reader refuses, or a segment that ends inside the record: the
                # read loop says so (the rest is unchecked).
                if i:
                    chk.ready.append(Ahead(CHECKED, pos, units[: UNIT * i]))
                self._stop_checks(chk, end)
                return
            if record_end > self._rbuf_pos + len(self._rbuf):
                try:
                    self._refill(self._roff, record_end - self._read_pos, end)
                except OSError:
                    if not i:
                        raise  # a read error
                    # Hand out the records checked so far; the next check reads on.
                    chk.ready.append(Ahead(CHECKED, pos, units[: UNIT * i]))
                    _check_later(chk, pos, real_stop, n - i, units[UNIT * i :])
                    return
            off = pos - self._rbuf_pos
            view = self._rview
            if (
                view[off : off + 4] != _LENGTH.pack(length)
                or crc32c(view[off + 4 : off + 4 + length]) != crcs[i]
            ):
                if i:
                    chk.ready.append(Ahead(CHECKED, pos, units[: UNIT * i]))
                chk.ready.append(Ahead(BAD, record_end, units[UNIT * i : UNIT * (i + 1)], length))
                if i + 1 < n:
                    _check_later(chk, record_end, real_stop, n - i - 1, units[UNIT * (i + 1) :])
                return
            pos = record_end
        chk.ready.append(Ahead(CHECKED, pos, units))

    def _split_run(self, chk: SideReader, pos: int) -> None:
        """The reader starts inside the first run (at `pos`): keep its records from there
        (checked one by one), or none if no record of it starts there."""
        run = chk.runs.popleft()
        start, stop, n, units, _, _, memory = run
        if not checksums.believed(run):
            chk.broken = True
            chk.runs.clear()
            return
        lengths = checksums.unit_lengths(units)
        real_stop = start + 4 * n + sum(lengths)
        chk.mend(stop, real_stop)
        at = start
        for i, length in enumerate(lengths):
            if at == pos:
                if memory:
                    chk.runs.appendleft(
                        (pos, real_stop, n - i, units[UNIT * i :], None, None, True)
                    )
                else:
                    _check_later(chk, pos, real_stop, n - i, units[UNIT * i :])
                return
            at += 4 + length

    def _stop_checks(self, chk: SideReader, end: int) -> None:
        """No more checks in this segment (units that cannot be believed, a side file that
        cannot be read): the rest is read unchecked."""
        chk.broken = True
        chk.runs.clear()
        last = chk.ready[-1].end if chk.ready else self._read_pos
        if last < end:
            chk.ready.append(Ahead(UNCHECKED, end))

    def _checked(self, chk: SideReader, n: int, units: list[bytes | None] | None) -> None:
        """The read loop consumed `n` records of the first item ahead."""
        item = chk.ready[0]
        if units is not None and n:
            if item.kind == CHECKED and item.units is not None:
                units.append(item.units[item.offset : item.offset + UNIT * n])
            else:
                units.append(None)
        item.offset += UNIT * n
        if self._read_pos >= item.end:
            chk.ready.popleft()

    def _set_aside(self, chk: SideReader, item: Ahead, end: int) -> None:
        """The record at the read position failed its check: append it (the length its unit
        gives, the payload as read) to ``<name>.diskqueue.bad``, log it, count it and read
        on after it. A write there that fails is a read error: the reader stays before it."""
        pos = self._read_pos
        length = item.length
        size = 4 + length
        if pos + size > self._rbuf_pos + len(self._rbuf):
            self._refill(self._roff, size, end)
        off = self._roff
        found = _LENGTH.unpack_from(self._rbuf, off)[0]
        payload = self._rbuf[off + 4 : off + size]
        try:
            self._write_bad(_LENGTH.pack(length) + payload)
        except OSError as err:
            raise _ReadFailed(err, 0) from err
        if found != length:
            why = f"length {found}, not {length}"
        else:
            expected = int.from_bytes(item.units[4:8], "little")  # type: ignore[index]
            why = f"payload CRC-32C {crc32c(payload):08x}, not {expected:08x}"
        self.logger.error(
            "DISKQUEUE(%s) record at %d of %s fails its checksum (%s) - moved to %s",
            self.name,
            pos,
            data_file_name(self.data_path, self.name, self._read_file),
            why,
            bad_records_file_name(self.data_path, self.name),
        )
        self.corrupt_records += 1
        chk.ready.popleft()
        self._roff = off + size
        self._read_pos = pos + size
        self.depth = max(self.depth - 1, 0)
        self.depth_bytes = max(self.depth_bytes - size, 0)
        self._count_ops(1)
        self._request_sync()

    def _write_bad(self, record: bytes) -> None:
        fs = self._fs
        if self._bad_fd is None:
            fd = fs.open(bad_records_file_name(self.data_path, self.name), O_WRONLY | O_CREAT)
            try:
                self._bad_size = fs.fsize(fd)
            except OSError:
                _close_all(fs, [fd])
                raise
            self._bad_fd = fd
            self._new_files = True
        write_all(fs, self._bad_fd, record, self._bad_size)
        self._bad_size += len(record)
        self._bad_dirty = True
        self._data_written()

    def _open_read_file(self) -> bool:
        """Open the read file; False if it is missing (the reader moved on to the next).
        Raises OSError when the disk refuses."""
        path = data_file_name(self.data_path, self.name, self._read_file)
        try:
            fd = self._fs.open(path, O_RDONLY)
        except FileNotFoundError:
            self._skip_missing_read_file()
            return False
        if self._read_file < self._write_file:
            try:
                self._read_end = self._fs.fsize(fd)
            except OSError:
                self._fs.close(fd)
                raise
        self._rfd = fd
        self._reset_read_buffer()
        self.logger.info("DISKQUEUE(%s): readOne() opened %s", self.name, path)
        self._chk = self._open_checks(fd)
        return True

    def _reset_read_buffer(self) -> None:
        self._rbuf = b""
        self._rview = memoryview(self._rbuf)
        self._rbuf_pos = self._read_pos
        self._roff = 0

    def _close_read_file(self) -> None:
        if self._chk is not None:
            self._chk.close()
            self._chk = None
        if self._rfd is not None:
            fd, self._rfd = self._rfd, None
            with contextlib.suppress(OSError):
                # A read-only descriptor has nothing to lose, and Linux releases it even
                # when close reports an error.
                self._fs.close(fd)
        self._reset_read_buffer()

    def _next_read_file(self) -> None:
        self._close_read_file()
        self._read_file += 1
        self._read_pos = 0
        self._reset_read_buffer()
        self._request_sync()  # the finished segment can be deleted

    def _skip_missing_read_file(self) -> None:
        """The read file does not exist: go on at the next segment that may, in one step
        however far apart the numbers are (go-diskqueue tries each number in turn)."""
        missing = self._read_file
        if self._read_file == self._write_file:
            # Nothing was written where the writer stands: move it on too.
            self._retire_write_file()
            self._write_file += 1
            self._write_pos = 0
            after = self._write_file
        else:
            after = self._next_segment_after(missing)
        self.logger.error(
            "DISKQUEUE(%s) segment %s missing, reading on at %06d",
            self.name,
            f"{missing:06d}" if after == missing + 1 else f"{missing:06d}..{after - 1:06d}",
            after,
        )
        self._read_file, self._read_pos = after, 0
        self._reset_read_buffer()
        self._request_sync()

    def _next_segment_after(self, num: int) -> int:
        """The next segment number after `num` that may exist: one found at open, or one this
        process wrote (those follow one another from its first write file)."""
        if num + 1 >= self._first_own_file:
            return num + 1
        found = self._segments_at_open
        i = bisect.bisect_right(found, num)
        candidate = found[i] if i < len(found) else self._first_own_file
        return min(candidate, self._first_own_file, self._write_file)

    def _retire_write_file(self) -> None:
        if self._wfd is not None:
            self._retired_fds.append(self._wfd)
            self._wfd = None
        if self._side is not None:
            self._retire_side(self._side)

    def _read_failed(self, err: OSError) -> None:
        """The disk refused a read: say so once (until reading works again); the caller
        stops, and a later `take` tries again from where the reader stands."""
        if self.read_error is None:
            self.logger.error(
                "DISKQUEUE(%s) failed to read at %d of %s - %s; retrying",
                self.name,
                self._read_pos,
                data_file_name(self.data_path, self.name, self._read_file),
                err.strerror or err,
            )
        self.read_error = err
        # Read again from the reader's position, not from a buffer the failure left behind.
        self._close_read_file()

    def _read_recovered(self) -> None:
        self.logger.warning("DISKQUEUE(%s) reading again after a failed read", self.name)
        self.read_error = None

    def _skip_bad_read_file(self, why: str) -> None:
        """go-diskqueue's recovery: rename the segment ``.bad`` and go on with the next."""
        path = data_file_name(self.data_path, self.name, self._read_file)
        self.logger.error(
            "DISKQUEUE(%s) reading at %d of %s - %s", self.name, self._read_pos, path, why
        )
        if self._read_file == self._write_file:
            self._retire_write_file()
            self._write_file += 1
            self._write_pos = 0
        self.logger.warning(
            "DISKQUEUE(%s) jump to next file and saving bad file as %s.bad", self.name, path
        )
        try:
            self._fs.rename(path, path + ".bad")
        except OSError as err:
            self.logger.error(
                "DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s - %s",
                self.name,
                path,
                path + ".bad",
                err,
            )
        # Its side file stays beside it for the operator (recovery would remove it as one
        # whose segment is gone).
        side = self._sides.get(self._read_file)
        if side is not None:
            self._retire_side(side, drop=True)
        side_path = side_file_name(self.data_path, self.name, self._read_file)
        with contextlib.suppress(OSError):
            self._fs.rename(side_path, side_path + ".bad")
        self._close_read_file()
        self._read_file += 1
        self._read_pos = 0
        self._reset_read_buffer()
        self._request_sync()

    # -- peeking --------------------------------------------------------------------------

    def peek(self) -> QueuePeek:
        """Capture where the unread records are, for a read-only look at them in a worker
        thread (peek.py); nothing of the queue's state changes."""
        skip = frozenset(self._held) | frozenset(self.owed) if self._held or self.owed else None
        return QueuePeek(
            fs=self._fs,
            data_path=self.data_path,
            name=self.name,
            min_msg_size=self.min_msg_size,
            max_msg_size=self.max_msg_size,
            read_file=self._read_file,
            read_pos=self._read_pos,
            write_file=self._write_file,
            write_pos=self._write_pos,
            old_segments=tuple(n for n in self._segments_at_open if n >= self._read_file),
            first_own_file=self._first_own_file,
            skip=skip or frozenset(),
        )

    # -- consumption ----------------------------------------------------------------------

    def release(self, message_id: bytes) -> None:
        """A message `take` handed out is done with (finished, or written again)."""
        seq = self.owed.pop(message_id, None)
        if seq == self._oldest_owed and not self._ops_since_sync:
            # The committed read position moved (nothing was read since the last sync, so the
            # oldest owed message is still the one that sync found): the next --sync-timeout
            # tick persists it.
            self._ops_since_sync = 1
            if self._syncer is not None:
                self._syncer.mark_active(self)

    @property
    def owed_count(self) -> int:
        """Messages handed out and not yet released (kept on disk for a crash)."""
        return len(self.owed)

    def _committed(self) -> tuple[int, int, int]:
        """The committed read position (file, position): that of the oldest owed record, else
        the reader's; and how many records from there on were read (a crash reads them again,
        so the persisted depth counts them)."""
        oldest = self._oldest_owed = min(self.owed.values()) if self.owed else self._handed
        self._forget_runs(oldest)
        if not self._runs:
            return self._read_file, self._read_pos, 0
        first, file, position, size = self._runs[0]
        return file, position + (oldest - first) * size, self._handed - oldest

    def _forget_runs(self, below: int) -> None:
        """Drop the runs of records numbered below `below` (none of them owed)."""
        runs = self._runs
        if below >= self._handed:
            runs.clear()
        else:
            i = bisect.bisect_right(runs, below, key=lambda run: run[0]) - 1
            if i > 0:
                del runs[:i]
        self._runs_trim_at = max(2 * len(runs), _RUNS_KEPT)

    # -- emptying and lifecycle -----------------------------------------------------------

    def _finished_segments(self, below: int) -> list[str]:
        """The segments before file `below` that may still exist, taken off the books: the
        ones found at open and this process's own."""
        nums = []
        while self._old_segments and self._old_segments[0] < below:
            nums.append(self._old_segments.pop(0))
        nums += range(max(self._lowest_own, self._first_own_file), below)
        self._lowest_own = max(self._lowest_own, below)
        names = []
        for num in nums:
            names.append(data_file_name(self.data_path, self.name, num))
            # Its side file goes with it (after it: a crash between leaves no segment whose
            # side file is gone, only a side file whose segment is, which recovery removes).
            names.append(side_file_name(self.data_path, self.name, num))
            side = self._sides.get(num)
            if side is not None:
                self._retire_side(side, drop=True)
        return names

    def empty(self) -> None:
        """Drop every message: delete the segments and the metadata file; numbering goes on."""
        self.logger.info("DISKQUEUE(%s): emptying", self.name)
        self._empty()

    def _empty(self) -> None:
        self._close_read_file()
        self._retire_write_file()
        for side in list(self._sides.values()):
            self._retire_side(side, drop=True)
        self._side_resume = None
        for path in self._finished_segments(self._write_file + 1) + self._undeleted:
            _remove(self._fs, path, self.logger)
        self._undeleted = []
        _remove(self._fs, metadata_file_name(self.data_path, self.name), self.logger)
        self._write_file += 1
        self._write_pos = 0
        self._read_file, self._read_pos = self._write_file, 0
        self._reset_read_buffer()
        self.depth = self.depth_bytes = 0
        self.owed.clear()
        self._forget_runs(self._handed)
        self.deferred_due.clear()
        if self._log is not None:
            self._log.clear()
        self._request_sync()

    def delete(self) -> None:
        """The topic or channel is deleted: remove its files; the next sync closes them.
        (Its lines are go-diskqueue's; nsqd empties a queue before it deletes it, as Go's.)"""
        self.closed = self.deleted = True  # first: a running sync job checks it last
        self.logger.info("DISKQUEUE(%s): deleting", self.name)
        self._empty()
        _remove(self._fs, deferred_file_name(self.data_path, self.name), self.logger)
        self._deferred_file_exists = False
        if self._log is not None:
            self._log.remove()
        if self._syncer is None:
            self.sync_now(final=True)
        self.logger.info("DISKQUEUE(%s): closing ... ioLoop", self.name)

    def close(self) -> None:
        """No more writes (shutdown); the final sync (`DiskSyncer.close`) makes it durable.
        (Its lines are go-diskqueue's, whose Close ends its ioLoop goroutine.)"""
        self.closed = True
        self.logger.info("DISKQUEUE(%s): closing", self.name)
        if self._syncer is None:
            self.sync_now(final=True)
        self.logger.info("DISKQUEUE(%s): closing ... ioLoop", self.name)

    # -- syncing --------------------------------------------------------------------------

    def _count_ops(self, count: int) -> None:
        if not self._ops_since_sync and self._syncer is not None:
            self._syncer.mark_active(self)  # the first since the last sync: arm the tick
        self._ops_since_sync += count
        if self._ops_since_sync >= self.sync_every:
            self._request_sync()

    def _request_sync(self) -> None:
        if self._syncer is not None:
            self._syncer.request(self)

    def sync_failed(self) -> None:
        """The last sync job failed: try again at the next --sync-timeout tick."""
        self._ops_since_sync = max(self._ops_since_sync, 1)
        self._data_written()
        if self._bad_fd is not None:
            self._bad_dirty = True
        self._sides_synced()
        if self._log is not None:
            self._log.sync_done(ok=False)

    def sync_succeeded(self) -> None:
        self._sides_synced()
        if self._log is not None:
            self._log.sync_done(ok=True)

    def _capture_sides(self, final: bool) -> tuple[list[_SideJob], list[bool | OSError | None]]:
        """What the sync job writes of the side files: the units held for the data it fsyncs
        (written once that fsync is done; fsynced by the next round, or at once for a
        finished segment), and the fsync of units an earlier round wrote."""
        jobs: list[_SideJob] = []
        for side in list(self._sides.values()):
            fd = side.fd
            if fd is None:
                continue
            closing = side.retired or final
            data = side.writable(closing)
            if not data and not side.dirty and not closing:
                continue
            jobs.append((side, fd, side.flushed, data, side.dirty, closing))
            if final:
                side.fd = None  # the job closes it
        if final:
            self._sides.clear()
            self._side = None
        return jobs, [None] * len(jobs)

    def _sides_synced(self) -> None:
        """The last sync job ended: account for what it wrote of the side files."""
        jobs, results = self._side_jobs
        self._side_jobs = ([], [])
        for (side, _, _, data, _, closing), result in zip(jobs, results, strict=True):
            if result is True:
                side.written(len(data))
                side.dirty = bool(data) and not closing
                if closing:
                    self._forget_side(side)
            elif isinstance(result, OSError):
                self.logger.warning(
                    "DISKQUEUE(%s) failed to write %s - %s; records after its first %d bytes "
                    "are not checked",
                    self.name,
                    side_file_name(self.data_path, self.name, side.num),
                    result.strerror or result,
                    side.flushed,
                )
                side.drop()
                self._forget_side(side)

    @property
    def unsynced(self) -> bool:
        """Reads or writes happened since the last sync (the --sync-timeout sync)."""
        return self._ops_since_sync > 0 or self._unsynced_data

    @property
    def data_unsynced(self) -> bool:
        """Data was written since the syncer last made this queue's data durable."""
        return self._unsynced_data

    def prepare_sync(self, final: bool = False, *, metadata: bool = True) -> SyncJob:
        """Capture what the next sync must make durable, in the event loop; the returned job
        does the blocking part (fsync; then the metadata file and deleting finished segments,
        unless `metadata` is False: a sync for --sync-ack's acknowledgements only) and may run
        in a worker thread. `final` also closes the files (shutdown)."""
        fs = self._fs
        self._unsynced_data = False
        retired, self._retired_fds = self._retired_fds, []
        wfd = self._wfd
        bad_fd = self._bad_fd if self._bad_dirty or final else None
        self._bad_dirty = False
        new_files, self._new_files = self._new_files, False
        if final or self.deleted:
            self._wfd = self._bad_fd = None
            self._close_read_file()
        log_fsync, log_finish = (
            self._log.prepare_sync(final) if self._log is not None else (_noop, _noop)
        )
        data_path = self.data_path
        if self.deleted:
            fds = retired + [fd for fd in (wfd, bad_fd) if fd is not None]
            fds += [side.fd for side in self._sides.values() if side.fd is not None]
            self._sides.clear()
            self._side = None

            def close_deleted() -> None:
                log_finish()
                _close_all(fs, fds)

            return SyncJob(_noop, close_deleted)
        sides, results = self._side_jobs = self._capture_sides(final)

        def fsync() -> None:
            try:
                try:
                    for fd in retired:
                        fs.fsync(fd)
                    if wfd is not None:
                        fs.fsync(wfd)
                    if bad_fd is not None:
                        fs.fsync(bad_fd)
                    log_fsync()
                    if new_files:
                        fs.fsync_dir(data_path)
                finally:
                    _close_all(fs, retired)
                    if final:
                        _close_all(fs, [fd for fd in (wfd, bad_fd) if fd is not None])
                # The data is durable: the side files' units for it may be written now.
                _write_sides(fs, sides, results)
            finally:
                if final:
                    _close_all(fs, [job[1] for job in sides])

        if not metadata and not final:
            return SyncJob(fsync, log_finish)
        self._ops_since_sync = 0
        committed_file, committed_pos, read_again = self._committed()
        meta = Metadata(
            self.depth + read_again,
            committed_file,
            committed_pos,
            self._write_file,
            self._write_pos,
        ).encode()
        finished = self._undeleted + self._finished_segments(committed_file)
        # What the job could not delete; the loop takes it back once the job is done.
        self._undeleted = left = list(finished)
        meta_path = metadata_file_name(data_path, self.name)
        deferred_path = deferred_file_name(data_path, self.name)
        deferred: bytes | None = None
        drop_deferred = False
        if final and self.deferred_due:
            deferred = encode_deferred(self.deferred_due)
            self._deferred_file_exists = True
        elif self._deferred_file_exists and not self.deferred_due:
            drop_deferred = True
            self._deferred_file_exists = False

        logger = self.logger

        def persist() -> None:
            write_file_atomically(fs, meta_path, meta)
            for path in finished:
                if _remove(fs, path, logger):
                    left.remove(path)
            if deferred is not None:
                write_file_atomically(fs, deferred_path, deferred)
            elif drop_deferred:
                _remove(fs, deferred_path, logger)
            log_finish()
            if self.deleted:
                # delete() ran in the event loop while this job ran in its thread: what the job
                # wrote must not outlive the queue (a queue of the same name would read it).
                _remove(fs, meta_path, logger)
                _remove(fs, deferred_path, logger)

        return SyncJob(fsync, persist)

    def sync_now(self, final: bool = False) -> None:
        """Sync in the calling thread (no `DiskSyncer`: tools and tests)."""
        job = self.prepare_sync(final)
        try:
            job.fsync()
            job.persist()
        except OSError:
            self.sync_failed()
            raise
        self.sync_succeeded()


def frames_from_records(pieces: list[bytes]) -> list[bytes]:
    """Decode `take_records` output into message frames."""
    frames = []
    for piece in pieces:
        view = memoryview(piece)
        i = 0
        while i < len(piece):
            length = _LENGTH.unpack_from(piece, i)[0]
            frames.append(
                _FRAME_HEADER.pack(length + 4, _FRAME_TYPE_MESSAGE) + view[i + 4 : i + 4 + length]
            )
            i += 4 + length
    return frames


def _write_sides(
    fs: FileSystem, sides: list[_SideJob], results: list[bool | OSError | None]
) -> None:
    """The side files' part of a sync job (after its data fsync). A side file's failure is
    its own (noted in `results`): it never fails the sync of the data."""
    for i, (_, fd, offset, data, dirty, closing) in enumerate(sides):
        try:
            if dirty:
                fs.fsync(fd)
            if data:
                write_all(fs, fd, data, offset)
                if closing:
                    fs.fsync(fd)
        except OSError as err:
            results[i] = err
        else:
            results[i] = True


def _runs_end(runs: Iterable[checksums.Run], pos: int, end: int) -> int:
    """The end of the last of the runs from `pos` on that follow one another, end by `end`
    and by READ_CHUNK after `pos` (the first one's end at least)."""
    reach = pos
    for start, stop, *_ in runs:
        if start != reach or stop > end or (stop - pos > READ_CHUNK and reach > pos):
            break
        reach = stop
    return max(reach, pos)


def _check_later(chk: SideReader, start: int, stop: int, count: int, units: bytes) -> None:
    """Put back records whose units were believed, to be checked one by one."""
    chk.runs.appendleft((start, stop, count, units, None, crc32c(units), False))


def _units_of(data: bytes) -> bytes:
    """The side-file record units of whole go-diskqueue records (records that came without
    theirs: moved from a segment that has no side file). Runs of records of one size are
    found as the read loops find them (`_same_size`)."""
    unpack = _LENGTH.unpack_from
    view = memoryview(data)
    lengths = array("I")
    payloads: list[bytes | memoryview] = []
    i, end = 0, len(data)
    while i < end:
        length = unpack(data, i)[0]
        size = 4 + length
        count = min((end - i) // size, _BLOCK)
        if count >= _BLOCK_MIN and _same_size(data, i, count, size):
            lengths.extend(array("I", [length]) * count)
            payloads += [data[p : p + length] for p in range(i + 4, i + count * size, size)]
            i += count * size
            continue
        lengths.append(length)
        payloads.append(view[i + 4 : i + size])
        i += size
    return checksums.record_units(lengths, array("I", map(crc32c, payloads)))


def _close_all(fs: FileSystem, fds: list[int]) -> None:
    for fd in fds:
        try:
            fs.close(fd)
        except OSError:
            pass


def _remove(fs: FileSystem, path: str, logger: logging.Logger = log) -> bool:
    """Remove a file if it is there; False (and logged) if it could not be removed."""
    try:
        fs.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        if err.errno != errno.ENOENT:
            logger.error("DISKQUEUE failed to remove %s - %s", path, err)
            return False
    return True


def _same_size(buf: bytes, off: int, count: int, size: int) -> bool:
    """Whether the `count` records from offset `off` of `buf` are all `size` bytes long: their
    length prefixes all equal the first's, checked one prefix byte at a time across all of
    them with a strided slice."""
    last = off + count * size
    prefix = buf[off : off + 4]
    return (
        buf[off + 3 : last : size] == prefix[3:] * count
        and buf[off + 2 : last : size] == prefix[2:3] * count
        and buf[off + 1 : last : size] == prefix[1:2] * count
        and buf[off:last:size] == prefix[:1] * count
    )
