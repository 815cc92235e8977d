"""The disk queue's block reads (`DiskQueue._take_block`, `_same_size`): records of one size are
handed out a block at a time, and the result must be what reading them one by one gives:
the same frames in the same order, a corrupt record found where it is, a second copy of an
owed or held message skipped, and the committed position and persisted depth of a tracking
queue exactly where they would be."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from trionsq.diskqueue import DiskQueue, frames_from_records
from trionsq.diskqueue import queue as dqqueue
from trionsq.protocol.message import encode_message_frame, framed_id

MIN = 26
MAX = 26 + 1024
NAME = "t"


def _frame(n: int, body_size: int = 10, message_id: int | None = None) -> bytes:
    body = (b"%d-" % n * body_size)[:body_size]
    mid = b"%016x" % (n if message_id is None else message_id)
    return encode_message_frame(mid, 1_700_000_000_000_000_000 + n, 1, body)


def _queue(path: Path, **kwargs: object) -> DiskQueue:
    options: dict[str, object] = {
        "max_bytes_per_file": 1 << 20,
        "min_msg_size": MIN,
        "max_msg_size": MAX,
        "sync_every": 1 << 30,
    }
    options.update(kwargs)
    return DiskQueue(NAME, str(path), **options)  # type: ignore[arg-type]


def _meta(path: Path) -> str:
    return (path / f"{NAME}.diskqueue.meta.dat").read_text()


def _take_all(q: DiskQueue, batch: int) -> list[bytes]:
    out: list[bytes] = []
    while taken := q.take(batch):
        out.extend(taken)
        assert len(out) <= 10_000
    return out


def _sizes(pattern: str, count: int) -> list[int]:
    rng = random.Random(pattern)
    if pattern == "uniform":
        return [40] * count
    if pattern == "alternating":
        return [40 + n % 2 for n in range(count)]
    if pattern == "runs":  # runs of one size, of every length around the block minimum
        sizes: list[int] = []
        while len(sizes) < count:
            sizes += [rng.choice([10, 40, 300])] * rng.randint(1, 3 * dqqueue._BLOCK_MIN)
        return sizes[:count]
    return [rng.randint(0, 200) for _ in range(count)]


@pytest.mark.parametrize("pattern", ["uniform", "alternating", "runs", "random"])
@pytest.mark.parametrize("chunk", [64, 1000, 1 << 20])
@pytest.mark.parametrize("batch", [1, 7, 600, 5000])
@pytest.mark.parametrize("track", [False, True])
def test_every_size_pattern_reads_back_as_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pattern: str,
    chunk: int,
    batch: int,
    track: bool,
) -> None:
    monkeypatch.setattr(dqqueue, "READ_CHUNK", chunk)
    frames = [_frame(n, size) for n, size in enumerate(_sizes(pattern, 1500))]
    q = _queue(tmp_path, max_bytes_per_file=50_000, track_consumption=track)
    q.put_many(frames[:1000])
    first = q.take(batch)
    q.put_many(frames[1000:])
    assert first + _take_all(q, batch) == frames
    assert q.depth == 0
    assert q.owed_count == (len(frames) if track else 0)
    q.close()


@pytest.mark.parametrize("pattern", ["uniform", "runs", "random"])
def test_records_moved_undecoded_read_back_as_written(tmp_path: Path, pattern: str) -> None:
    frames = [_frame(n, size) for n, size in enumerate(_sizes(pattern, 3000))]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    source = _queue(tmp_path / "a", max_bytes_per_file=70_000)
    target = _queue(tmp_path / "b", max_bytes_per_file=50_000, track_consumption=True)
    source.put_many(frames)
    moved = 0
    while True:
        pieces, count = source.take_records(777)
        if not count:
            break
        assert len(frames_from_records(pieces)) == count
        target.put_records(pieces, count)
        moved += count
    assert moved == len(frames)
    assert _take_all(target, 1000) == frames


@pytest.mark.parametrize("bad", [0, 9, 50, 99])
@pytest.mark.parametrize("how", ["too long", "zero", "one more", "256 more"])
@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("checked", [False, True])
def test_a_corrupt_length_inside_a_run_is_found_where_it_is(
    tmp_path: Path, bad: int, how: str, raw: bool, checked: bool
) -> None:
    """Without a side file (a segment as Go writes it), records from the bad one on are lost
    with their segment (.bad), as when read one by one; none before it. With one, the bad
    record alone is moved aside and every other is read."""
    frames = [_frame(n, 40) for n in range(100)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.close()
    if not checked:
        (tmp_path / f"{NAME}.diskqueue.000000.crc").unlink()
    size = 4 + 26 + 40
    segment = tmp_path / f"{NAME}.diskqueue.000000.dat"
    data = bytearray(segment.read_bytes())
    length = {"too long": MAX + 1, "zero": 0, "one more": 26 + 41, "256 more": 26 + 40 + 256}[how]
    struct.pack_into(">I", data, bad * size, length)
    segment.write_bytes(bytes(data))
    q = _queue(tmp_path)
    if raw:
        pieces, count = q.take_records(1000)
        got = frames_from_records(pieces)
        assert count == len(got)
    else:
        got = _take_all(q, 1000)
    if checked:
        assert got == frames[:bad] + frames[bad + 1 :]
        assert q.corrupt_records == 1
        moved = (tmp_path / f"{NAME}.diskqueue.bad").read_bytes()
        assert moved == struct.pack(">I", size - 4) + data[bad * size + 4 : (bad + 1) * size]
        assert not (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
    elif how.endswith("more") and bad < 99:
        # A length that is in bounds but wrong: the records from there on are misread until
        # one is out of bounds (or the file ends); what came before is intact.
        assert got[:bad] == frames[:bad]
        assert got[bad] != frames[bad]
    else:
        assert got == frames[:bad]
        assert (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
    q.close()


def test_a_second_copy_inside_a_block_is_skipped(tmp_path: Path) -> None:
    """A crash made the writer repeat a message (the same ID twice in a run of one size): it
    is handed out once; the copy keeps its place in the persisted depth."""
    frames = [_frame(n, 40) for n in range(30)]
    frames[20] = _frame(20, 40, message_id=12)
    q = _queue(tmp_path, track_consumption=True)
    q.put_many(frames)
    got = q.take(100)
    assert got == frames[:20] + frames[21:]
    assert q.owed_count == 29
    for frame in got:
        if framed_id(frame) != framed_id(frames[12]):
            q.release(framed_id(frame))
    q.sync_now()
    size = 4 + 26 + 40
    # message 12 still owed: committed there, and the 18 records from it on come back
    assert _meta(tmp_path) == f"18\n0,{12 * size}\n0,{30 * size}\n"
    q.release(framed_id(frames[12]))
    q.sync_now()
    assert _meta(tmp_path) == f"0\n0,{30 * size}\n0,{30 * size}\n"
    q.close()


def test_a_message_owed_before_a_block_is_skipped_in_it(tmp_path: Path) -> None:
    frames = [_frame(n, 40) for n in range(40)]
    q = _queue(tmp_path, track_consumption=True)
    again = _frame(5, 40)  # a copy of 5 after it (a crash made the writer repeat it)
    q.put_many([*frames[:30], again, *frames[30:]])
    assert q.take(20) == frames[:20]  # 5 is owed when its copy is read
    assert q.take(100) == frames[20:]
    assert q.owed_count == 40
    q.close()


def test_a_held_message_inside_a_block_is_skipped(tmp_path: Path) -> None:
    frames = [_frame(n, 40) for n in range(30)]
    for track in (False, True):
        path = tmp_path / str(track)
        path.mkdir()
        q = _queue(path, track_consumption=track)
        q.hold_deferred([(frames[17], 1)])
        q.put_many(frames)
        assert q.take(100) == frames[:17] + frames[18:]
        q.close()


@pytest.mark.parametrize("seed", range(12))
def test_committed_position_after_block_reads_across_segments(tmp_path: Path, seed: int) -> None:
    """Whatever was released, the persisted read position is the oldest unreleased record's
    and the depth counts every record from there: as a one-by-one reader records them."""
    rng = random.Random(seed)
    sizes = _sizes("runs", 200) if seed % 2 else [40] * 200
    frames = [_frame(n, size) for n, size in enumerate(sizes)]
    records = [4 + len(frame) - 8 for frame in frames]
    limit = 3000
    q = _queue(tmp_path, max_bytes_per_file=limit, track_consumption=True)
    q.put_many(frames)
    # where each record is: go's rule, a record that does not fit starts the next file
    where: list[tuple[int, int]] = []
    file, pos = 0, 0
    for size in records:
        if pos > 0 and pos + size > limit:
            file, pos = file + 1, 0
        where.append((file, pos))
        pos += size
    end = (file, pos)
    taken = 0
    while taken < len(frames):
        got = q.take(rng.choice([1, 9, 50, 300]))
        assert got == frames[taken : taken + len(got)]
        taken += len(got)
        owed = [n for n in range(taken) if q.owed.get(framed_id(frames[n])) is not None]
        for n in rng.sample(owed, k=rng.randint(0, len(owed))):
            q.release(framed_id(frames[n]))
        q.sync_now()
        unreleased = [n for n in range(taken) if framed_id(frames[n]) in q.owed]
        oldest = unreleased[0] if unreleased else taken
        file, pos = where[oldest] if oldest < len(frames) else end
        assert _meta(tmp_path) == f"{len(frames) - oldest}\n{file},{pos}\n{end[0]},{end[1]}\n"
    q.close()
