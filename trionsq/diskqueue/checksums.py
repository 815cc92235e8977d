"""Checksum side files: a CRC-32C per record of every disk-queue segment trionsq writes, kept in
``<name>.diskqueue.%06d.crc`` beside ``<name>.diskqueue.%06d.dat``, so that a record damaged on
disk is found when it is read (queue.py moves it aside) instead of being delivered.

The segments stay byte for byte go-diskqueue's. Go's nsqd opens its files by name and never
lists the data directory, so it ignores these files (and leaves them behind when it deletes a
segment: recovery.py removes a side file whose segment is gone).

Format (every word a little-endian uint32):

* a header of 20 bytes: ``b"TQDQCRC1"``, the length of the segment's first record, the
  CRC-32C of that record's payload, and the CRC-32C of those 16 bytes. It names the segment
  instance the file belongs to: a side file whose header does not describe the segment beside
  it (Go deleted the segment and later wrote another of the same number, or rewrote it from
  offset 0) is ignored (`matches`);
* then 8-byte units of two words:

  - a record ``(length, crc)``: the next record's length and the CRC-32C of its payload (the
    record without its 4-byte length);
  - a group, two units ``(0xFFFE0000 + n, data_crc) (span, units_crc)``: the CRC-32C of the
    ``span`` bytes of the ``n`` records whose units come just before it (length prefixes
    included), and the CRC-32C of those ``8 * n`` bytes of units. A reader checks a run of
    records with one CRC over their bytes; the second CRC is what makes their units
    believable one by one;
  - a position, two units ``(0xFFFFFFFF, pos) (0, pos ^ 0xFFFFFFFF)``: the next record unit
    describes the record at data offset ``pos`` (a segment this process went on writing after
    Go, or an older trionsq, wrote its start). Without one, units describe the records from
    offset 0, one after another.

A writer closes a group every ~256 KiB of records, or when a sync round could write it and it
has 64 records or more, or when its segment is finished; only closed groups are written, so
every unit on disk is in a group.

When units are written: after the data they describe has been fsynced, by the sync round that
fsynced it (queue.py), and fsynced by the next round; until then the queue holds them in memory
(`SideWriter`), where its reader finds them too. So a side file never describes bytes a power
cut took away: Go appending at the same offsets after such a cut cannot make its records look
corrupt, and a torn side file is a prefix of what was written.

What a reader believes (`SideReader`, queue.py): a run of records whose bytes match their
group's CRC is good. Otherwise its record units are believed only if they match their group's
units CRC: a record whose believed unit does not match its bytes is corrupt; records whose units
cannot be believed (a torn or damaged side file), and records past the side file's end, are
read unchecked, as before side files existed. Positions follow from believed units only. A good
record is therefore never called corrupt because of its side file. Records whose units are
still in memory (this process appended them since the segment's last sync, and reads them back
from the page cache) are not checked: their units only go on with them when they are moved to
another queue.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections import deque

from ..protocol.crc32c import COMPILED_CRC32C, crc32c
from .fs import FileSystem

#: Whether side files are written and checked: only with the compiled CRC-32C (the Python one
#: is about a thousand times slower). Without it segments are written and read unchecked, as
#: Go's are.
ENABLED = COMPILED_CRC32C is not None and crc32c is COMPILED_CRC32C

MAGIC = b"TQDQCRC1"
HEADER_SIZE = 20
#: Bytes of a record's unit.
UNIT = 8
GROUP_BASE = 0xFFFE0000
GROUP_MAX = 0xFFFF
POS_TAG = 0xFFFFFFFF
#: A group covers about this many bytes of records (one record at least, GROUP_MAX at most).
GROUP_BYTES = 256 << 10
#: A group's bytes stay below this (its span is a uint32), unless it is one record.
SPAN_MAX = 1 << 30
#: A group still open when a sync round could write its units is closed then if it has this
#: many records; a smaller one (a trickle of single PUBs) keeps its units in memory until it
#: grows, so that groups stay large and their units reach the disk only inside a group.
GROUP_MIN = 64
#: Side-file bytes parsed at a time by a reader.
PARSE_CHUNK = UNIT * 16384

_HEADER = struct.Struct("<8sII")
_PAIR = struct.Struct("<II")
_QUAD = struct.Struct("<IIII")
_BIG = sys.byteorder == "big"

#: Kinds of what a reader has ahead of it (`Ahead`).
CHECKED, UNCHECKED, BAD = 0, 1, 2

#: A run of records a side file describes: data offsets of its first record and of its end,
#: its record count, their units, its group's data and units CRCs (None: no group), and
#: whether the units came from this process's memory (believed without a group).
Run = tuple[int, int, int, bytes, "int | None", "int | None", bool]


class Ahead:
    """What lies ahead of a segment's reader, up to data offset `end`: records checked
    (`CHECKED`: their units from `offset` on, for the ones not read yet; none if the units
    could not be believed, though the records matched their group), records read unchecked
    (`UNCHECKED`), or one record that failed its check (`BAD`: its unit, and its `length` by
    the unit)."""

    __slots__ = ("end", "kind", "length", "offset", "units")

    def __init__(self, kind: int, end: int, units: bytes | None = b"", length: int = 0) -> None:
        self.kind = kind
        self.end = end
        self.units = units
        self.offset = 0
        self.length = length


def header(length: int, crc: int) -> bytes:
    """The header naming a segment whose first record has `length` and payload CRC `crc`."""
    head = _HEADER.pack(MAGIC, length, crc)
    return head + crc32c(head).to_bytes(4, "little")


def parse_header(data: bytes) -> tuple[int, int] | None:
    """(length, payload CRC) of the first record a header names; None if it is no header."""
    if len(data) < HEADER_SIZE:
        return None
    magic, length, crc = _HEADER.unpack_from(data)
    if magic != MAGIC or int.from_bytes(data[16:20], "little") != crc32c(data[:16]):
        return None
    return length, crc


def position_units(pos: int) -> bytes:
    return _QUAD.pack(POS_TAG, pos, 0, pos ^ 0xFFFFFFFF)


def group_units(count: int, data_crc: int, span: int, units_crc: int) -> bytes:
    return _QUAD.pack(GROUP_BASE + count, data_crc, span, units_crc)


def _words(data: bytes | memoryview) -> array[int]:
    words = array("I")
    words.frombytes(data)
    if _BIG:
        words.byteswap()
    return words


def record_units(lengths: array[int], crcs: array[int]) -> bytes:
    """The units of records of these lengths and payload CRCs (arrays of "I")."""
    units = array("I", bytes(UNIT * len(lengths)))
    units[0::2] = lengths
    units[1::2] = crcs
    if _BIG:
        units.byteswap()
    return units.tobytes()


def unit_lengths(units: bytes | memoryview) -> array[int]:
    """The record lengths in record units."""
    return _words(units)[0::2]


class SideWriter:
    """The side file of a segment this process writes: its units are built as records are
    appended (`add`) and held in `buf` until a sync round, once it has fsynced the records,
    writes them (queue.py's sync job, in a worker thread)."""

    __slots__ = (
        "_count",
        "_data_crc",
        "_span",
        "_target",
        "_units_crc",
        "buf",
        "closed",
        "dirty",
        "failed",
        "fd",
        "flushed",
        "header_needed",
        "num",
        "retired",
    )

    def __init__(
        self, num: int, fd: int | None, *, flushed: int = 0, pending: bytes = b"", fresh: bool
    ) -> None:
        self.num = num
        #: Write descriptor; None once it was handed over to be closed.
        self.fd = fd
        #: Bytes of the file that sync rounds wrote.
        self.flushed = flushed
        #: The stream's bytes after `flushed`, not yet written.
        self.buf = bytearray(pending)
        #: Bytes at the start of `buf` up to the end of the last closed group: what a sync
        #: round may write (the open group's units stay in memory).
        self.closed = len(pending)
        self.header_needed = fresh
        #: Written by a sync round and not yet fsynced.
        self.dirty = False
        #: Its segment is finished (rolled): once its units are written and fsynced, the
        #: descriptor is closed.
        self.retired = False
        #: A write failed (or its segment is gone): no more units.
        self.failed = False
        # The open group: its size target, records, bytes, and both CRCs so far.
        self._target = self._count = self._span = self._data_crc = self._units_crc = 0

    @property
    def end(self) -> int:
        """The stream's length: written and held."""
        return self.flushed + len(self.buf)

    def add(self, data: bytes, units: bytes, lengths: array[int] | None = None) -> None:
        """The records `data` just appended to the segment, described by record `units`
        (`lengths`: theirs, if the caller has them)."""
        if self.failed:
            return
        buf = self.buf
        if self.header_needed:
            self.header_needed = False
            buf += header(*_PAIR.unpack_from(units))
        n = len(units) // UNIT
        view = memoryview(data)
        i = pos = 0
        count, span, data_crc, units_crc = self._count, self._span, self._data_crc, self._units_crc
        while i < n:
            if not count:
                first = int.from_bytes(units[UNIT * i : UNIT * i + 4], "little")
                self._target = max(1, min(GROUP_MAX, GROUP_BYTES // (4 + first)))
            take = min(n - i, self._target - count)
            if i + take == n:
                size = len(data) - pos
            else:
                if lengths is None:
                    lengths = unit_lengths(units)
                size = 4 * take + sum(lengths[i : i + take])
            if span + size > SPAN_MAX:
                # Huge records (a large --max-bytes-per-file and --max-msg-size): bytes close
                # the group, not its count.
                if count:
                    buf += group_units(count, data_crc, span, units_crc)
                    self.closed = len(buf)
                    count = span = data_crc = units_crc = 0
                    continue
                if take > 1:
                    if lengths is None:
                        lengths = unit_lengths(units)
                    take, size = 1, 4 + lengths[i]
            mine = units[UNIT * i : UNIT * (i + take)] if take < n else units
            data_crc = crc32c(view[pos : pos + size] if take < n else data, data_crc)
            units_crc = crc32c(mine, units_crc)
            buf += mine
            pos += size
            i += take
            count += take
            span += size
            if count == self._target:
                buf += group_units(count, data_crc, span, units_crc)
                self.closed = len(buf)
                count = span = data_crc = units_crc = 0
        self._count, self._span, self._data_crc, self._units_crc = count, span, data_crc, units_crc

    def writable(self, closing: bool) -> bytes:
        """The bytes a sync round may write now: up to the last closed group, after closing
        the open one if it is large enough or its segment is finished (`closing`)."""
        if self._count and not self.failed and (closing or self._count >= GROUP_MIN):
            self.buf += group_units(self._count, self._data_crc, self._span, self._units_crc)
            self.closed = len(self.buf)
            self._count = self._span = self._data_crc = self._units_crc = 0
        return bytes(self.buf[: self.closed])

    def written(self, size: int) -> None:
        """A sync round wrote the first `size` bytes of `buf`."""
        if not self.failed:
            del self.buf[:size]
            self.closed -= size
            self.flushed += size

    def drop(self) -> None:
        """No more units (the segment is gone, or a write failed)."""
        self.failed = True
        self.buf.clear()
        self.closed = 0


class SideReader:
    """The units of one segment's side file as its reader needs them, parsed a chunk at a
    time into runs of records (`runs`, see `Run`); queue.py checks the records against them
    and queues what lies ahead of the reader in `ready`."""

    def __init__(
        self,
        fs: FileSystem,
        fd: int,
        size: int,
        own: SideWriter | None,
        lo: int,
        hi: int,
        *,
        contents: bytes | None = None,
    ) -> None:
        """The side file open on `fd`, `size` bytes long; `own`: the writer of a segment this
        process writes (its units not yet written are in memory); `contents`: the file's
        bytes, already read (`fd` is then not used)."""
        self._fs = fs
        self._fd = fd
        self._size = size if contents is None else len(contents)
        self._own = own
        self._contents = contents
        self.lo, self.hi = lo, hi
        self._parsed = HEADER_SIZE
        self._pos = 0  # data offset of the record the next record unit describes
        self._open: list[bytes] = []  # record units since the last group or position
        self._open_from_memory = False
        self._open_emitted = False  # some of those are already in a run (no group for them)
        self.runs: deque[Run] = deque()
        self.ready: deque[Ahead] = deque()
        #: Something could not be believed: nothing after it is.
        self.broken = False

    def close(self) -> None:
        if self._contents is None:
            try:
                self._fs.close(self._fd)
            except OSError:
                pass

    def _available(self) -> int:
        own = self._own
        if own is not None:
            return own.end if not own.failed else own.flushed
        return self._size

    def _read(self, start: int, stop: int) -> tuple[bytes, int]:
        """The stream's bytes [start, stop), and where the ones from memory start."""
        if self._contents is not None:
            return self._contents[start:stop], stop
        own = self._own
        on_disk = stop if own is None else min(stop, own.flushed)
        data = b""
        if start < on_disk:
            data = self._fs.pread(self._fd, on_disk - start, start)
            if len(data) < on_disk - start:  # the file is shorter than it was
                return data[: len(data) // UNIT * UNIT], stop
        if own is not None and stop > on_disk:
            first = max(start, own.flushed) - own.flushed
            data += own.buf[first : stop - own.flushed]
        return data, max(on_disk, start)

    def fill(self) -> bool:
        """Parse more units into `runs`; False if there are none to parse."""
        if self.broken:
            return False
        end = self._available()
        start = self._parsed
        if end - start < UNIT:
            return False
        stop = start + min(end - start, PARSE_CHUNK) // UNIT * UNIT
        data, memory = self._read(start, stop)
        if not data:
            return False
        final = start + len(data) + UNIT > end
        consumed = self._parse(data, final, memory - start)
        self._parsed = start + consumed
        return consumed > 0

    def _parse(self, data: bytes, final: bool, memory: int) -> int:
        """Parse whole units of `data` (from offset `memory` on, they came from memory);
        returns the bytes consumed: not final, up to the last group or position, so that a
        group is not cut from its records."""
        marks = data[3::UNIT]
        n = len(marks)
        limit = n
        if not final:
            last = marks.rfind(b"\xff")
            if last >= 0:
                limit = min(last + 2, n)
        i = 0
        while i < limit:
            j = marks.find(b"\xff", i, limit)
            if j < 0:
                j = limit
            if j > i:
                from_memory = UNIT * i >= memory
                if self._open:
                    self._open_from_memory = self._open_from_memory and from_memory
                else:
                    self._open_from_memory = from_memory
                self._open.append(data[UNIT * i : UNIT * j])
            if j == limit:
                break
            if j + 1 >= n:  # a marker cut from its second unit: the end of what is there
                if final:
                    self._emit(None)
                    self.broken = True
                return UNIT * j
            a, b, c, d = _QUAD.unpack_from(data, UNIT * j)
            if a == POS_TAG and c == 0 and d == b ^ 0xFFFFFFFF and b >= self._pos:
                self._emit(None)
                self._pos = b
            elif GROUP_BASE < a <= GROUP_BASE + GROUP_MAX:
                self._emit((a - GROUP_BASE, b, c, d))
            else:
                self._emit(None)
                self.broken = True
            if self.broken:
                return UNIT * (j + 2)
            self._open_emitted = False
            i = j + 2
        if final and self._open:
            self._emit(None)
            self._open_emitted = True
        return UNIT * limit

    def _emit(self, group: tuple[int, int, int, int] | None) -> None:
        """The open record units become runs (checked by `group` if it covers them all)."""
        if not self._open:
            return
        units = b"".join(self._open) if len(self._open) > 1 else self._open[0]
        memory = self._open_from_memory
        self._open = []
        n = len(units) // UNIT
        if group is not None and not self._open_emitted and group[0] < n:
            # The group covers the last records only (the rest came before a restart).
            first = n - group[0]
            self._emit_run(units[: UNIT * first], None, memory)
            units, n = units[UNIT * first :], group[0]
        if group is not None and (self._open_emitted or group[0] != n):
            group = None
        self._emit_run(units, group, memory)

    def _emit_run(
        self, units: bytes, group: tuple[int, int, int, int] | None, memory: bool
    ) -> None:
        if self.broken or not units:
            return
        n = len(units) // UNIT
        start = self._pos
        if group is not None:
            # Where the run ends by its group: believed once the data matches, else mended
            # from the units' lengths (`mend`).
            self._pos = start + group[2]
            self.runs.append((start, self._pos, n, units, group[1], group[3], memory))
            return
        if not memory:
            # Units on disk outside any group (a torn side file): not believable.
            self.broken = True
            return
        self._pos = start + 4 * n + sum(unit_lengths(units))
        self.runs.append((start, self._pos, n, units, None, None, True))

    def mend(self, claimed_end: int, real_end: int) -> None:
        """A group's span was wrong (`claimed_end`, not `real_end`): the runs after it, and
        the next unit's position, move by the difference."""
        shift = real_end - claimed_end
        if shift:
            self.runs = deque((r[0] + shift, r[1] + shift, *r[2:]) for r in self.runs)
            self._pos += shift


def believed(run: Run) -> bool:
    """Whether a run's record units can be believed one by one."""
    return run[6] or (run[5] is not None and crc32c(run[3]) == run[5])


def matches(
    fs: FileSystem, data_fd: int, data_size: int, side: SideReader, first: tuple[int, int]
) -> bool:
    """Whether `side` (a side file's units, its header naming `first`) belongs to the segment
    open on `data_fd`: the segment's first record is the one the header names, or, when that
    record is damaged, the next record a believed unit describes is there as described."""
    if _record_matches(fs, data_fd, data_size, 0, *first):
        return True
    while not side.runs and side.fill():
        pass
    for run in list(side.runs)[:2]:
        if not believed(run):
            return False
        words = _words(run[3])
        pos = run[0]
        for i in range(min(run[2], 2)):
            if pos > 0:
                return _record_matches(fs, data_fd, data_size, pos, words[2 * i], words[2 * i + 1])
            pos += 4 + words[2 * i]
    return False


def _record_matches(fs: FileSystem, fd: int, size: int, pos: int, length: int, crc: int) -> bool:
    if pos + 4 + length > size:
        return False
    data = fs.pread(fd, 4 + length, pos)
    return (
        len(data) == 4 + length
        and int.from_bytes(data[:4], "big") == length
        and crc32c(memoryview(data)[4:]) == crc
    )


def first_record(fs: FileSystem, fd: int, size: int, lo: int, hi: int) -> tuple[int, int] | None:
    """(length, payload CRC) of a segment's first record; None if it has no valid one."""
    if size < 4:
        return None
    head = fs.pread(fd, 4, 0)
    length = int.from_bytes(head, "big")
    if len(head) < 4 or not lo <= length <= hi or 4 + length > size:
        return None
    payload = fs.pread(fd, length, 4)
    if len(payload) < length:
        return None
    return length, crc32c(payload)


def resume(
    fs: FileSystem, data_fd: int, data_size: int, side: bytes, write_pos: int, lo: int, hi: int
) -> tuple[int, bytes] | None:
    """How a segment's side file goes on when writes continue at `write_pos` after a restart:
    the bytes of it to keep (its groups of records that end at or before `write_pos`) and the
    bytes to append (a new header, a position). None: no side file can go on (the segment has
    no valid first record, or `write_pos` does not fit a position)."""
    first = first_record(fs, data_fd, data_size, lo, hi)
    if first is None or write_pos >= 1 << 32:
        return None
    named = parse_header(side)
    if named is None or (named != first and not _belongs(fs, data_fd, data_size, side, named)):
        return 0, header(*first) + position_units(write_pos)
    keep, covered = _covered(side, write_pos)
    return keep, (b"" if covered == write_pos else position_units(write_pos))


def _belongs(
    fs: FileSystem, data_fd: int, data_size: int, side: bytes, named: tuple[int, int]
) -> bool:
    reader = SideReader(fs, -1, 0, None, 0, 0xFEFFFFFF, contents=side)
    return matches(fs, data_fd, data_size, reader, named)


def _covered(side: bytes, write_pos: int) -> tuple[int, int]:
    """The length of the side file's groups (and positions) for records that end at or
    before `write_pos`, and the data offset the next record unit would describe."""
    keep, covered = HEADER_SIZE, 0
    pos = 0
    marks = side[HEADER_SIZE + 3 :: UNIT]
    count = (len(side) - HEADER_SIZE) // UNIT
    k = 0  # unit index: unit k is at HEADER_SIZE + UNIT * k
    while k < count:
        j = marks.find(b"\xff", k, count)
        if j < 0 or j + 1 >= count:
            break  # records without a group: not kept
        a, b, c, d = _QUAD.unpack_from(side, HEADER_SIZE + UNIT * j)
        if a == POS_TAG:
            if j > k or c or d != b ^ 0xFFFFFFFF or b < pos or b > write_pos:
                break
            pos = b
        elif GROUP_BASE < a <= GROUP_BASE + GROUP_MAX and a - GROUP_BASE == j - k:
            units = side[HEADER_SIZE + UNIT * k : HEADER_SIZE + UNIT * j]
            if crc32c(units) != d or pos + c > write_pos:
                break
            if 4 * (j - k) + sum(unit_lengths(units)) != c:
                break
            pos += c
        else:
            break
        k = j + 2
        keep, covered = HEADER_SIZE + UNIT * k, pos
    return keep, covered
