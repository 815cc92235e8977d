"""The disk queue (go-diskqueue, docs/protocol.md §7): what survives a crash, and what reading
does with a corrupt segment. This module owns the spec that trionsq's disk queue must satisfy.

Theory of operation. The queue is a sequence of segment files of at most `records_per_file`
records (positions count records, not bytes: every record has the same size). Each file has two
views: its records as the running process sees them (the page cache) and how many of them are
durable (fsynced). The metadata file (depth, read_file_num,read_pos, write_file_num,write_pos)
exists only in its durable form: it is replaced atomically. The in-memory positions are
go-diskqueue's fields; `read_ahead` is the record `read_one` has read but not yet handed over
(go's `dataRead` with `next_read_file_num`/`next_read_pos`).

- Put appends a record to the write file; a full file rolls over to the next one, and the roll
  syncs (fsyncs the old file, persists the metadata) first; with --sync-ack it only retires the
  old file unsynced and asks for a sync (the next round fsyncs it).
- ReadOne reads the record at the read position ahead; Read hands it to the consumer and
  `move_forward`s, deleting a file once it is fully read. A read error (a torn or corrupt record,
  a missing file) is `handle_read_error`: the file is renamed .bad, reading goes on at the next
  file, and if that was the write file, writes move to a new file too.
- Sync is two steps: Fsync (the write file's records, and those of any file retired since,
  become durable) then PersistMetaData. It is needed after `sync_every` puts and reads, after a
  roll, a deleted or .bad file; the `--sync-timeout` ticker (SyncTimeout) may ask for one at
  any time after some activity.
- Group commit (--sync-ack, `DiskSyncer.wait_durable`): while a put waits for its OK,
  PrepareGroupCommit starts a round (`prepare_sync(metadata=False)`), capturing every file
  with unsynced records and how far, and the puts made so far; the io loop goes on meanwhile.
  GroupCommit fsyncs what was captured (data only: the metadata keeps its own schedule) and
  acknowledges those puts, all of them with one round. Puts made after the capture wait for
  the next round. One round at a time: a metadata sync does not start while a round is under
  way, nor a round while a sync is (the syncer's lock); a sync also acknowledges every put
  waiting, as any round does.
- Crash (kill -9 or power loss) loses the memory state and any unsynced record: each may
  survive, be gone, or the first missing one may be torn (a partial record). Restart loads the
  metadata (`retrieve_meta_data`); if the write file is not write_pos long (longer: the
  metadata was not synced after its last writes; shorter or missing: it became .bad) or files
  after it exist (an earlier restart's move that was not persisted, or with --sync-ack files a
  rollover started that a data-only round made durable), writes go to a new file past every
  file on disk and the reader salvages the extra records (duplicates), of the write file from
  write_pos and of every later file; they are counted into depth.
- Corrupt turns a durable record into garbage (bit rot, a truncated copy).

Acknowledgement: with ``sync_every=1`` a Put is acknowledged (PUB's OK, with
``--mem-queue-size=0``) only when the sync that follows it has completed; with a larger
`sync_every` it is acknowledged when written, as go-diskqueue's Put returns. With --sync-ack
(the ``sync_ack`` configuration, ``--sync-every=2500`` that the bounds never reach) it is
acknowledged by the first group commit (or sync) that starts after it: the metadata may then
be behind the durable data at a power cut, several files behind, and restart's salvage is what
brings those acknowledged records back.

Consumption: the disk queue's consumer is whatever receives from its read channel (the topic
pump, or a channel's client pump). A message is consumed once it has been handed over (Read);
what the receiver does with it afterwards (in flight in memory, lost at kill -9: §2.7) is not
the queue's business. A message handed over whose read position was not synced is read again
after a crash: at-least-once.

What survives (the invariants):
- `synced_survives` (every configuration): a message made durable by a completed sync and not
  yet handed over is readable after any crash and restart.
- `acknowledged_survives` (``sync_every=1`` and ``sync_ack``): likewise every acknowledged
  message. With ``sync_every>1`` and no --sync-ack an acknowledged, unsynced message may be
  lost (a test shows it).
- The only allowed exception: messages at or after an unreadable record of a file renamed
  .bad (nothing after a bad length can be trusted, so the rest of that file is lost).
- The durable metadata never claims records that are not durable; read position ≤ write
  position; records are handed over in order, each at most once between crashes; depth is
  never negative, counts at least the readable records (exactly, if nothing went wrong) and is
  0 when the reader has caught up with the writer (go's `check_tail_corruption`).
- Liveness: every message that must survive (synced; and acknowledged, where acknowledged
  messages must survive) is eventually handed over, unless lost to a .bad file.

Where this departs from go-diskqueue (on purpose; the implementation must follow the spec):
- the acknowledgement waits for the sync (go's Put returns before its sync), or with
  --sync-ack for the group commit, which fsyncs every file written since the last round;
- `retrieve_meta_data` moves writes to a new file whenever the write file is not write_pos
  long or files after it exist, past every file on disk (go: only if longer, to
  write_file_num+1), and schedules a sync (trionsq's recovery schedules none: that is safe
  too, given the salvage of later files, as the checker shows with that sync left out);
- it adds the salvaged records to depth, those of later files too (go's depth goes negative,
  then is reset at the tail);
- a reader at the end of a finished file moves on without a .bad file (go-diskqueue #42).
Each of these is a mutant below, except #42, which loses nothing (a spurious .bad file). The
--sync-ack mutants are built on the ``sync_ack`` configuration, the others on ``sync_every_1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import product
from typing import NamedTuple

from .core import Action, Invariant, Liveness, Mutant, Spec, StepInvariant

TORN = -1
"""A record cut short by a crash."""
CORRUPT = -2
"""A record whose bytes went bad (e.g. its length is out of bounds)."""

FAULTS = {
    "metadata_before_fsync": "sync persists the metadata before it fsyncs the data",
    "ack_before_sync": "with sync_every=1, a Put is acknowledged before its sync",
    "read_ahead_persisted": "sync persists next_read_pos: the read-ahead record counts as read",
    "skip_to_write_on_read_error": "a read error jumps the reader to the write position",
    "depth_not_corrected": "handle_read_error does not check_tail_corruption",
    "restart_writes_into_stale_file": (
        "restart moves writes to write_file_num+1 only if the write file is longer than"
        " write_pos (as go): not if it is missing (.bad), nor past an earlier unpersisted skip"
    ),
    "salvage_not_counted": "restart does not count the salvaged records into depth (as go)",
    "sync_ack_ack_before_fsync": "with --sync-ack, a Put is acknowledged before the group fsync",
    "group_commit_write_file_only": (
        "the group commit fsyncs only the write file, not one a rollover retired since the"
        " last round"
    ),
    "group_commit_acks_later_puts": (
        "the group commit also acknowledges the puts that came after it captured its files"
        " (wait_durable waits for the round under way instead of the next one to start)"
    ),
    "salvage_write_file_only": (
        "restart salvages only the write file's extra records, not the later segments a"
        " data-only group commit made durable after a rollover the metadata does not know of"
    ),
}
SYNC_ACK_FAULTS = frozenset(
    {
        "sync_ack_ack_before_fsync",
        "group_commit_write_file_only",
        "group_commit_acks_later_puts",
        "salvage_write_file_only",
    }
)
"""The faults of --sync-ack's group commit: their mutants are built on `disk_queue.sync_ack`."""


class Segment(NamedTuple):
    """One data file: its records as the process sees them, and how many are durable."""

    file_num: int
    records: tuple[int, ...]
    synced: int


class Meta(NamedTuple):
    """The metadata file's contents."""

    depth: int = 0
    read_file_num: int = 0
    read_pos: int = 0
    write_file_num: int = 0
    write_pos: int = 0


class DiskQueue(NamedTuple):
    """The files on disk, the metadata file, the running process, and the history."""

    up: bool
    segments: tuple[Segment, ...]
    meta: Meta
    # The running process (zero while down).
    depth: int = 0
    read_file_num: int = 0
    read_pos: int = 0
    next_read_file_num: int = 0
    next_read_pos: int = 0
    write_file_num: int = 0
    write_pos: int = 0
    read_ahead: int = -1
    sync_count: int = 0  # go: count, puts and reads since the last sync
    need_sync: bool = False
    sync_step: int = 0  # 1: the first half of a sync is done
    # --sync-ack: the group commit under way (None: none), as `prepare_sync(metadata=False)`
    # captured it: (file_num, records) to fsync per file, and the puts it acknowledges.
    commit: tuple[tuple[int, int], ...] | None = None
    committing: frozenset[int] = frozenset()
    # History, for the properties.
    published: int = 0
    written: frozenset[int] = frozenset()  # put since the last completed sync
    unacked: frozenset[int] = frozenset()  # put, waiting for the sync that acknowledges them
    acked: frozenset[int] = frozenset()
    synced: frozenset[int] = frozenset()
    delivered: frozenset[int] = frozenset()  # handed over at least once, ever
    epoch: tuple[int, ...] = ()  # handed over since the last restart, in order
    lost: frozenset[int] = frozenset()  # allowed losses: corrupt records and the rest of the file
    crashes: int = 0
    corruptions: int = 0


class Config(NamedTuple):
    sync_every: int
    ack_after_sync: bool
    messages: int
    records_per_file: int
    crashes: int
    corruptions: int
    faults: frozenset[str]
    sync_ack: bool = False


Step = Callable[[DiskQueue, Config], Iterator[tuple[str, DiskQueue]]]


# -- files ----------------------------------------------------------------------------------


def records_of(s: DiskQueue, file_num: int) -> tuple[int, ...] | None:
    """A file's records, or None if it does not exist."""
    for seg in s.segments:
        if seg.file_num == file_num:
            return seg.records
    return None


def _without(segments: tuple[Segment, ...], file_num: int) -> tuple[Segment, ...]:
    return tuple(seg for seg in segments if seg.file_num != file_num)


def _replaced(segments: tuple[Segment, ...], new: Segment) -> tuple[Segment, ...]:
    return tuple(sorted((*_without(segments, new.file_num), new)))


def _fsync(s: DiskQueue, file_num: int) -> DiskQueue:
    segments = tuple(
        seg._replace(synced=len(seg.records)) if seg.file_num == file_num else seg
        for seg in s.segments
    )
    return s._replace(segments=segments)


def _fsync_all(s: DiskQueue) -> DiskQueue:
    """A sync's fsync: the write file and every file retired since the last sync (only
    --sync-ack retires a file unsynced; otherwise the write file is the only one to sync)."""
    segments = tuple(seg._replace(synced=len(seg.records)) for seg in s.segments)
    return s._replace(segments=segments)


def behind_corruption(records: tuple[int, ...]) -> frozenset[int]:
    """The messages a corrupt record makes unreadable: all after it in its file (the reader
    cannot find where the next record starts)."""
    if CORRUPT not in records:
        return frozenset()
    return frozenset(r for r in records[records.index(CORRUPT) :] if r >= 0)


def readable(s: DiskQueue) -> tuple[int, ...]:
    """The messages the reader will hand over from its read position, in order: each file up
    to its end (the write file up to write_pos), stopping in a file at an unreadable record."""
    out: list[int] = []
    for num in range(s.read_file_num, s.write_file_num + 1):
        records = records_of(s, num) or ()
        start = s.read_pos if num == s.read_file_num else 0
        end = s.write_pos if num == s.write_file_num else len(records)
        for record in records[start : min(end, len(records))]:
            if record < 0:
                break
            out.append(record)
    return tuple(out)


# -- sync -----------------------------------------------------------------------------------


def _metadata(s: DiskQueue, faults: frozenset[str]) -> Meta:
    if "read_ahead_persisted" in faults:
        read = (s.next_read_file_num, s.next_read_pos)
    else:
        read = (s.read_file_num, s.read_pos)
    return Meta(s.depth, *read, s.write_file_num, s.write_pos)


def persist_meta_data(s: DiskQueue, faults: frozenset[str]) -> DiskQueue:
    return s._replace(meta=_metadata(s, faults))


def sync_done(s: DiskQueue) -> DiskQueue:
    """The sync completed: what was written is durable, and acknowledged if it waited."""
    return s._replace(
        synced=s.synced | s.written,
        acked=s.acked | s.unacked,
        written=frozenset(),
        unacked=frozenset(),
    )


# -- the actions ----------------------------------------------------------------------------


def _idle(s: DiskQueue) -> bool:
    """The io loop can take a new operation: up, and no sync is due or under way."""
    return s.up and not s.need_sync and s.sync_step == 0


def _counted(s: DiskQueue, cfg: Config) -> DiskQueue:
    count = s.sync_count + 1
    return s._replace(sync_count=count, need_sync=s.need_sync or count >= cfg.sync_every)


def put(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    if not _idle(s) or s.published >= cfg.messages:
        return
    m = s.published
    label = f"Put(m{m})"
    if s.write_pos >= cfg.records_per_file:
        if cfg.sync_ack:
            # The old write file is retired unsynced: the next round fsyncs it.
            s = s._replace(write_file_num=s.write_file_num + 1, write_pos=0, need_sync=True)
        else:
            s = _fsync(s, s.write_file_num)
            s = s._replace(write_file_num=s.write_file_num + 1, write_pos=0)
            s = sync_done(persist_meta_data(s, cfg.faults))
        label += f" rolls to f{s.write_file_num}"
    records = records_of(s, s.write_file_num) or ()
    synced = next((g.synced for g in s.segments if g.file_num == s.write_file_num), 0)
    segments = _replaced(s.segments, Segment(s.write_file_num, (*records, m), synced))
    early = "ack_before_sync" if not cfg.sync_ack else "sync_ack_ack_before_fsync"
    ack_now = not cfg.ack_after_sync or early in cfg.faults
    s = s._replace(
        segments=segments,
        write_pos=s.write_pos + 1,
        depth=s.depth + 1,
        published=m + 1,
        written=s.written | {m},
        acked=s.acked | {m} if ack_now else s.acked,
        unacked=s.unacked if ack_now else s.unacked | {m},
    )
    yield label, _counted(s, cfg)


def _behind(s: DiskQueue) -> bool:
    return s.read_file_num < s.write_file_num or s.read_pos < s.write_pos


def read_one(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """Read the next record ahead of the hand-over, or handle what is there instead."""
    if not _idle(s) or s.read_ahead >= 0 or not _behind(s):
        return
    num, pos = s.read_file_num, s.read_pos
    records = records_of(s, num)
    if records is not None and pos >= len(records) and num < s.write_file_num:
        yield f"ReadOne(f{num} finished)", next_file(s)
        return
    if records is None or pos >= len(records) or records[pos] < 0:
        yield f"ReadOne(f{num}[{pos}] unreadable)", handle_read_error(s, cfg)
        return
    next_num, next_pos = num, pos + 1
    if num < s.write_file_num and next_pos >= len(records):
        next_num, next_pos = num + 1, 0
    m = records[pos]
    yield (
        f"ReadOne(m{m})",
        s._replace(read_ahead=m, next_read_file_num=next_num, next_read_pos=next_pos),
    )


def next_file(s: DiskQueue) -> DiskQueue:
    """The reader is at the end of a finished file (it had caught up with the writer, which
    then rolled): delete the file and go on with the next."""
    num = s.read_file_num + 1
    s = s._replace(
        segments=_without(s.segments, s.read_file_num),
        read_file_num=num,
        read_pos=0,
        next_read_file_num=num,
        next_read_pos=0,
        need_sync=True,
    )
    return check_tail_corruption(s)


def handle_read_error(s: DiskQueue, cfg: Config) -> DiskQueue:
    """Rename the read file to .bad and go on at the next file; if it was the write file,
    writes move to a new file too."""
    records = records_of(s, s.read_file_num) or ()
    lost = s.lost | behind_corruption(records[s.read_pos :])
    write_file_num, write_pos = s.write_file_num, s.write_pos
    if s.read_file_num == s.write_file_num:
        write_file_num, write_pos = write_file_num + 1, 0
    read_file_num, read_pos = s.read_file_num + 1, 0
    if "skip_to_write_on_read_error" in cfg.faults:
        read_file_num, read_pos = write_file_num, write_pos
    s = s._replace(
        segments=_without(s.segments, s.read_file_num),
        lost=lost,
        write_file_num=write_file_num,
        write_pos=write_pos,
        read_file_num=read_file_num,
        read_pos=read_pos,
        next_read_file_num=read_file_num,
        next_read_pos=read_pos,
        need_sync=True,
    )
    return s if "depth_not_corrected" in cfg.faults else check_tail_corruption(s)


def check_tail_corruption(s: DiskQueue) -> DiskQueue:
    """At the tail of the queue the depth must be 0: if it is not, records were lost (.bad,
    a deleted file whose metadata was not synced) and the depth is reset."""
    at_tail = (s.read_file_num, s.read_pos) == (s.write_file_num, s.write_pos)
    if at_tail and s.depth != 0:
        return s._replace(depth=0, need_sync=True)
    return s


def move_forward(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """Hand the read-ahead record to the consumer (Read)."""
    if not _idle(s) or s.read_ahead < 0:
        return
    m = s.read_ahead
    old = s.read_file_num
    s = s._replace(
        read_file_num=s.next_read_file_num,
        read_pos=s.next_read_pos,
        depth=s.depth - 1,
        read_ahead=-1,
        delivered=s.delivered | {m},
        epoch=(*s.epoch, m),
    )
    if old != s.read_file_num:
        s = s._replace(segments=_without(s.segments, old), need_sync=True)
    yield f"Read(m{m})", check_tail_corruption(_counted(s, cfg))


def sync_timeout(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    if _idle(s) and s.sync_count > 0:
        yield "SyncTimeout", s._replace(need_sync=True)


def _sync_half(s: DiskQueue, cfg: Config, fsync_first: bool) -> DiskQueue:
    if fsync_first:
        return _fsync_all(s)
    return persist_meta_data(s, cfg.faults)


def fsync_step(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """The first half of a sync: fsync the write file and any retired one (the metadata, in
    the mutant). One round at a time: not while a group commit is under way."""
    if s.up and s.need_sync and s.sync_step == 0 and s.commit is None:
        first = "metadata_before_fsync" not in cfg.faults
        name = "Fsync" if first else "PersistMetaData"
        yield name, _sync_half(s, cfg, first)._replace(sync_step=1)


def persist_step(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """The second half: persist the metadata (fsync, in the mutant); the sync is complete."""
    if s.up and s.sync_step == 1:
        second_is_fsync = "metadata_before_fsync" in cfg.faults
        name = "Fsync" if second_is_fsync else "PersistMetaData"
        s = _sync_half(s, cfg, second_is_fsync)
        yield name, sync_done(s._replace(sync_step=0, need_sync=False, sync_count=0))


def prepare_group_commit(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """--sync-ack: a publisher waits (`DiskSyncer.wait_durable`), so the syncer starts a round:
    `prepare_sync(metadata=False)` captures every file written since the last sync (the files
    a rollover retired and the write file) and how far; the puts made so far wait for it. The
    io loop goes on meanwhile: puts after this wait for the next round."""
    if not s.up or s.commit is not None or s.sync_step != 0 or not s.unacked:
        return
    only_write_file = "group_commit_write_file_only" in cfg.faults
    commit = tuple(
        (seg.file_num, len(seg.records))
        for seg in s.segments
        if seg.synced < len(seg.records)
        and (not only_write_file or seg.file_num == s.write_file_num)
    )
    files = " ".join(f"f{num}:{count}" for num, count in commit)
    yield (
        f"PrepareGroupCommit({files or '-'})",
        s._replace(commit=commit, committing=s.unacked),
    )


def group_commit(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """The round's fsyncs are done (data only: the metadata waits for its own schedule), and
    every put that waited for the round is acknowledged (PUB's OK)."""
    if not s.up or s.commit is None:
        return
    captured = dict(s.commit)
    segments = tuple(
        seg._replace(synced=max(seg.synced, min(captured[seg.file_num], len(seg.records))))
        if seg.file_num in captured
        else seg
        for seg in s.segments
    )
    done = s.committing
    if "group_commit_acks_later_puts" in cfg.faults:
        done = s.unacked
    yield (
        f"GroupCommit({' '.join(f'm{m}' for m in sorted(done))})",
        s._replace(
            segments=segments,
            commit=None,
            committing=frozenset(),
            synced=s.synced | done,
            written=s.written - done,
            acked=s.acked | done,
            unacked=s.unacked - done,
        ),
    )


def _survivors(seg: Segment) -> Iterator[tuple[str, Segment]]:
    """What a crash may leave of a file: its durable records and any prefix of the rest,
    possibly followed by one torn record."""
    for kept in range(seg.synced, len(seg.records) + 1):
        records = seg.records[:kept]
        yield f"f{seg.file_num}:{kept}", seg._replace(records=records, synced=kept)
        if kept < len(seg.records):
            torn = (*records, TORN)
            yield f"f{seg.file_num}:{kept}+torn", seg._replace(records=torn, synced=len(torn))


def crash(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    if not s.up or s.crashes >= cfg.crashes:
        return
    options = [list(_survivors(seg)) for seg in s.segments]
    for choice in product(*options):
        segments = tuple(seg for _, seg in choice if seg.records)
        changed = [
            name
            for (name, _), old in zip(choice, s.segments, strict=True)
            if old.synced < len(old.records)
        ]
        yield (
            f"Crash({' '.join(changed)})" if changed else "Crash",
            DiskQueue(
                up=False,
                segments=segments,
                meta=s.meta,
                published=s.published,
                acked=s.acked,
                synced=s.synced,
                delivered=s.delivered,
                lost=s.lost,
                crashes=s.crashes + 1,
                corruptions=s.corruptions,
            ),
        )


def retrieve_meta_data(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """Restart: load the metadata; a write file longer than write_pos (the metadata was not
    synced after its last writes) is left to the reader, and writes go to a new file."""
    if s.up:
        return
    meta = s.meta
    depth, write_file_num, write_pos = meta.depth, meta.write_file_num, meta.write_pos
    records = records_of(s, write_file_num) or ()
    label = "Restart"
    as_go = "restart_writes_into_stale_file" in cfg.faults
    # Files after the write file: an earlier restart's skip that was not persisted, or (with
    # --sync-ack) files a rollover started and a data-only group commit made durable.
    later = [g.file_num for g in s.segments if g.file_num > write_file_num and not as_go]
    stale = "salvage_write_file_only" in cfg.faults
    if (
        len(records) > write_pos
        or (len(records) != write_pos and not as_go)
        or (later and not stale)
    ):
        salvaged = _readable_count(records[write_pos:])
        if not stale:
            salvaged += sum(_readable_count(records_of(s, num) or ()) for num in later)
        if "salvage_not_counted" not in cfg.faults:
            depth += salvaged
        # Writes go past every file on disk.
        write_file_num, write_pos = max(later, default=write_file_num) + 1, 0
        label += f"(f{meta.write_file_num} is not write_pos long: writes go to f{write_file_num})"
    yield (
        label,
        s._replace(
            up=True,
            depth=depth,
            read_file_num=meta.read_file_num,
            read_pos=meta.read_pos,
            next_read_file_num=meta.read_file_num,
            next_read_pos=meta.read_pos,
            write_file_num=write_file_num,
            write_pos=write_pos,
            need_sync=write_file_num != meta.write_file_num,
        ),
    )


def _readable_count(records: tuple[int, ...]) -> int:
    """The records a reader gets from these, up to the first unreadable one."""
    count = 0
    for record in records:
        if record < 0:
            break
        count += 1
    return count


def corrupt(s: DiskQueue, cfg: Config) -> Iterator[tuple[str, DiskQueue]]:
    """A durable record goes bad."""
    if s.corruptions >= cfg.corruptions:
        return
    for seg in s.segments:
        for slot in range(seg.synced):
            if seg.records[slot] >= 0:
                records = (*seg.records[:slot], CORRUPT, *seg.records[slot + 1 :])
                yield (
                    f"Corrupt(f{seg.file_num}[{slot}])",
                    s._replace(
                        segments=_replaced(s.segments, seg._replace(records=records)),
                        corruptions=s.corruptions + 1,
                        lost=s.lost | {seg.records[slot]},
                    ),
                )


# -- the properties -------------------------------------------------------------------------


def _missing(s: DiskQueue, must_survive: frozenset[int]) -> bool | str:
    if not s.up:
        return True
    missing = must_survive - s.delivered - s.lost - set(readable(s))
    for seg in s.segments:
        missing -= behind_corruption(seg.records)
    if not missing:
        return True
    return f"{sorted(missing)} neither handed over nor readable (readable: {readable(s)})"


def synced_survives(s: DiskQueue) -> bool | str:
    return _missing(s, s.synced)


def acknowledged_survives(s: DiskQueue) -> bool | str:
    return _missing(s, s.acked)


def metadata_within_durable_data(s: DiskQueue) -> bool | str:
    for seg in s.segments:
        if seg.file_num == s.meta.write_file_num and s.meta.write_pos > seg.synced:
            return f"metadata write_pos {s.meta.write_pos} > {seg.synced} durable records"
    return True


def write_file_ends_at_write_pos(s: DiskQueue) -> bool | str:
    """Put appends at write_pos: the write file must end there (go seeks to write_pos, so a
    write into a missing or shorter file leaves a hole that reads as a bad record)."""
    size = len(records_of(s, s.write_file_num) or ())
    return not s.up or size == s.write_pos or f"write file is {size} long, write_pos {s.write_pos}"


def read_not_past_write(s: DiskQueue) -> bool | str:
    write = (s.write_file_num, s.write_pos)
    if (s.read_file_num, s.read_pos) > write or (s.next_read_file_num, s.next_read_pos) > write:
        return "the read position passed the write position"
    return True


def depth_never_negative(s: DiskQueue) -> bool | str:
    return (s.depth >= 0 and s.meta.depth >= 0) or f"depth {s.depth}, metadata {s.meta.depth}"


def depth_zero_at_tail(s: DiskQueue) -> bool | str:
    at_tail = (s.read_file_num, s.read_pos) == (s.write_file_num, s.write_pos)
    return not (s.up and at_tail) or s.depth == 0 or f"depth {s.depth} at the tail"


def depth_counts_readable(s: DiskQueue) -> bool | str:
    """Depth ≥ the readable records; equal until a crash or a corruption."""
    if not s.up:
        return True
    count = len(readable(s))
    exact = s.crashes == 0 and s.corruptions == 0
    if s.depth < count or (exact and s.depth != count):
        return f"depth {s.depth} with {count} readable records"
    return True


def in_order_at_most_once(before: DiskQueue, label: str, after: DiskQueue) -> bool | str:
    if len(after.epoch) <= len(before.epoch):
        return True
    m = after.epoch[-1]
    return all(x < m for x in before.epoch) or f"m{m} after {before.epoch} since the restart"


def _must_deliver(cfg: Config) -> Liveness:
    """Every message that must survive is eventually handed over (or lost to a .bad file)."""

    def pending(s: DiskQueue) -> frozenset[int]:
        guaranteed = s.synced | s.acked if cfg.ack_after_sync else s.synced
        doomed = frozenset().union(*(behind_corruption(g.records) for g in s.segments))
        return guaranteed - s.delivered - s.lost - doomed

    return Liveness("every_surviving_message_is_handed_over", pending)


# -- building -------------------------------------------------------------------------------


def show(s: DiskQueue) -> str:
    files = " ".join(
        f"f{g.file_num}{[_show_record(r) for r in g.records]}(synced {g.synced})"
        for g in s.segments
    )
    lines = [f"files: {files or '-'}", f"metadata: {tuple(s.meta)}"]
    if s.up:
        ahead = f" read_ahead=m{s.read_ahead}" if s.read_ahead >= 0 else ""
        lines.append(
            f"memory: depth={s.depth} read={s.read_file_num},{s.read_pos} "
            f"next_read={s.next_read_file_num},{s.next_read_pos} "
            f"write={s.write_file_num},{s.write_pos} sync_count={s.sync_count} "
            f"need_sync={s.need_sync}{ahead}"
        )
        if s.commit is not None:
            files = " ".join(f"f{num}:{count}" for num, count in s.commit) or "-"
            waiting = " ".join(f"m{m}" for m in sorted(s.committing))
            lines.append(f"group commit under way: fsync {files}, then acknowledge {waiting}")
    else:
        lines.append("down")
    unacked = f" waiting={sorted(s.unacked)}" if s.unacked else ""
    lines.append(
        f"acked={sorted(s.acked)}{unacked} synced={sorted(s.synced)} "
        f"delivered={sorted(s.delivered)} lost={sorted(s.lost)}"
    )
    return "\n".join(lines)


def _show_record(record: int) -> str:
    return {TORN: "torn", CORRUPT: "corrupt"}.get(record, f"m{record}")


def build(
    sync_every: int,
    faults: frozenset[str] = frozenset(),
    messages: int = 3,
    records_per_file: int = 2,
    crashes: int = 2,
    corruptions: int = 1,
    sync_ack: bool = False,
) -> Spec:
    cfg = Config(
        sync_every=sync_every,
        ack_after_sync=sync_every == 1 or sync_ack,
        messages=messages,
        records_per_file=records_per_file,
        crashes=crashes,
        corruptions=corruptions,
        faults=faults,
        sync_ack=sync_ack,
    )

    def action(name: str, step: Step, fair: bool = False) -> Action:
        return Action(name, lambda s: step(s, cfg), fair)

    invariants = [
        Invariant("synced_survives", synced_survives),
        Invariant("metadata_within_durable_data", metadata_within_durable_data),
        Invariant("write_file_ends_at_write_pos", write_file_ends_at_write_pos),
        Invariant("read_not_past_write", read_not_past_write),
        Invariant("depth_never_negative", depth_never_negative),
        Invariant("depth_zero_at_tail", depth_zero_at_tail),
        Invariant("depth_counts_readable", depth_counts_readable),
    ]
    if cfg.ack_after_sync:
        invariants.insert(0, Invariant("acknowledged_survives", acknowledged_survives))
    actions = [
        action("Put", put),
        action("ReadOne", read_one, fair=True),
        action("Read", move_forward, fair=True),
        action("SyncTimeout", sync_timeout),
        action("Fsync", fsync_step, fair=True),
        action("PersistMetaData", persist_step, fair=True),
        action("Crash", crash),
        action("Restart", retrieve_meta_data, fair=True),
        action("Corrupt", corrupt),
    ]
    if sync_ack:
        name = "disk_queue.sync_ack"
        description = (
            f"go-diskqueue with --sync-ack (--sync-every={sync_every}): a put is acknowledged"
            " by the next group commit (data-only fsync); acknowledged messages survive a"
            " power cut, salvaged at restart when the metadata is behind"
        )
        actions[4:4] = [
            action("PrepareGroupCommit", prepare_group_commit, fair=True),
            action("GroupCommit", group_commit, fair=True),
        ]
    else:
        name = f"disk_queue.sync_every_{sync_every}"
        description = (
            f"go-diskqueue with --sync-every={sync_every}: "
            + ("acknowledged" if cfg.ack_after_sync else "synced")
            + " messages survive a crash; a corrupt file becomes .bad and reading goes on"
        )
    bounds: dict[str, object] = {
        "messages": messages,
        "records_per_file": records_per_file,
        "crashes": crashes,
        "corruptions": corruptions,
        "sync_every": sync_every,
    }
    if sync_ack:
        bounds["sync_ack"] = True
    return Spec(
        name=name,
        description=description,
        init=lambda: [DiskQueue(up=True, segments=(), meta=Meta())],
        actions=tuple(actions),
        invariants=tuple(invariants),
        step_invariants=(StepInvariant("in_order_at_most_once", in_order_at_most_once),),
        liveness=(_must_deliver(cfg),),
        bounds=bounds,
        show=show,
    )


SYNC_ACK_SYNC_EVERY = 2500
"""--sync-every in the sync_ack configuration (NSQ's default): never reached within the bounds,
so the metadata is persisted only by the syncs a roll, a finished or .bad file, a restart or
the --sync-timeout ticker asks for."""


def build_sync_ack(faults: frozenset[str] = frozenset()) -> Spec:
    """The --sync-ack configuration."""
    return build(SYNC_ACK_SYNC_EVERY, faults, sync_ack=True)


def specs() -> list[Spec]:
    return [build(sync_every=1, messages=4), build(sync_every=2), build_sync_ack()]


def mutants() -> list[Mutant]:
    return [
        Mutant(
            f"disk_queue.{fault}",
            description,
            build_sync_ack(frozenset({fault}))
            if fault in SYNC_ACK_FAULTS
            else build(1, frozenset({fault})),
        )
        for fault, description in FAULTS.items()
    ]
