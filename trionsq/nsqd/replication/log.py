"""A replicated topic's log on one member (docs/replication.md section 6): the set of the
topic's messages and, per channel, the set of the IDs it has finished. It owns these files
in the data path, written only for replicated topics:

- ``<topic>.replication.log``: the messages, appended (write(2) before a publish counts);
- ``<topic>:<channel>.replication.fin``: the IDs the channel has finished, appended; the
  file's existence says the channel exists;
- ``<topic>.replication.emptied``: the IDs an HTTP ``/topic/empty`` dropped from the topic's
  queue (finished for every channel, those created later included), once there are some.

**Formats (version 1: checksummed).** The log: an 8-byte header (the byte 0xFF, ``TRNLOG`` and
the version byte, 1), then records ``[4-byte length][8-byte due time, Unix ns, 0: now][framed
message][4-byte CRC-32C]``, the length counting what follows it, the CRC covering the length,
the due time and the frame (a corrupted length is detected too). MSGS, BODIES and PUB_FORWARD
frames carry the same records (no header), and a blob is checked record by record before
anything of it is written (a bad one is a wire error). The ID files (FIN, emptied, dropped):
an 8-byte header (0xFF, ``TRNIDS``, 1), then blocks ``[4-byte count][4-byte CRC-32C of the
count and the IDs][16-byte IDs]``, one or more per write (`write_id_block`; `read_id_file`).

**Loading.** A file an older trionsq wrote (no header: the log's records without a CRC, the
ID files' bare IDs) is converted when loaded: rewritten in the current format to
``<file>.tmp``, fsynced, renamed over the old one, the directory fsynced (a crash before the
rename leaves the old file, converted at the next load). A log record that fails its check is
never delivered, counted as held or copied by a compaction, and never costs the records after
it: the reader resynchronises at the next offset where a plausible length, a frame size that
agrees with it, a message frame's type and a matching CRC start (a false match: 2^-32 a try).
At load its bytes are moved aside, to ``<topic>.replication.log.corrupt-<UTC time>`` for the
operator, and the log rewritten without them (as a conversion is), one line logged per run of
bad bytes; a scan that meets one later skips it and logs it once; either counts it
(`corrupt_records`) and sets `damaged` (messages this member acknowledged may be lost here:
its peers have them). A torn tail (a kill or power cut during a write: fewer bytes than a
record's head, a last record whose length runs past the end and agrees with its frame's size,
or zeros) is cut off. A bad ID block is skipped (logged, counted: a lost FIN or emptied or
dropped ID costs a duplicate after a failover, never a loss) and the blocks after it read; the
file is rewritten without it at load.

Every member, the primary included, keeps it: the channels' ordinary queues are rebuilt from
it ("the log minus the finished set") when a member takes office, so whatever a node held
when it died comes back whichever role it had. When more records are finished by every
channel than are live, the log is rewritten without them (and the FIN files without their
IDs).

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
import time
from collections.abc import Awaitable, Callable, Container, Iterable, Iterator
from typing import Any, TypeVar

from ...diskqueue.fs import LOCAL
from ...protocol.crc32c import crc32c
from ...protocol.message import FRAMED_BODY_OFFSET, framed_id

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
#: The smallest length of a log record: a message frame's prefix, the due time and the CRC.
_MIN_LENGTH = 8 + FRAMED_BODY_OFFSET + 4
#: What a record's length counts besides its frame: the due time and the CRC.
_LENGTH_MIN = 8 + 4
_LENGTH = struct.Struct(">I")
_CRC = struct.Struct(">I")
#: A message frame's type, 16 bytes into its log record (what a resynchronisation looks for).
_MESSAGE_TYPE = b"\x00\x00\x00\x02"
#: The log file's header: magic and format version (records start after it).
LOG_MAGIC = b"\xffTRNLOG"
LOG_VERSION = 1
LOG_HEADER = LOG_MAGIC + bytes([LOG_VERSION])
LOG_START = len(LOG_HEADER)
#: The ID files' header (FIN files, the emptied and dropped files): magic and version.
ID_MAGIC = b"\xffTRNIDS"
ID_VERSION = 1
ID_HEADER = ID_MAGIC + bytes([ID_VERSION])
#: The most IDs in one block of an ID file (a larger write is several blocks).
ID_BLOCK_MAX = 65536
_ID_BLOCK = struct.Struct(">II")
#: Where the corrupt bytes of a log go when it is loaded (+ the UTC time).
CORRUPT_SUFFIX = ".corrupt-"

_T = TypeVar("_T")
Record = tuple[int, bytes]
"""``(due time in Unix ns or 0, framed message)``."""
Chunk = tuple[bytes, int, int]
"""Whole records read from the log, and the offsets they were read from and up to."""


def _crc_record(head: bytes, frame: bytes) -> bytes:
    return _CRC.pack(crc32c(frame, crc32c(head)))


def encode_records(records: Iterable[Record]) -> bytes:
    """The log records of `records`, each with its CRC (no file header: what a file holds
    after its header, and what MSGS, BODIES and PUB_FORWARD carry)."""
    pack = _HEAD.pack
    parts: list[bytes] = []
    for due, frame in records:
        head = pack(len(frame) + _LENGTH_MIN, due)
        parts += (head, frame, _crc_record(head, frame))
    return b"".join(parts)


def _encode_frames(frames: list[bytes], due: int) -> bytes:
    return encode_records([(due, frame) for frame in frames])


def _count_log_records(data: bytes, min_length: int) -> tuple[int, int]:
    unpack = _LENGTH.unpack_from
    view = memoryview(data)
    minimum = max(min_length, _LENGTH_MIN)
    count = 0
    pos, end = 0, len(data)
    while end - pos >= _HEAD.size:
        length = unpack(data, pos)[0]
        stop = pos + length  # where its CRC is
        if length < minimum or stop + 4 > end or crc32c(view[pos:stop]) != unpack(data, stop)[0]:
            break
        pos = stop + 4
        count += 1
    return count, pos


def _scan_log_ids(data: bytes, min_length: int) -> tuple[list[bytes], int]:
    unpack = _LENGTH.unpack_from
    view = memoryview(data)
    minimum = max(min_length, _LENGTH_MIN)
    id_at = 12 + FRAMED_BODY_OFFSET - 16
    ids: list[bytes] = []
    pos, end = 0, len(data)
    while end - pos >= _HEAD.size:
        length = unpack(data, pos)[0]
        stop = pos + length
        if length < minimum or stop + 4 > end or crc32c(view[pos:stop]) != unpack(data, stop)[0]:
            break
        ids.append(data[pos + id_at : pos + id_at + 16])
        pos = stop + 4
    return ids, pos


EncodeFrames = Callable[[list[bytes], int], bytes]
CountRecords = Callable[[bytes, int], tuple[int, int]]
ScanIds = Callable[[bytes, int], tuple[list[bytes], int]]
#: The compiled loops (_log_loops.c, beside this module), None where it was not built.
COMPILED_ENCODE_FRAMES: EncodeFrames | None = None
COMPILED_COUNT_RECORDS: CountRecords | None = None
COMPILED_SCAN_IDS: ScanIds | None = None
try:
    from ._log_loops import count_log_records as COMPILED_COUNT_RECORDS
    from ._log_loops import encode_log_records as COMPILED_ENCODE_FRAMES
    from ._log_loops import scan_log_ids as COMPILED_SCAN_IDS
except ImportError:  # not built: the Python loops above
    pass
if COMPILED_ENCODE_FRAMES is not None:
    _sample = [bytes(FRAMED_BODY_OFFSET) + b"x"]
    if COMPILED_ENCODE_FRAMES(_sample, 1) != _encode_frames(_sample, 1):
        # An extension built from an older _log_loops.c (records without a CRC): writing with
        # it would make every record look corrupt.
        log.warning(
            "trionsq/nsqd/replication/_log_loops is out of date (rebuild it): log loops in Python"
        )
        COMPILED_ENCODE_FRAMES = COMPILED_COUNT_RECORDS = COMPILED_SCAN_IDS = None
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
    malformed, torn or corrupt one (its CRC does not match)."""
    count, pos = _count(data, _MIN_LENGTH)
    if pos != len(data):
        raise ValueError(f"bad record at byte {pos} (length or checksum)")
    return count


def scan_ids(data: bytes) -> tuple[list[bytes], int]:
    """The message IDs of the whole, intact records at the head of `data` (encoded by
    `encode_records`), and where they end: at a torn, malformed or corrupt record, or the
    end."""
    return _scan_ids(data, _MIN_LENGTH)


def decode_records(data: bytes | memoryview) -> list[Record]:
    """Records encoded by `encode_records`, each checked; raises ValueError on a malformed or
    corrupt one."""
    count_records(data)  # type: ignore[arg-type]  # any buffer
    out: list[Record] = []
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        length, due = _HEAD.unpack_from(view, pos)
        out.append((due, bytes(view[pos + 12 : pos + length])))
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


def _record_at(fd: int, offset: int, end: int) -> bytes | None:
    """The whole, intact record at `offset` of the log open as `fd` (not past `end`), or None
    (blocking)."""
    head = _pread(fd, 4, offset)
    if len(head) < 4:
        return None
    length = _LENGTH.unpack(head)[0]
    if length < _MIN_LENGTH or offset + 4 + length > end:
        return None
    record = _pread(fd, 4 + length, offset)
    return record if _count(record, _MIN_LENGTH) == (1, len(record)) else None


def _resync(fd: int, start: int, end: int) -> int:
    """The offset of the first whole, intact record at or after `start` (`end` if none):
    where a length, a frame size that agrees with it, a message frame's type and a matching
    CRC are found (blocking; a false match has a chance of 2^-32 per candidate)."""
    base = start
    while end - base >= 4 + _MIN_LENGTH:
        data = _pread(fd, min(end - base, SCAN_CHUNK), base)
        mark = 16  # the frame type's offset in a record
        while (mark := data.find(_MESSAGE_TYPE, mark)) >= 0:
            at = mark - 16
            length = _LENGTH.unpack_from(data, at)[0]
            if (
                _LENGTH.unpack_from(data, mark - 4)[0] + 16 == length  # the frame's size
                and length >= _MIN_LENGTH
                and base + at + 4 + length <= end
            ):
                if at + 4 + length <= len(data):
                    record = data[at : at + 4 + length]
                else:
                    record = _pread(fd, 4 + length, base + at)
                if _count(record, _MIN_LENGTH) == (1, len(record)):
                    return base + at
            mark += 1
        if len(data) < 20:
            break
        base += len(data) - 19  # the candidates not yet tried: their frame type is past it
    return end


Found = Callable[[int, int], None]
"""Told ``(start, stop)``: the log's bytes from `start` to `stop` hold no intact record."""


def read_records(
    fd: int, offset: int, end: int, max_bytes: int, found: Found | None = None
) -> tuple[bytes, int]:
    """The whole, intact records of the log open as `fd` from `offset` on (a record's start),
    not past `end`: as many as fit in `max_bytes` (at least one: a record larger is read
    whole), and the offset after what was read (blocking). Corrupt bytes at `offset` (a
    record whose length or CRC does not check) are skipped: none is returned with the offset
    of the next intact record (or `end`), and `found` is told where they are."""
    if offset >= end:
        return b"", offset
    data = _pread(fd, min(end - offset, max_bytes), offset)
    pos = _count(data, _MIN_LENGTH)[1]
    if pos:
        return (data if pos == len(data) else data[:pos]), offset + pos
    record = _record_at(fd, offset, end)  # larger than max_bytes, or bad
    if record is not None:
        return record, offset + len(record)
    after = _resync(fd, offset + 1, end)
    if found is not None:
        found(offset, after)
    return b"", after


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
    what it reads. Its reads block (a worker thread's work); `close` it when done. Corrupt
    records are skipped (`read_records`), and `found` told of them."""

    def __init__(self, path: str, size: int, found: Found | None = None) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.size = size
        self.found = found

    def chunk(self, offset: int, end: int, max_bytes: int) -> tuple[bytes, int]:
        """`read_records` of this file (an offset before the first record, as 0, is read
        from the first record)."""
        return read_records(self.fd, max(offset, LOG_START), end, max_bytes, self.found)

    def spans(self, offset: int = LOG_START, end: int | None = None) -> Iterator[Chunk]:
        """The records from `offset` to `end` (its length), SCAN_CHUNK bytes at a time: each
        piece with the offsets it was read from and up to (corrupt bytes skipped between
        two pieces, or read as an empty one)."""
        stop = self.size if end is None else end
        offset = max(offset, LOG_START)
        while offset < stop:
            data, after = self.chunk(offset, stop, SCAN_CHUNK)
            yield data, offset, after
            offset = after

    def chunks(self, offset: int = LOG_START, end: int | None = None) -> Iterator[bytes]:
        """The records from `offset` to `end` (its length), SCAN_CHUNK bytes at a time."""
        for data, _, _ in self.spans(offset, end):
            if data:
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
        for data, offset, _ in self.spans():
            ids = scan_ids(data)[0]
            held.update(ids)
            if first < 0 and not theirs.issuperset(ids):
                for message_id, start, _ in record_spans(data):
                    if message_id not in theirs:
                        first = offset + start
                        break
        return held, self.size if first < 0 else first

    def records(self) -> list[Record]:
        out: list[Record] = []
        for data in self.chunks():
            out += decode_records(data)
        return out

    def records_from(self, offset: int, max_bytes: int) -> tuple[list[Record], int]:
        """The records from `offset` on, about `max_bytes` of them, and where they end."""
        data, after = self.chunk(offset, self.size, max_bytes)
        return decode_records(data), after

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


def _file_format(head: bytes, header: bytes, size: int, first_intact: Callable[[], bool]) -> str:
    """Which format a file of `size` bytes starting with `head` is in: "current" (its
    header, or a piece of it: a file just created), "damaged" (a header with bits flipped:
    followed by an intact record or block, or by nothing, or a few bits from it), or "old"
    (written before the versions: no header). Raises ValueError for a later version."""
    if header.startswith(head):
        return "current"
    if len(head) < len(header):
        return "old"
    if size == len(header) or first_intact():
        return "damaged"
    if head[:-1] == header[:-1]:
        raise ValueError(f"format version {head[-1]} (this trionsq reads {header[-1]})")
    flipped = sum((a ^ b).bit_count() for a, b in zip(head, header, strict=True))
    return "damaged" if flipped <= 8 or head[0] == 0xFF else "old"


def _id_block_end(blob: bytes, pos: int) -> int | None:
    """The end of the intact ID block at `pos` of `blob`, or None."""
    if len(blob) - pos < _ID_BLOCK.size:
        return None
    count: int
    crc: int
    count, crc = _ID_BLOCK.unpack_from(blob, pos)
    stop = pos + _ID_BLOCK.size + count * ID_SIZE
    if not 1 <= count <= ID_BLOCK_MAX or stop > len(blob):
        return None
    view = memoryview(blob)
    if crc32c(view[pos + _ID_BLOCK.size : stop], crc32c(view[pos : pos + 4])) != crc:
        return None
    return stop


def _id_blocks(blob: bytes) -> tuple[list[bytes], list[tuple[int, int]], int]:
    """The IDs of a current-format ID file's intact blocks, the runs of bad bytes between
    them (a bad block is skipped: the next intact one is looked for byte by byte), and where
    a torn last block starts (its length)."""
    ids: list[bytes] = []
    bad: list[tuple[int, int]] = []
    pos, end = min(len(ID_HEADER), len(blob)), len(blob)
    while pos < end:
        stop = _id_block_end(blob, pos)
        if stop is not None:
            ids += _ID.findall(blob, pos + _ID_BLOCK.size, stop)
            pos = stop
            continue
        after = pos + 1
        while (after := blob.find(b"\x00", after)) >= 0 and _id_block_end(blob, after) is None:
            after += 1  # a count of at most ID_BLOCK_MAX starts with a zero byte
        after = end if after < 0 else after
        if after == end and _id_tail_torn(blob, pos):
            return ids, bad, pos
        bad.append((pos, after))
        pos = after
    return ids, bad, end


def _id_tail_torn(blob: bytes, pos: int) -> bool:
    """The bad bytes from `pos` to the end of an ID file are a torn last write: too few for
    a block's head, a block whose count runs past the end, or zeros."""
    if len(blob) - pos < _ID_BLOCK.size:
        return True
    count = _LENGTH.unpack_from(blob, pos)[0]
    if 1 <= count <= ID_BLOCK_MAX and pos + _ID_BLOCK.size + count * ID_SIZE > len(blob):
        return True
    return not blob[pos:].strip(b"\x00")


def write_id_block(fd: int, ids: Iterable[bytes]) -> None:
    """Append `ids` (16 bytes each) to the ID file open as `fd` (a FIN file, the emptied or
    the dropped file) with one write(2): blocks ``[4-byte count][4-byte CRC-32C of the count
    and the IDs][IDs]`` of at most ID_BLOCK_MAX IDs, after the file's header if it is empty
    (blocking). No ID, and a file that has its header: nothing written."""
    joined = b"".join(ids)
    if len(joined) % ID_SIZE:
        raise ValueError("IDs must be 16 bytes")
    parts = [ID_HEADER] if os.fstat(fd).st_size == 0 else []
    step = ID_BLOCK_MAX * ID_SIZE
    for start in range(0, len(joined), step):
        piece = joined[start : start + step]
        count = _LENGTH.pack(len(piece) // ID_SIZE)
        parts += (count, _CRC.pack(crc32c(piece, crc32c(count))), piece)
    if parts:
        os.write(fd, b"".join(parts))


def read_id_file(path: str, found: Found | None = None, repair: bool = False) -> list[bytes]:
    """The IDs of an ID file written by `write_id_block` (in the order written; raises
    FileNotFoundError): a file of an older trionsq (bare IDs, a torn last one left out)
    too. A bad block is skipped (logged, `found` told where) and the blocks after it read; a
    torn last block is left out. With `repair` (at load, before anything appends to it),
    the file is left in the current format: a torn tail cut off, an older file or one with
    a bad block or header rewritten (a temporary file, fsynced, renamed over it, the
    directory fsynced)."""
    with open(path, "rb") as f:
        blob = f.read()
    name = os.path.basename(path)
    kind = _file_format(
        blob[: len(ID_HEADER)],
        ID_HEADER,
        len(blob),
        lambda: _id_block_end(blob, len(ID_HEADER)) is not None,
    )
    if kind == "old" and _id_blocks(blob)[0]:
        kind = "damaged"  # its header, and its first block, damaged: not an old file
    if kind == "old":
        ids = split_ids(blob)
        if repair and blob:
            _rewrite_ids(path, ids)
            log.info("REPLICATION: %s converted to the checksummed format", name)
        return ids
    ids, bad, cut = _id_blocks(blob)
    for start, stop in bad:
        log.error(
            "REPLICATION: %d corrupt bytes at offset %d of %s skipped (the IDs in them are "
            "lost: duplicates after a failover, never a loss)",
            stop - start,
            start,
            name,
        )
        if found is not None:
            found(start, stop)
    if repair:
        if bad or kind == "damaged":
            if kind == "damaged":
                log.error("REPLICATION: the header of %s was damaged: rewritten", name)
            _rewrite_ids(path, ids)
        elif cut < len(blob):
            os.truncate(path, cut)
    return ids


def _rewrite_ids(path: str, ids: list[bytes]) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_id_block(fd, ids)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def _read_ids(path: str) -> set[bytes]:
    """The IDs of an ID file (`read_id_file`)."""
    return set(read_id_file(path))


def remember_dropped(path: str, ids: set[bytes]) -> None:
    """Append `ids` to the dropped file (`write_id_block`), fsynced; past 2 x DROPPED_MAX,
    keep the latest DROPPED_MAX (blocking; the data directory is fsynced by the compaction's
    end). A file without the current header (bare IDs of an earlier trionsq, or a damaged
    header) is rewritten in the current format first."""
    if not ids:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(len(ID_HEADER))
    except FileNotFoundError:
        head = b""
    if head and head != ID_HEADER:
        read_id_file(path, repair=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        write_id_block(fd, ids)
        os.fsync(fd)
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size > 2 * DROPPED_MAX * (ID_SIZE + 1):
        _rewrite_ids(path, read_id_file(path)[-DROPPED_MAX:])


def _decode_old_records(data: bytes) -> tuple[list[Record], int]:
    """The whole records at the head of `data` in the format before the versions
    (``[4-byte length][8-byte due time][framed message]``, no CRC), and where they end."""
    out: list[Record] = []
    pos, end = 0, len(data)
    while end - pos >= _HEAD.size:
        length, due = _HEAD.unpack_from(data, pos)
        if length < 8 + FRAMED_BODY_OFFSET or pos + 4 + length > end:
            break
        out.append((due, data[pos + 12 : pos + 4 + length]))
        pos += 4 + length
    return out, pos


def _log_tail_torn(fd: int, start: int, size: int) -> bool:
    """The bad bytes from `start` to the end of the log are a torn last write (a kill or a
    power cut): fewer than a record's head, a record whose length runs past the end and
    agrees with its frame's size, or zeros. Otherwise they are corrupt (a flipped length
    does not agree with its frame's size)."""
    if size - start < 16:
        return True
    length, frame_size = struct.unpack(">I8xI", _pread(fd, 16, start))
    if start + 4 + length > size and frame_size + 16 == length:
        return True
    pos = start
    while pos < size:
        data = _pread(fd, min(size - pos, SCAN_CHUNK), pos)
        if not data or data.strip(b"\x00"):
            return not data
        pos += len(data)
    return True


def _copy_range(fd: int, start: int, stop: int, out: Any) -> int:
    """Copy the bytes from `start` to `stop` of `fd` to the file object `out`; returns how
    many."""
    pos = start
    while pos < stop:
        data = _pread(fd, min(stop - pos, SCAN_CHUNK), pos)
        if not data:
            break
        out.write(data)
        pos += len(data)
    return pos - start


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
        #: Corrupt records found in the log (runs of bad bytes: moved aside at load, skipped
        #: by a scan), and corrupt blocks of its ID files.
        self.corrupt_records = 0
        #: A load or a scan found a corrupt record: messages this member acknowledged may be
        #: lost here (its peers have them).
        self.damaged = False
        #: Bytes of a torn last record the load cut off (a kill or power cut during a write;
        #: or a file truncated, which no checksum tells from that).
        self.torn_bytes = 0
        self._corrupt_seen: set[tuple[int, int]] = set()
        self._load()
        self._fd = self._open_append(self.path)

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        """Count the log's records (`_load_log`), and read the FIN files and the emptied
        file, keeping of them the IDs the log holds."""
        prefix = self.topic + ":"
        fins: dict[str, set[bytes]] = {}
        for name in os.listdir(self.data_path):
            if name.startswith(prefix) and name.endswith(FIN_SUFFIX):
                channel = name[len(prefix) : -len(FIN_SUFFIX)]
                fins[channel] = self._load_ids(os.path.join(self.data_path, name))
        try:
            emptied = self._load_ids(self._emptied_path())
        except FileNotFoundError:
            emptied = set()
        wanted = set(emptied).union(*fins.values())
        self.count, held = self._load_log(wanted)  # `held`: of `wanted`
        self.finished = {channel: done & held for channel, done in fins.items()}
        self.emptied = emptied & held
        self._recount_dead()

    def _load_ids(self, path: str) -> set[bytes]:
        """An ID file's IDs, the file left in the current format (`read_id_file`); its
        corrupt blocks are counted in `corrupt_records` (a lost FIN costs a duplicate, not
        a loss: the log is not `damaged`)."""
        return set(read_id_file(path, self._id_block_corrupt, repair=True))

    def _id_block_corrupt(self, start: int, stop: int) -> None:
        self.corrupt_records += 1

    def _load_log(self, wanted: set[bytes]) -> tuple[int, set[bytes]]:
        """Count the log's intact records and find which of `wanted` they hold, a chunk at a
        time (memory grows with the FIN files, not the log), and set `bytes`; the file is left
        in the current format: created with its header if there is none, converted if an
        older trionsq wrote it, its corrupt bytes moved aside, its torn tail cut off."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, LOG_HEADER)
            finally:
                os.close(fd)
            fsync_dir(self.data_path)  # as `_open_append` does for a file it creates
            self.bytes = LOG_START
            return 0, set()
        try:
            size = os.fstat(fd).st_size
            kind = _file_format(
                _pread(fd, LOG_START, 0),
                LOG_HEADER,
                size,
                lambda: _record_at(fd, LOG_START, size) is not None,
            )
            if kind == "old" and _resync(fd, LOG_START, size) < size:
                kind = "damaged"  # its header, and its first record, damaged: not an old file
            if kind == "old":
                return self._convert_log(fd, size, wanted)
            bad: list[tuple[int, int]] = []
            count = 0
            held: set[bytes] = set()
            pos = LOG_START
            while pos < size:
                data, pos = read_records(
                    fd, pos, size, SCAN_CHUNK, lambda start, stop: bad.append((start, stop))
                )
                ids = scan_ids(data)[0]
                count += len(ids)
                if wanted:
                    held.update(wanted.intersection(ids))
            cut = max(size, LOG_START)
            if bad and bad[-1][1] == size and _log_tail_torn(fd, bad[-1][0], size):
                cut = bad.pop()[0]
                self.torn_bytes = size - cut
                log.warning(
                    "REPLICATION(%s): cutting %d torn bytes off the log", self.topic, size - cut
                )
            if kind == "damaged":
                log.error("REPLICATION(%s): the log's header was damaged (rewritten)", self.topic)
            if bad:
                self.bytes = self._move_corrupt(fd, bad, cut)
            else:
                if kind == "damaged" or size < LOG_START:  # or a file just created
                    with open(self.path, "r+b") as f:
                        f.write(LOG_HEADER)
                        f.flush()
                        os.fsync(f.fileno())
                if cut < size:
                    os.truncate(self.path, cut)
                self.bytes = cut
            return count, held
        finally:
            os.close(fd)

    def _move_corrupt(self, fd: int, bad: list[tuple[int, int]], cut: int) -> int:
        """Rewrite the log (open as `fd`, up to `cut`) without the runs of bad bytes `bad`,
        which go to a ``.corrupt-<time>`` file beside it (both fsynced before the rewritten
        log replaces the old one, then the directory); returns the new log's size."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        corrupt_path = f"{self.path}{CORRUPT_SUFFIX}{stamp}"
        tmp = self.path + ".tmp"
        size = LOG_START
        with open(tmp, "wb") as out, open(corrupt_path, "ab") as aside:
            out.write(LOG_HEADER)
            pos = LOG_START
            for start, stop in [*bad, (cut, cut)]:
                size += _copy_range(fd, pos, start, out)
                _copy_range(fd, start, stop, aside)
                pos = stop
            for f in (out, aside):
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.data_path)
        for start, stop in bad:
            log.error(
                "REPLICATION(%s): %d corrupt bytes at offset %d of the log moved to %s",
                self.topic,
                stop - start,
                start,
                corrupt_path,
            )
        self.corrupt_records += len(bad)
        self.damaged = True
        return size

    def _convert_log(self, fd: int, size: int, wanted: set[bytes]) -> tuple[int, set[bytes]]:
        """Rewrite a log an older trionsq wrote (records without a CRC, no header) in the
        current format (a temporary file, fsynced, renamed over it, the directory fsynced: a
        crash before the rename leaves the old file, converted at the next load); its torn
        tail is cut off. Returns what `_load_log` does."""
        tmp = self.path + ".tmp"
        count = 0
        held: set[bytes] = set()
        pos = 0
        self.bytes = LOG_START
        with open(tmp, "wb") as out:
            out.write(LOG_HEADER)
            while pos < size:
                records, used = _decode_old_records(_pread(fd, min(size - pos, SCAN_CHUNK), pos))
                if not records:  # a record larger than the chunk, or torn
                    head = _pread(fd, 4, pos)
                    length = _LENGTH.unpack(head)[0] if len(head) == 4 else 0
                    if pos + 4 + length > size:
                        break
                    records, used = _decode_old_records(_pread(fd, 4 + length, pos))
                    if not records:
                        break
                blob = encode_records(records)
                out.write(blob)
                self.bytes += len(blob)
                ids = [framed_id(frame) for _, frame in records]
                count += len(ids)
                if wanted:
                    held.update(wanted.intersection(ids))
                pos += used
            out.flush()
            os.fsync(out.fileno())
        if pos < size:
            self.torn_bytes = size - pos
            log.warning(
                "REPLICATION(%s): cutting %d torn bytes off the log", self.topic, size - pos
            )
        os.replace(tmp, self.path)
        fsync_dir(self.data_path)
        log.info(
            "REPLICATION(%s): the log (%d records) converted to the checksummed format "
            "(version %d)",
            self.topic,
            count,
            LOG_VERSION,
        )
        return count, held

    def _corrupt_found(self, generation: int, start: int, stop: int) -> None:
        """A scan (a worker thread's) met corrupt bytes: counted and logged once per run."""
        key = (generation, start)
        if key in self._corrupt_seen:
            return
        self._corrupt_seen.add(key)
        self.corrupt_records += 1
        self.damaged = True
        log.error(
            "REPLICATION(%s): %d corrupt bytes at offset %d of the log skipped (moved aside "
            "when the log is next loaded)",
            self.topic,
            stop - start,
            start,
        )

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
        generation = self.generation
        return LogSnapshot(
            self.path,
            self.bytes,
            lambda start, stop: self._corrupt_found(generation, start, stop),
        )

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
                write_id_block(self._fin_fd(channel), ids)
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
            write_id_block(fd, new)
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

    def cancel_compaction(self) -> None:
        """The compaction under way (if any) is abandoned when its rewrite ends (its files
        are not put in place). A member that takes office does this before it rebuilds its
        channels from a snapshot of the log: a compaction finishing meanwhile would take the
        IDs it drops out of the finished sets, and the rebuild would deliver them again."""
        self._compaction = None
        self._fins_since = {}

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
                    write_id_block(f.fileno(), since[channel])
            fd = self._fin_fds.pop(channel, None)
            if fd is not None:
                os.close(fd)
            os.replace(tmp, self._fin_path(channel))
        compaction.discard()  # and the FIN files of channels deleted meanwhile
        if self.emptied:
            self.emptied &= held
            path = self._emptied_path()
            with open(path + ".tmp", "wb") as f:
                write_id_block(f.fileno(), self.emptied)
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
        self.copied = LOG_START
        self.count = 0
        self.bytes = LOG_START
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
        os.write(self.fd, LOG_HEADER)
        self._copy(self.source.size, self.gone)
        os.fsync(self.fd)
        held = self.held
        for channel, done in self._fins.items():
            tmp = self._fin_paths[channel] + ".tmp"
            with open(tmp, "wb") as f:
                write_id_block(f.fileno(), done & held)
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
        for data, _, after in self.source.spans(self.copied, end):
            blob, count = without_ids(data, gone, self.held)
            if blob:
                os.write(self.fd, blob)
            self.count += count
            self.bytes += len(blob)
            self.copied = after

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
