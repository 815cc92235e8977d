"""`DiskQueue`: one topic's or channel's messages on disk, in go-diskqueue's format.

Records are ``[4-byte big-endian length][message payload]`` appended to numbered segment files
(files.py names them). The daemon keeps messages as wire frames (trionsq.protocol.message), so
`put_many` takes frames and `take` returns frames: a record is a frame without its 8-byte
frame header.

Everything here runs in the event loop and never waits for the disk to make data durable:
appends are plain writes into the page cache (a killed process loses nothing written), and
`DiskSyncer` (syncer.py) fsyncs and writes the metadata file in a worker thread, following
--sync-every and --sync-timeout.

The read position that is persisted is not where the reader is but where consumption is
*committed*. A channel's queue is opened with ``track_consumption=True``: a message it hands
out stays owed (`release` ends that, on FIN) and the metadata's read position never passes the
oldest owed message, so a crash redelivers messages that were in flight rather than losing
them (go-diskqueue persists the reader's position and loses them). Messages after the owed
one that were already finished come back too: delivery is at least once.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .files import (
    Metadata,
    MetadataError,
    data_file_name,
    deferred_file_name,
    encode_deferred,
    metadata_file_name,
    read_deferred,
    read_metadata,
    write_file_atomically,
)

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
_FRAME_ID = slice(18, 34)
#: Bytes read from a segment at a time.
READ_CHUNK = 1 << 20

SyncJob = Callable[[], None]


class DiskQueueError(Exception):
    """A write the queue refuses (closed, or a record size outside the limits)."""


class _CorruptRecord(Exception):
    #: Records consumed by the read before it met the corruption.
    consumed = 0


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
    ) -> None:
        self.name = name
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        self.min_msg_size = min_msg_size
        self.max_msg_size = max_msg_size
        self.sync_every = max(sync_every, 1)
        #: Messages not yet handed out by `take`.
        self.depth = 0
        #: Message ID -> due time (Unix ns) of messages that were deferred at shutdown.
        self.deferred_due: dict[bytes, int] = {}
        self._track = track_consumption
        # Handed out and not released: [file, position, released] in read order; and
        #: message ID -> that entry (truthy exactly when something is owed).
        self._owed_in_order: deque[list[int]] = deque()
        self.owed: dict[bytes, list[int]] = {}
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
        self._lowest_file = 0  # lowest segment number that may still exist
        self._lowest_before_sync = 0  # _lowest_file before the last sync job (if it fails)
        self._ops_since_sync = 0
        self._deferred_file_exists = False
        self.closed = False
        self.deleted = False
        self._syncer = syncer
        self._open()
        if syncer is not None:
            syncer.add(self)

    # -- opening --------------------------------------------------------------------------

    def _open(self) -> None:
        meta_path = metadata_file_name(self.data_path, self.name)
        try:
            meta = read_metadata(meta_path)
        except (OSError, MetadataError) as err:
            log.error("DISKQUEUE(%s) failed to retrieveMetaData - %s", self.name, err)
            meta = None
        segments = self._segments_on_disk()
        if meta is None:
            # A new queue, or lost metadata: read every segment there is, write after them.
            first = segments[0] if segments else 0
            last = segments[-1] + 1 if segments else 0
            meta = Metadata(0, first, 0, last, 0)
            depth = sum(self._count_records(n, 0) for n in segments)
        else:
            depth = max(meta.depth, 0)
            if (meta.read_file, meta.read_pos) > (meta.write_file, meta.write_pos):
                log.error(
                    "DISKQUEUE(%s) read position %d,%d is past write position %d,%d, "
                    "corruption, skipping to a new file",
                    self.name,
                    meta.read_file,
                    meta.read_pos,
                    meta.write_file,
                    meta.write_pos,
                )
                fresh = max([meta.read_file, meta.write_file, *segments]) + 1
                meta = Metadata(0, fresh, 0, fresh, 0)
                depth = 0
            meta, depth = self._salvage(meta, depth, segments)
        self.depth = depth
        self._read_file, self._read_pos = meta.read_file, meta.read_pos
        self._write_file, self._write_pos = meta.write_file, meta.write_pos
        self._lowest_file = min([meta.read_file, *segments])
        try:
            self.deferred_due = read_deferred(deferred_file_name(self.data_path, self.name))
        except (OSError, ValueError) as err:
            log.error("DISKQUEUE(%s) ignoring unreadable deferred file - %s", self.name, err)
        self._deferred_file_exists = os.path.exists(deferred_file_name(self.data_path, self.name))

    def _segments_on_disk(self) -> list[int]:
        pattern = re.compile(re.escape(self.name) + r"\.diskqueue\.(\d{6,})\.dat")
        try:
            names = os.listdir(self.data_path)
        except OSError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := pattern.fullmatch(n)))

    def _salvage(self, meta: Metadata, depth: int, segments: list[int]) -> tuple[Metadata, int]:
        """Writes that reached the disk after the metadata was last written (a crash, or Go
        nsqd killed): count them into the depth, and write after them, as go-diskqueue does."""
        path = data_file_name(self.data_path, self.name, meta.write_file)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = 0
        later = [n for n in segments if n > meta.write_file]
        if size == meta.write_pos and not later:
            return meta, depth
        # Shorter or missing too (spec/disk_queue.py, unlike go): appending at writePos would
        # leave a hole that reads as a bad record, losing what is written after it.
        log.warning(
            "DISKQUEUE(%s) %s metadata writePos %d != file size of %d, skipping to new file",
            self.name,
            path,
            meta.write_pos,
            size,
        )
        extra = self._count_records(meta.write_file, meta.write_pos)
        extra += sum(self._count_records(n, 0) for n in later)
        next_file = (later[-1] if later else meta.write_file) + 1
        return Metadata(meta.depth, meta.read_file, meta.read_pos, next_file, 0), depth + extra

    def _count_records(self, file_num: int, start: int) -> int:
        """Whole, valid records in a segment from `start` (stops at the first bad one)."""
        try:
            with open(data_file_name(self.data_path, self.name, file_num), "rb") as f:
                data = f.read()
        except OSError:
            return 0
        count, pos, size = 0, start, len(data)
        while pos + 4 <= size:
            length = _LENGTH.unpack_from(data, pos)[0]
            if not self.min_msg_size <= length <= self.max_msg_size or pos + 4 + length > size:
                break
            pos += 4 + length
            count += 1
        return count

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
        fd = self._wfd if self._wfd is not None else self._open_write_file()
        data = b"".join(parts)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            # Leave no partial record behind: the next write starts where this one did.
            try:
                os.ftruncate(fd, self._write_pos)
                os.lseek(fd, self._write_pos, os.SEEK_SET)
            except OSError:
                self._retired_fds.append(fd)
                self._wfd = None
            raise
        self._write_pos = new_pos
        self.depth += count
        self._count_ops(count)

    def _open_write_file(self) -> int:
        path = data_file_name(self.data_path, self.name, self._write_file)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if self._write_pos == 0 else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if self._write_pos:
                os.ftruncate(fd, self._write_pos)
                os.lseek(fd, self._write_pos, os.SEEK_SET)
        except OSError:
            os.close(fd)
            raise
        self._wfd = fd
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

    # -- reading --------------------------------------------------------------------------

    def take(self, max_count: int) -> list[bytes]:
        """Hand out up to `max_count` frames, oldest first."""
        out: list[bytes] = []
        self._consume(max_count, lambda want, end: self._read_records(out, want, end))
        return out

    def take_records(self, max_count: int) -> tuple[list[bytes], int]:
        """Up to `max_count` records as go-diskqueue bytes (whole records, in one or more
        pieces) and their count: for moving messages to other queues (`put_records`)
        without decoding them. Not for a queue that tracks consumption."""
        assert not self._track, "records taken raw cannot be tracked"
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
            if self._rfd is None and not self._open_read_file():
                continue
            end = self._write_pos if self._read_file == self._write_file else self._read_end
            if self._read_pos >= end:
                self._next_read_file()
                continue
            try:
                done += read(max_count - done, end)
            except _CorruptRecord as err:
                done += err.consumed
                self._skip_bad_read_file(str(err))
        if (
            self._rfd is not None
            and self._read_file < self._write_file
            and self._read_pos >= self._read_end
        ):
            # Like go's reader, leave a finished file as its last record is read: the persisted
            # position is then never the end of a finished file (go would rename it .bad).
            self._next_read_file()
        if self.depth and self._read_file == self._write_file and self._read_pos >= self._write_pos:
            log.error(
                "DISKQUEUE(%s) depth %d at tail, metadata corruption or data loss, resetting 0",
                self.name,
                self.depth,
            )
            self.depth = 0
        return done

    def _read_records(self, out: list[bytes], want: int, end: int) -> int:
        """Decode up to `want` records of the read file (before `end`) into frames appended
        to `out`; returns the records consumed (a skipped second copy counts)."""
        buf, view, off, base = self._rbuf, self._rview, self._roff, self._rbuf_pos
        unpack = _LENGTH.unpack_from
        pack = _FRAME_HEADER.pack
        lo, hi = self.min_msg_size, self.max_msg_size
        track = self._track
        consumed = 0
        try:
            while consumed < want and base + off < end:
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
                if track:
                    message_id = buf[off + _RECORD_ID.start : off + _RECORD_ID.stop]
                    if message_id in self.owed:
                        # A second copy (a crash made the writer repeat it) of a message
                        # still handed out: that one stands for both. Kept in the order
                        # (as released) so that the persisted depth still counts it.
                        self._owed_in_order.append([self._read_file, base + off, 1])
                        off = stop
                        continue
                    self._owe(message_id, base + off)
                out.append(pack(length + 4, _FRAME_TYPE_MESSAGE) + view[off + 4 : stop])
                off = stop
        except _CorruptRecord as err:
            err.consumed = consumed
            raise
        finally:
            self._read_done(off, base, consumed)
        return consumed

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
        finally:
            if off > run_start:
                pieces.append(buf[run_start:off])
            self._read_done(off, base, consumed)
        return consumed

    def _read_done(self, off: int, base: int, consumed: int) -> None:
        self._roff = off
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
        data = os.pread(self._rfd, want, file_pos) if want > 0 else b""
        if have + len(data) < need:
            raise _CorruptRecord(
                f"short read: {have + len(data)} of {need} bytes at {self._rbuf_pos + off}"
            )
        self._rbuf = buf = buf[off:] + data
        self._rview = view = memoryview(buf)
        self._rbuf_pos += off
        self._roff = 0
        return buf, view, 0, self._rbuf_pos

    def _owe(self, message_id: bytes, position: int) -> None:
        entry = [self._read_file, position, 0]
        self._owed_in_order.append(entry)
        self.owed[message_id] = entry

    def _open_read_file(self) -> bool:
        path = data_file_name(self.data_path, self.name, self._read_file)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as err:
            self._skip_bad_read_file(f"open: {err}")
            return False
        if self._read_file < self._write_file:
            self._read_end = os.fstat(fd).st_size
        self._rfd = fd
        self._reset_read_buffer()
        return True

    def _reset_read_buffer(self) -> None:
        self._rbuf = b""
        self._rview = memoryview(self._rbuf)
        self._rbuf_pos = self._read_pos
        self._roff = 0

    def _close_read_file(self) -> None:
        if self._rfd is not None:
            os.close(self._rfd)
            self._rfd = None
        self._reset_read_buffer()

    def _next_read_file(self) -> None:
        self._close_read_file()
        self._read_file += 1
        self._read_pos = 0
        self._reset_read_buffer()
        self._request_sync()  # the finished segment can be deleted

    def _skip_bad_read_file(self, why: str) -> None:
        """go-diskqueue's recovery: rename the segment ``.bad`` and go on with the next."""
        path = data_file_name(self.data_path, self.name, self._read_file)
        log.error("DISKQUEUE(%s) reading at %d of %s - %s", self.name, self._read_pos, path, why)
        if self._read_file == self._write_file:
            if self._wfd is not None:
                self._retired_fds.append(self._wfd)
                self._wfd = None
            self._write_file += 1
            self._write_pos = 0
        log.warning(
            "DISKQUEUE(%s) jump to next file and saving bad file as %s.bad", self.name, path
        )
        try:
            os.rename(path, path + ".bad")
        except OSError as err:
            log.error("DISKQUEUE(%s) failed to rename bad file %s - %s", self.name, path, err)
        self._close_read_file()
        self._read_file += 1
        self._read_pos = 0
        self._reset_read_buffer()
        self._request_sync()

    # -- consumption ----------------------------------------------------------------------

    def release(self, message_id: bytes) -> None:
        """A message `take` handed out is done with (finished, or written again)."""
        entry = self.owed.pop(message_id, None)
        if entry is not None:
            entry[2] = 1
            owed = self._owed_in_order
            if owed and owed[0][2]:
                while owed and owed[0][2]:
                    owed.popleft()
                # The committed read position moved: the next --sync-timeout tick persists it.
                self._ops_since_sync = max(self._ops_since_sync, 1)

    @property
    def owed_count(self) -> int:
        """Messages handed out and not yet released (kept on disk for a crash)."""
        return len(self.owed)

    def _committed(self) -> tuple[int, int]:
        if self._owed_in_order:
            head = self._owed_in_order[0]
            return head[0], head[1]
        return self._read_file, self._read_pos

    # -- emptying and lifecycle -----------------------------------------------------------

    def empty(self) -> None:
        """Drop every message: delete the segments and the metadata file; numbering goes on."""
        self._close_read_file()
        if self._wfd is not None:
            self._retired_fds.append(self._wfd)
            self._wfd = None
        for num in range(self._lowest_file, self._write_file + 1):
            _remove(data_file_name(self.data_path, self.name, num))
        _remove(metadata_file_name(self.data_path, self.name))
        self._write_file += 1
        self._write_pos = 0
        self._read_file, self._read_pos = self._write_file, 0
        self._reset_read_buffer()
        self._lowest_file = self._write_file
        self.depth = 0
        self._owed_in_order.clear()
        self.owed.clear()
        self.deferred_due.clear()
        self._request_sync()

    def delete(self) -> None:
        """The topic or channel is deleted: remove its files; the next sync closes them."""
        self.closed = self.deleted = True  # first: a running sync job checks it last
        self.empty()
        _remove(deferred_file_name(self.data_path, self.name))
        self._deferred_file_exists = False
        if self._syncer is None:
            self.sync_now(final=True)

    def close(self) -> None:
        """No more writes (shutdown); the final sync (`DiskSyncer.close`) makes it durable."""
        self.closed = True
        if self._syncer is None:
            self.sync_now(final=True)

    # -- syncing --------------------------------------------------------------------------

    def _count_ops(self, count: int) -> None:
        self._ops_since_sync += count
        if self._ops_since_sync >= self.sync_every:
            self._request_sync()

    def _request_sync(self) -> None:
        if self._syncer is not None:
            self._syncer.request(self)

    def sync_failed(self) -> None:
        """The last sync job failed: try again at the next --sync-timeout tick."""
        self._ops_since_sync = max(self._ops_since_sync, 1)
        # The finished segments it was to delete may still be there: the retry deletes them.
        self._lowest_file = min(self._lowest_file, self._lowest_before_sync)

    @property
    def unsynced(self) -> bool:
        """Reads or writes happened since the last sync (the --sync-timeout sync)."""
        return self._ops_since_sync > 0

    def prepare_sync(self, final: bool = False) -> SyncJob:
        """Capture what the next sync must make durable, in the event loop; the returned job
        does the blocking part (fsync, metadata file, deleting finished segments) and may run
        in a worker thread. `final` also closes the files (shutdown)."""
        self._ops_since_sync = 0
        retired, self._retired_fds = self._retired_fds, []
        wfd = self._wfd
        if final or self.deleted:
            self._wfd = None
            self._close_read_file()
        if self.deleted:
            fds = retired + ([wfd] if wfd is not None else [])
            return lambda: _close_all(fds)
        committed_file, committed_pos = self._committed()
        meta = Metadata(
            self.depth + len(self._owed_in_order),
            committed_file,
            committed_pos,
            self._write_file,
            self._write_pos,
        ).encode()
        finished = [
            data_file_name(self.data_path, self.name, n)
            for n in range(self._lowest_file, committed_file)
        ]
        self._lowest_before_sync = self._lowest_file
        self._lowest_file = max(self._lowest_file, committed_file)
        meta_path = metadata_file_name(self.data_path, self.name)
        deferred_path = deferred_file_name(self.data_path, self.name)
        deferred: bytes | None = None
        drop_deferred = False
        if final and self.deferred_due:
            deferred = encode_deferred(self.deferred_due)
            self._deferred_file_exists = True
        elif self._deferred_file_exists and not self.deferred_due:
            drop_deferred = True
            self._deferred_file_exists = False

        def job() -> None:
            try:
                for fd in retired:
                    os.fsync(fd)
                if wfd is not None:
                    os.fsync(wfd)
            finally:
                _close_all(retired)
                if final and wfd is not None:
                    os.close(wfd)
            write_file_atomically(meta_path, meta)
            for path in finished:
                _remove(path)
            if deferred is not None:
                write_file_atomically(deferred_path, deferred)
            elif drop_deferred:
                _remove(deferred_path)
            if self.deleted:
                # delete() ran in the event loop while this job ran in its thread: what the job
                # wrote must not outlive the queue (a queue of the same name would read it).
                _remove(meta_path)
                _remove(deferred_path)

        return job

    def sync_now(self, final: bool = False) -> None:
        """Sync in the calling thread (no `DiskSyncer`: tools and tests)."""
        job = self.prepare_sync(final)
        try:
            job()
        except OSError:
            self.sync_failed()
            raise


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


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        log.error("DISKQUEUE failed to remove %s - %s", path, err)
