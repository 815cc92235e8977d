"""Opening a disk queue: where to read and write from, given what is on disk.

`recover` reads the metadata file, checks it against the segments that exist and returns a
`Recovered` state; it blocks on the disk (it may read whole segments to count records) and
touches only its own queue's files, so nsqd runs it for every queue in a worker thread at
start-up. What it had to correct is summarised in one log line per queue.

Beyond go-diskqueue, whose rule is to trust the metadata: nothing readable is lost. When the
metadata cannot be trusted, every segment on disk is read again (messages may come twice;
delivery is at least once):
- no metadata file, or one that is not go-diskqueue's text (values beyond int64, negative
  positions or file numbers, garbage): read every segment there is, write after the last
  (go reads from 0,0 and writes over segment 0);
- the read position past the write position: the same (go deletes the segments between);
- a read file that is missing: start at the next segment that exists, in one step however far
  the numbers are apart (go tries each missing number in turn, logging each);
- a read position beyond the end of its segment: read that segment from its start;
- a write file longer or shorter than the write position (a crash after writes the metadata
  does not know of, or a file turned .bad): the records after the write position are counted
  and read (salvaged), and writes go to a new file after every segment on disk;
- whenever segments are missing between the read and the write file, or the depth is negative
  or zero while records remain, the depth is counted from the records rather than trusted
  (an undercounted depth would leave messages unread).

Checksum side files (checksums.py): one whose segment is gone (Go deleted or renamed it) is
removed; the write file's, when writes go on in it, is cut to its groups for the records before
the write position (a new one is started if it does not belong to the segment).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import struct
from dataclasses import dataclass, field

from . import checksums, deferred
from .files import (
    Metadata,
    MetadataError,
    data_file_name,
    deferred_file_name,
    deferred_log_name,
    metadata_file_name,
    read_deferred,
    read_metadata,
    side_file_name,
)
from .fs import O_RDONLY, FileSystem

log = logging.getLogger("trionsq.diskqueue")

_LENGTH = struct.Struct(">I")
_COUNT_CHUNK = 1 << 20
#: File numbers this close to int64's end cannot roll over (go's file numbers are int64).
_MAX_FILE_NUM = (1 << 63) - 1 - (1 << 20)


@dataclass
class Recovered:
    """Where a queue starts, and what recovery found."""

    meta: Metadata
    #: Segment numbers on disk when it was opened, ascending.
    segments: list[int]
    deferred_due: dict[bytes, int] = field(default_factory=dict)
    deferred_file_exists: bool = False
    held: dict[bytes, deferred.Held] = field(default_factory=dict)
    log_size: int = 0
    #: Bytes of the records from the read position to the write position (`DiskQueue.depth_bytes`).
    queued_bytes: int = 0
    #: What recovery corrected, and whether that was corruption (logged as an error) or the
    #: ordinary aftermath of a crash (a warning).
    notes: list[str] = field(default_factory=list)
    corrupt: bool = False
    #: How the write file's checksum side file goes on (checksums.py): the file number, the
    #: bytes of it to keep and the bytes to append; None: the write file gets none.
    side_resume: tuple[int, int, bytes] | None = None


def segments_on_disk(fs: FileSystem, data_path: str, name: str) -> list[int]:
    return _listing(fs, data_path, name)[0]


def _listing(fs: FileSystem, data_path: str, name: str) -> tuple[list[int], list[int]]:
    """The numbers of the queue's segments, and of its checksum side files."""
    pattern = re.compile(re.escape(name) + r"\.diskqueue\.(\d{6,})\.(dat|crc)")
    try:
        names = fs.listdir(data_path)
    except OSError:
        return [], []
    segments: list[int] = []
    sides: list[int] = []
    for n in names:
        if m := pattern.fullmatch(n):
            (segments if m.group(2) == "dat" else sides).append(int(m.group(1)))
    return sorted(segments), sides


def recover(
    fs: FileSystem, name: str, data_path: str, *, min_msg_size: int, max_msg_size: int
) -> Recovered:
    """See the module docstring."""
    limits = (min_msg_size, max_msg_size)
    segments, sides = _listing(fs, data_path, name)
    notes: list[str] = []
    corrupt = False
    try:
        meta = read_metadata(fs, metadata_file_name(data_path, name))
    except (OSError, MetadataError) as err:
        notes.append(f"failed to retrieveMetaData - {err}")
        corrupt = True
        meta = None
    if meta is not None and (meta.read_file, meta.read_pos) > (meta.write_file, meta.write_pos):
        notes.append(
            f"read position {meta.read_file},{meta.read_pos} is past write position "
            f"{meta.write_file},{meta.write_pos}"
        )
        corrupt = True
        meta = None
    if meta is not None and meta.write_file > _MAX_FILE_NUM:
        notes.append(f"write file number {meta.write_file} at the end of int64")
        corrupt = True
        meta = None
    if meta is None:
        if segments:
            notes.append(f"reading every segment on disk ({_span(segments)})")
        first = segments[0] if segments else 0
        last = segments[-1] + 1 if segments else 0
        meta = Metadata(0, first, 0, last, 0)
        depth = sum(_count_records(fs, data_path, name, n, 0, limits) for n in segments)
    else:
        meta, recount, skip_corrupt = _check_read_position(fs, data_path, name, meta, segments)
        corrupt |= skip_corrupt
        if recount:
            notes.append(recount)
        meta, salvaged = _salvage(fs, data_path, name, meta, segments, limits)
        if salvaged:
            notes.append(salvaged)
        between = [n for n in segments if meta.read_file <= n < meta.write_file]
        gap = len(between) != meta.write_file - meta.read_file
        if gap and not recount:
            notes.append(
                f"{meta.write_file - meta.read_file - len(between)} segments missing between "
                f"read file {meta.read_file} and write file {meta.write_file}"
            )
        behind = (meta.read_file, meta.read_pos) < (meta.write_file, meta.write_pos)
        if recount or gap or meta.depth < 0 or (meta.depth == 0 and behind):
            depth = _count_from(fs, data_path, name, meta, segments, limits)
            if depth != meta.depth:
                notes.append(f"depth {meta.depth} recounted as {depth}")
        else:
            depth = meta.depth
    recovered = Recovered(
        dataclasses.replace(meta, depth=depth),
        segments,
        queued_bytes=_queued_bytes(fs, data_path, name, meta, segments),
        notes=notes,
        corrupt=corrupt,
    )
    _recover_deferred(fs, data_path, name, recovered)
    _recover_sides(fs, data_path, name, recovered, sides, limits)
    return recovered


def log_recovery(name: str, recovered: Recovered, logger: logging.Logger = log) -> None:
    """The one line that says what recovery of queue `name` corrected (none if nothing)."""
    if recovered.notes:
        level = logging.ERROR if recovered.corrupt else logging.WARNING
        logger.log(level, "DISKQUEUE(%s) recovery: %s", name, "; ".join(recovered.notes))


def _span(segments: list[int]) -> str:
    return f"{segments[0]:06d}" if len(segments) == 1 else f"{segments[0]:06d}-{segments[-1]:06d}"


def _check_read_position(
    fs: FileSystem, data_path: str, name: str, meta: Metadata, segments: list[int]
) -> tuple[Metadata, str, bool]:
    """A missing read file or a read position beyond its file's end: where to read from
    instead, and the note (empty if the read position stands)."""
    if meta.read_file < meta.write_file and meta.read_file not in segments:
        later = [n for n in segments if meta.read_file < n <= meta.write_file]
        start = later[0] if later else meta.write_file
        note = f"read file {meta.read_file} is missing, reading from {start}"
        return dataclasses.replace(meta, read_file=start, read_pos=0), note, True
    if meta.read_pos:
        try:
            size = fs.size(data_file_name(data_path, name, meta.read_file))
        except FileNotFoundError:
            size = 0
        if meta.read_pos > size and (meta.read_file < meta.write_file or size > 0):
            note = (
                f"read position {meta.read_pos} is beyond the {size} bytes of read file "
                f"{meta.read_file}, reading it from its start"
            )
            return dataclasses.replace(meta, read_pos=0), note, True
    return meta, "", False


def _salvage(
    fs: FileSystem,
    data_path: str,
    name: str,
    meta: Metadata,
    segments: list[int],
    limits: tuple[int, int],
) -> tuple[Metadata, str]:
    """Writes that reached the disk after the metadata was last written (a crash, or Go
    nsqd killed): count them into the depth, and write after them, as go-diskqueue does."""
    path = data_file_name(data_path, name, meta.write_file)
    try:
        size = fs.size(path)
    except FileNotFoundError:
        size = 0
    later = [n for n in segments if n > meta.write_file]
    if size == meta.write_pos and not later:
        return meta, ""
    # Shorter or missing too (spec/disk_queue.py, unlike go): appending at writePos would
    # leave a hole that reads as a bad record, losing what is written after it.
    extra = _count_records(fs, data_path, name, meta.write_file, meta.write_pos, limits)
    extra += sum(_count_records(fs, data_path, name, n, 0, limits) for n in later)
    next_file = (later[-1] if later else meta.write_file) + 1
    note = (
        f"write file {meta.write_file} is {size} bytes, not writePos {meta.write_pos}: "
        f"{extra} records salvaged, writing to new file {next_file}"
    )
    salvaged = Metadata(meta.depth + extra, meta.read_file, meta.read_pos, next_file, 0)
    return salvaged, note


def _count_from(
    fs: FileSystem,
    data_path: str,
    name: str,
    meta: Metadata,
    segments: list[int],
    limits: tuple[int, int],
) -> int:
    """Records from the read position to the write position, over the segments that exist."""
    count = 0
    for num in segments:
        if meta.read_file <= num <= meta.write_file:
            start = meta.read_pos if num == meta.read_file else 0
            count += _count_records(fs, data_path, name, num, start, limits)
    return count


def _queued_bytes(
    fs: FileSystem, data_path: str, name: str, meta: Metadata, segments: list[int]
) -> int:
    """Bytes from the read position to the write position, over the segments that exist."""
    total = 0
    for num in segments:
        if meta.read_file <= num < meta.write_file:
            try:
                total += fs.size(data_file_name(data_path, name, num))
            except OSError:
                continue
    if meta.read_file == meta.write_file:
        return max(meta.write_pos - meta.read_pos, 0)
    return max(total + meta.write_pos - meta.read_pos, 0)


def _count_records(
    fs: FileSystem, data_path: str, name: str, file_num: int, start: int, limits: tuple[int, int]
) -> int:
    """Whole, valid records in a segment from `start` (stops at the first bad one), read a
    chunk at a time."""
    lo, hi = limits
    try:
        fd = fs.open(data_file_name(data_path, name, file_num), O_RDONLY)
    except OSError:
        return 0
    try:
        size = fs.fsize(fd)
        count, pos = 0, start
        buf, base = b"", start
        while pos + 4 <= size:
            if pos + 4 > base + len(buf):
                buf, base = fs.pread(fd, _COUNT_CHUNK, pos), pos
                if len(buf) < 4:
                    break
            length = _LENGTH.unpack_from(buf, pos - base)[0]
            if not lo <= length <= hi or pos + 4 + length > size:
                break
            pos += 4 + length
            count += 1
        return count
    except OSError:
        return 0
    finally:
        fs.close(fd)


def _recover_deferred(fs: FileSystem, data_path: str, name: str, recovered: Recovered) -> None:
    """The due times written at the last shutdown, and the messages the deferred log holds."""
    path = deferred_file_name(data_path, name)
    try:
        recovered.deferred_due = read_deferred(fs, path)
    except (OSError, ValueError) as err:
        recovered.notes.append(f"ignoring unreadable deferred file ({err})")
        recovered.corrupt = True
    recovered.deferred_file_exists = fs.exists(path)
    try:
        held, size, note = deferred.recover(fs, deferred_log_name(data_path, name))
    except OSError as err:
        recovered.notes.append(f"unreadable deferred log ({err})")
        return
    recovered.held, recovered.log_size = held, size
    if note:
        recovered.notes.append(f"deferred log: {note}")


def _recover_sides(
    fs: FileSystem,
    data_path: str,
    name: str,
    recovered: Recovered,
    sides: list[int],
    limits: tuple[int, int],
) -> None:
    """Remove side files whose segment is gone; see how the write file's goes on."""
    present = set(recovered.segments)
    for num in sides:
        if num not in present:
            try:
                fs.remove(side_file_name(data_path, name, num))
            except OSError:
                pass
    meta = recovered.meta
    if not checksums.ENABLED or not meta.write_pos:
        return
    try:
        fd = fs.open(data_file_name(data_path, name, meta.write_file), O_RDONLY)
    except OSError:
        return
    try:
        size = fs.fsize(fd)
        if size != meta.write_pos:
            return
        try:
            side = fs.read_file(side_file_name(data_path, name, meta.write_file))
        except FileNotFoundError:
            side = b""
        resume = checksums.resume(fs, fd, size, side, meta.write_pos, *limits)
    except (OSError, ValueError, struct.error):
        return  # no side file for the rest of the write file: its records go unchecked
    finally:
        fs.close(fd)
    if resume is not None:
        recovered.side_resume = (meta.write_file, *resume)
