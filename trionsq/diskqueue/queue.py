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
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from .deferred import DeferredLog, Held
from .files import (
    Metadata,
    data_file_name,
    deferred_file_name,
    deferred_log_name,
    encode_deferred,
    metadata_file_name,
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
    """A FIFO of message frames in ``<data_path>/<name>.diskqueue.*`` (reference §7)."""

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
        smallest = min(map(len, frames)) - _FRAME_OVERHEAD
        largest = max(map(len, frames)) - _FRAME_OVERHEAD
        for size in (smallest, largest):
            if not self.min_msg_size <= size <= self.max_msg_size:
                raise DiskQueueError(
                    f"invalid message write size ({size}) minMsgSize={self.min_msg_size} "
                    f"maxMsgSize={self.max_msg_size}"
                )
        pack = _LENGTH.pack
        limit = self.max_bytes_per_file
        parts: list[bytes] = []
        count = 0
        pos = self._write_pos
        for frame in frames:
            length = len(frame) - _FRAME_OVERHEAD
            if pos > 0 and pos + 4 + length > limit:
                if count:
                    self._append(parts, count, pos)
                    parts, count = [], 0
                self._roll()
                pos = 0
            parts.append(pack(length))
            parts.append(frame[_FRAME_OVERHEAD:])
            pos += 4 + length
            count += 1
        self._append(parts, count, pos)
        if self.owed:
            # A message handed out and now written again (requeued, or saved at shutdown):
            # the new copy stands for it.
            for frame in frames:
                self.release(frame[_FRAME_ID])

    def put_records(self, pieces: list[bytes], count: int) -> None:
        """Append `count` whole records given as go-diskqueue bytes (from another queue's
        `take_records`; their sizes were checked when read). Raises as `put_many`."""
        if not count:
            return
        if self.closed:
            raise DiskQueueError("exiting")
        total = sum(map(len, pieces))
        limit = self.max_bytes_per_file
        pos = self._write_pos
        if pos + total <= limit:
            self._append(pieces, count, pos + total)
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
        for record in records:
            if pos > 0 and pos + len(record) > limit:
                if parts:
                    self._append(parts, len(parts), pos)
                    parts = []
                self._roll()
                pos = 0
            parts.append(record)
            pos += len(record)
        self._append(parts, len(parts), pos)

    def _append(self, parts: Sequence[bytes | memoryview], count: int, new_pos: int) -> None:
        fs = self._fs
        fd = self._wfd if self._wfd is not None else self._open_write_file()
        try:
            write_all(fs, fd, b"".join(parts), self._write_pos)
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
        return fd

    def _roll(self) -> None:
        """Continue in the next segment (the finished one is fsynced by the next sync)."""
        if self._read_file == self._write_file:
            self._read_end = self._write_pos
        if self._wfd is not None:
            self._retired_fds.append(self._wfd)
            self._wfd = None
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
        pieces: list[bytes] = []
        count = self._consume(max_count, lambda want, end: self._read_raw(pieces, want, end))
        return pieces, count

    def _consume(self, max_count: int, read: Callable[[int, int], int]) -> int:
        """Run `read(wanted, end)` over the segments until `max_count` records are consumed
        or the reader reaches the writer; returns the records consumed."""
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
                done += read(max_count - done, end)
            except _CorruptRecord as err:
                done += err.consumed
                self._skip_bad_read_file(str(err))
            except _ReadFailed as err:
                done += err.consumed
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
        return True

    def _reset_read_buffer(self) -> None:
        self._rbuf = b""
        self._rview = memoryview(self._rbuf)
        self._rbuf_pos = self._read_pos
        self._roff = 0

    def _close_read_file(self) -> None:
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
        names = []
        while self._old_segments and self._old_segments[0] < below:
            names.append(data_file_name(self.data_path, self.name, self._old_segments.pop(0)))
        for num in range(max(self._lowest_own, self._first_own_file), below):
            names.append(data_file_name(self.data_path, self.name, num))
        self._lowest_own = max(self._lowest_own, below)
        return names

    def empty(self) -> None:
        """Drop every message: delete the segments and the metadata file; numbering goes on."""
        self.logger.info("DISKQUEUE(%s): emptying", self.name)
        self._empty()

    def _empty(self) -> None:
        self._close_read_file()
        self._retire_write_file()
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
        if self._log is not None:
            self._log.sync_done(ok=False)

    def sync_succeeded(self) -> None:
        if self._log is not None:
            self._log.sync_done(ok=True)

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
        new_files, self._new_files = self._new_files, False
        if final or self.deleted:
            self._wfd = None
            self._close_read_file()
        log_fsync, log_finish = (
            self._log.prepare_sync(final) if self._log is not None else (_noop, _noop)
        )
        data_path = self.data_path
        if self.deleted:
            fds = retired + ([wfd] if wfd is not None else [])

            def close_deleted() -> None:
                log_finish()
                _close_all(fs, fds)

            return SyncJob(_noop, close_deleted)

        def fsync() -> None:
            try:
                for fd in retired:
                    fs.fsync(fd)
                if wfd is not None:
                    fs.fsync(wfd)
                log_fsync()
                if new_files:
                    fs.fsync_dir(data_path)
            finally:
                _close_all(fs, retired)
                if final and wfd is not None:
                    fs.close(wfd)

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
