"""`QueuePeek`: a read-only look at the records a `DiskQueue` has not handed out yet (beyond
NSQ: nsqd's ``/channel/peek`` and ``/topic/peek``).

The queue's reader, its positions, its depth and its consumption bookkeeping (``owed``) are
never touched: `DiskQueue.peek` captures, in the event loop, where unread records start and
end (the reader's position, the writer's) and which message IDs the reader would skip; then
`QueuePeek.read` opens the segment files on its own descriptors and decodes up to a number of
records (and about a number of bytes), blocking, so that nsqd runs it in a worker thread.

What it reads is a snapshot: records before the captured write position were written in full
before the capture (appends complete in the event loop before the position moves); a segment
deleted meanwhile (consumed, emptied) ends the read there, and a corrupt record ends the read of
its segment, as the reader would skip past it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from .files import data_file_name
from .fs import O_RDONLY, FileSystem

_LENGTH = struct.Struct(">I")
_FRAME_HEADER = struct.Struct(">Ii")
_FRAME_TYPE_MESSAGE = 2
#: The message ID's place in a record's payload (after the timestamp and attempts).
_ID_IN_PAYLOAD = slice(10, 26)
#: Bytes read from a segment at a time (at least; more for a larger record).
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class QueuePeek:
    """Where a queue's unread records were when `DiskQueue.peek` captured it."""

    fs: FileSystem
    data_path: str
    name: str
    min_msg_size: int
    max_msg_size: int
    #: The reader's segment and position: the first unread record.
    read_file: int
    read_pos: int
    #: The writer's segment and position: the end of the last record written.
    write_file: int
    write_pos: int
    #: Segments found at open (ascending, from `read_file` on) below `first_own_file`; from
    #: `first_own_file` on, the queue wrote its segments one after another.
    old_segments: tuple[int, ...]
    first_own_file: int
    #: Message IDs the reader skips (the deferred log's, or second copies of owed ones).
    skip: frozenset[bytes]

    def read(self, max_count: int, max_bytes: int) -> list[bytes]:
        """Up to `max_count` unread messages as wire frames, oldest first, stopping once
        the frames add up to `max_bytes` (at least one is returned if any is there).
        Blocking: run it in a worker thread."""
        frames: list[bytes] = []
        total = 0
        for num in self._segments():
            for frame in self._read_segment(num, max_count - len(frames), max_bytes - total):
                frames.append(frame)
                total += len(frame)
            if len(frames) >= max_count or total >= max_bytes:
                break
        return frames

    def _segments(self) -> Iterator[int]:
        for num in self.old_segments:
            if num >= self.first_own_file:
                break
            yield num
        yield from range(max(self.read_file, self.first_own_file), self.write_file + 1)

    def _read_segment(self, num: int, max_count: int, max_bytes: int) -> Iterator[bytes]:
        fs = self.fs
        try:
            fd = fs.open(data_file_name(self.data_path, self.name, num), O_RDONLY)
        except OSError:
            return  # gone (consumed, emptied) or unreadable: the reader skips it too
        try:
            pos = self.read_pos if num == self.read_file else 0
            end = self.write_pos if num == self.write_file else fs.fsize(fd)
            buf, base = b"", pos  # base: the file position of buf[0]
            count = size = 0
            while pos < end and count < max_count and size < max_bytes:
                off = pos - base
                if off + 4 > len(buf):
                    buf, base = self._refill(fd, buf, base, pos, 4, end)
                    off = 0
                    if len(buf) < 4:
                        return  # cut short: corrupt
                length = _LENGTH.unpack_from(buf, off)[0]
                if not self.min_msg_size <= length <= self.max_msg_size:
                    return  # corrupt: the reader moves this segment aside
                if off + 4 + length > len(buf):
                    buf, base = self._refill(fd, buf, base, pos, 4 + length, end)
                    off = 0
                    if len(buf) < 4 + length:
                        return
                payload = buf[off + 4 : off + 4 + length]
                pos += 4 + length
                if self.skip and payload[_ID_IN_PAYLOAD] in self.skip:
                    continue
                count += 1
                size += length + 8  # as a frame
                yield _FRAME_HEADER.pack(length + 4, _FRAME_TYPE_MESSAGE) + payload
        finally:
            fs.close(fd)

    def _refill(
        self, fd: int, buf: bytes, base: int, pos: int, need: int, end: int
    ) -> tuple[bytes, int]:
        """The buffer from file position `pos` on, with at least `need` bytes if the segment
        (up to `end`) has them."""
        kept = buf[pos - base :] if pos - base < len(buf) else b""
        start = pos + len(kept)
        want = min(max(_READ_CHUNK, need - len(kept)), end - start)
        data = self.fs.pread(fd, want, start) if want > 0 else b""
        return kept + data, pos
