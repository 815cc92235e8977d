"""`DeferredLog`: the deferred messages (DPUB, REQ with a delay) a durable queue holds while
nsqd runs, kept in ``<name>.diskqueue.deferred.log`` so that a crash keeps them, due times
included. Go nsqd keeps deferred messages in memory only (a crash loses them, NSQ #1107) and
ignores this file.

Records, big-endian: ``[4-byte length][4-byte CRC-32 of the rest][1-byte kind][8-byte due,
Unix ns][16-byte message ID][message payload]`` (length counts what follows it):
- HOLD: the message, held until `due` (a later HOLD of the same ID replaces it);
- DROP: it is no longer held (it came due and went back to its queue, or moved on);
- MARK: the end of a compaction's snapshot.
Replaying the file from the start gives what is held. A record cut short or failing its CRC
ends the replay (a write torn by a crash): the file is cut there.

Drops: a message leaves the log after it has been written somewhere else (its queue, another
queue's log). With `delay_drops` (--sync-ack), its DROP is written only at the second sync
after it, when the write that replaced it has been fsynced: a power cut can then never keep the
DROP and lose the copy. Without it the DROP is written at once (a process kill loses neither).

Compaction keeps the file near the size of what is held: when it is over `COMPACT_MIN_BYTES`
and more than twice what is held, a snapshot (HOLD records, then MARK) is written to
``<log>.new`` in the event loop, appends go on in that file, and the next sync fsyncs it and
renames it over the log. A ``.new`` whose MARK is readable is the log from then on (recovery
finishes the rename); one without is an interrupted snapshot and is removed. The snapshot keeps
messages whose DROP is still delayed, so it never drops more than the log it replaces.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .fs import O_CREAT, O_WRONLY, FileSystem, write_all

log = logging.getLogger("trionsq.diskqueue")

HOLD, DROP, MARK = 1, 2, 3
_HEADER = struct.Struct(">IIBq16s")
_BODY_HEADER = struct.Struct(">Bq16s")
_FRAME_HEADER = struct.Struct(">Ii")
_FRAME_TYPE_MESSAGE = 2
#: length + CRC + kind + due + ID
HEADER_SIZE = _HEADER.size
_PAYLOAD_ID = slice(10, 26)
_MIN_PAYLOAD = 26
COMPACT_MIN_BYTES = 4 << 20
_NO_ID = bytes(16)

#: A held message: (due time in Unix ns, its frame).
Held = tuple[int, bytes]


def _record(kind: int, due: int, message_id: bytes, payload: bytes | memoryview = b"") -> bytes:
    body = _BODY_HEADER.pack(kind, due, message_id) + payload
    return struct.pack(">II", len(body) + 4, zlib.crc32(body)) + body


def _hold_record(message_id: bytes, due: int, frame: bytes) -> bytes:
    return _record(HOLD, due, message_id, memoryview(frame)[8:])


def _record_size(frame: bytes) -> int:
    return HEADER_SIZE + len(frame) - 8


@dataclass
class Replayed:
    """What a log file holds: the messages, the length of its readable records, whether a
    compaction MARK was read, and whether the file had more bytes than that."""

    held: dict[bytes, Held]
    valid: int
    marked: bool
    torn: bool


def replay(data: bytes) -> Replayed:
    """Read the records of a log file's contents (see the module docstring)."""
    held: dict[bytes, Held] = {}
    pos, size, marked = 0, len(data), False
    view = memoryview(data)
    while pos + 8 <= size:
        length, crc = struct.unpack_from(">II", data, pos)
        end = pos + 4 + length
        if length < HEADER_SIZE - 4 or end > size or zlib.crc32(view[pos + 8 : end]) != crc:
            break
        _, _, kind, due, message_id = _HEADER.unpack_from(data, pos)
        if kind == HOLD:
            payload = data[pos + HEADER_SIZE : end]
            if len(payload) < _MIN_PAYLOAD or payload[_PAYLOAD_ID] != message_id:
                break
            held[message_id] = (due, _FRAME_HEADER.pack(len(payload) + 4, 2) + payload)
        elif kind == DROP:
            held.pop(message_id, None)
        elif kind == MARK:
            marked = True
        else:
            break
        pos = end
    return Replayed(held, pos, marked, pos < size)


def recover(fs: FileSystem, path: str) -> tuple[dict[bytes, Held], int, str | None]:
    """Open-time recovery of the log at `path` (blocking): finish or discard an interrupted
    compaction, cut a torn tail. Returns what is held, the file's size after recovery, and
    what recovery had to do (None if nothing)."""
    note = None
    new_path = path + ".new"
    if fs.exists(new_path):
        replayed = replay(fs.read_file(new_path))
        if replayed.marked:
            fs.rename(new_path, path)
            fs.fsync_dir(os.path.dirname(path) or ".")
            note = "finished an interrupted compaction"
        else:
            fs.remove(new_path)
            note = "removed an interrupted compaction"
    try:
        data = fs.read_file(path)
    except FileNotFoundError:
        return {}, 0, note
    replayed = replay(data)
    if replayed.torn:
        fd = fs.open(path, O_WRONLY)
        try:
            fs.ftruncate(fd, replayed.valid)
            fs.fsync(fd)
        finally:
            fs.close(fd)
        cut = f"cut {len(data) - replayed.valid} unreadable bytes at {replayed.valid}"
        note = f"{note}; {cut}" if note else cut
    return replayed.held, replayed.valid, note


class DeferredLog:
    """See the module docstring. Runs in the event loop; `prepare_sync` hands the blocking
    part of a sync to the disk syncer's worker thread."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        held: dict[bytes, Held] | None = None,
        size: int = 0,
        *,
        delay_drops: bool = False,
        logger: logging.Logger | None = None,
    ) -> None:
        self._fs = fs
        self._logger = logger if logger is not None else log
        self.path = path
        #: Message ID -> (due, frame) of every message held.
        self.held: dict[bytes, Held] = held if held is not None else {}
        self._held_bytes = sum(_record_size(frame) for _, frame in self.held.values())
        self._size = size
        self._fd: int | None = None
        self._retired: list[int] = []
        self._delay_drops = delay_drops
        # Dropped, DROP not yet written: since the last sync, and since the one before.
        self._dropping: dict[bytes, Held] = {}
        self._drops_ready: dict[bytes, Held] = {}
        self._rename_pending = False
        self._remove_pending = False
        # (rename, remove) of the sync prepared last, cleared when it succeeds.
        self._prepared = (False, False)
        #: Appended to since the last `prepare_sync` (the syncer fsyncs it).
        self.dirty = False

    def __len__(self) -> int:
        return len(self.held)

    @property
    def size(self) -> int:
        return self._size

    # -- holding and dropping ------------------------------------------------------------

    def hold(self, entries: Iterable[tuple[bytes, int]]) -> None:
        """Append (frame, due) entries: each message is held until it is dropped. Raises
        OSError when the disk refuses (nothing of the failed write is kept)."""
        records = []
        fresh: list[tuple[bytes, Held]] = []
        for frame, due in entries:
            message_id = frame[18:34]
            records.append(_hold_record(message_id, due, frame))
            fresh.append((message_id, (due, frame)))
        self._append(b"".join(records))
        held = self.held
        for message_id, entry in fresh:
            old = held.get(message_id)
            if old is not None:
                self._held_bytes -= _record_size(old[1])
            held[message_id] = entry
            self._held_bytes += _record_size(entry[1])
            self._dropping.pop(message_id, None)

    def drop(self, message_ids: Iterable[bytes]) -> None:
        """The messages are no longer held (already written elsewhere)."""
        held = self.held
        gone: dict[bytes, Held] = {}
        for message_id in message_ids:
            entry = held.pop(message_id, None)
            if entry is not None:
                self._held_bytes -= _record_size(entry[1])
                gone[message_id] = entry
        if not gone:
            return
        if self._delay_drops:
            self._dropping.update(gone)
            return
        self._write_drops(gone)

    def _write_drops(self, gone: dict[bytes, Held]) -> None:
        try:
            self._append(b"".join(_record(DROP, 0, message_id) for message_id in gone))
        except OSError as err:
            # Held in the file still: a crash would defer them again (at least once).
            self._logger.error("DISKQUEUE failed to write to %s - %s", self.path, err)

    def clear(self) -> None:
        """Hold nothing (the queue was emptied, or its deferred messages were written to it at
        shutdown); the file is cut to nothing now."""
        self.held.clear()
        self._dropping.clear()
        self._drops_ready.clear()
        self._held_bytes = 0
        if self._size:
            try:
                fd = self._append_fd()
                self._fs.ftruncate(fd, 0)
                self._size = 0
                if self._rename_pending:
                    self._append(_record(MARK, 0, _NO_ID))
            except OSError as err:
                self._logger.error("DISKQUEUE failed to empty %s - %s", self.path, err)
            self.dirty = True

    def remove(self) -> None:
        """Hold nothing, and remove the file at the next sync, once every queue's data is
        durable (the queue is deleted, or its deferred messages were written to it at
        shutdown: until that copy is durable, this one stands). The log is done with."""
        self.held.clear()
        self._dropping.clear()
        self._drops_ready.clear()
        self._held_bytes = 0
        self._retire()
        self._size = 0  # a later hold starts the file anew
        self._remove_pending = True

    def _append(self, data: bytes) -> None:
        fd = self._append_fd()
        try:
            write_all(self._fs, fd, data, self._size)
        except OSError:
            try:
                self._fs.ftruncate(fd, self._size)
            except OSError:
                self._retire()
            raise
        self._size += len(data)
        self.dirty = True

    def _append_fd(self) -> int:
        if self._fd is None:
            fd = self._fs.open(self._target(), O_WRONLY | O_CREAT)
            try:
                self._fs.ftruncate(fd, self._size)
            except OSError:
                self._fs.close(fd)
                raise
            self._fd = fd
        return self._fd

    def _target(self) -> str:
        return self.path + ".new" if self._rename_pending else self.path

    def _retire(self) -> None:
        if self._fd is not None:
            self._retired.append(self._fd)
            self._fd = None

    # -- syncing -------------------------------------------------------------------------

    def prepare_sync(self, final: bool = False) -> tuple[Callable[[], None], Callable[[], None]]:
        """In the event loop: write the DROPs whose replacement writes are now durable,
        compact if it is time, and return the blocking parts of the sync: (fsync the
        file, then, once every queue's data is durable: finish a compaction or remove the
        file)."""
        if self._drops_ready:
            ready, self._drops_ready = self._drops_ready, {}
            self._write_drops(ready)
        self._drops_ready, self._dropping = self._dropping, {}
        if (
            not self._rename_pending
            and not self._remove_pending
            and self._size >= COMPACT_MIN_BYTES
            and self._size > 2 * (self._held_bytes + _pending_bytes(self._drops_ready))
        ):
            self._compact()
        self.dirty = False
        fd, retired = self._fd, self._retired
        self._retired = []
        if final:
            self._retire()
            retired, fd = self._retired, None
            self._retired = []
        fs = self._fs
        rename = self._rename_pending
        remove = self._remove_pending
        self._prepared = (rename, remove)
        path = self.path

        def fsync() -> None:
            for each in retired:
                fs.fsync(each)
            if fd is not None:
                fs.fsync(fd)

        def finish() -> None:
            for each in retired:
                try:
                    fs.close(each)
                except OSError:
                    pass
            directory = os.path.dirname(path) or "."
            if rename:
                fs.rename(path + ".new", path)
                fs.fsync_dir(directory)
            if remove:
                for name in (path, path + ".new"):
                    try:
                        fs.remove(name)
                    except FileNotFoundError:
                        pass

        return fsync, finish

    def sync_done(self, ok: bool) -> None:
        """The sync prepared last has run (`ok`: its blocking parts all succeeded)."""
        if ok:
            self._rename_pending &= not self._prepared[0]
            self._remove_pending &= not self._prepared[1]
        self._prepared = (False, False)

    def _compact(self) -> None:
        """Write the snapshot to ``<log>.new`` and append there from now on."""
        entries = [*self._drops_ready.items(), *self.held.items()]
        snapshot = b"".join(
            _hold_record(message_id, due, frame) for message_id, (due, frame) in entries
        ) + _record(MARK, 0, _NO_ID)
        old_size = self._size
        self._retire()
        self._rename_pending = True
        self._size = 0
        try:
            self._append(snapshot)
        except OSError as err:
            # The old log is whole: keep appending to it, and try again at a later sync (the
            # partial .new has no MARK: recovery removes it).
            self._logger.error("DISKQUEUE failed to compact %s - %s", self.path, err)
            self._retire()
            self._rename_pending = False
            self._size = old_size
            return
        self._logger.info(
            "DISKQUEUE compacted %s: %d messages held in %d bytes (was %d)",
            self.path,
            len(entries),
            len(snapshot),
            old_size,
        )


def _pending_bytes(entries: dict[bytes, Held]) -> int:
    return sum(_record_size(frame) for _, frame in entries.values())
