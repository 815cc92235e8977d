"""`DiskQueue` without a syncer: rolling segments by Go's rule, size limits, depth, empty and
delete, recovery from corrupt, truncated, stale or missing files, consumption tracking (what a
crash redelivers), the deferred side file and write failures."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from trionsq.diskqueue import DiskQueue, DiskQueueError, frames_from_records
from trionsq.diskqueue import queue as dqqueue
from trionsq.diskqueue.fs import LocalFileSystem
from trionsq.protocol.message import encode_message_frame, framed_id

MIN = 26
MAX = 26 + 1024
NAME = "t"


def _id(n: int) -> bytes:
    return b"%016x" % n


def _frame(n: int, body_size: int = 10) -> bytes:
    body = (b"%d-" % n * body_size)[:body_size]
    return encode_message_frame(_id(n), 1_700_000_000_000_000_000 + n, 1, body)


def _rec_size(frame: bytes) -> int:
    """Bytes a frame takes on disk: 4-byte length + payload (the frame minus 8 bytes)."""
    return 4 + len(frame) - 8


def _record(frame: bytes) -> bytes:
    return struct.pack(">I", len(frame) - 8) + frame[8:]


def _queue(path: Path, **kwargs: object) -> DiskQueue:
    options: dict[str, object] = {
        "max_bytes_per_file": 1 << 20,
        "min_msg_size": MIN,
        "max_msg_size": MAX,
        "sync_every": 1 << 30,
    }
    options.update(kwargs)
    return DiskQueue(NAME, str(path), **options)  # type: ignore[arg-type]


def _seg(path: Path, num: int) -> Path:
    return path / f"{NAME}.diskqueue.{num:06d}.dat"


def _meta(path: Path) -> Path:
    return path / f"{NAME}.diskqueue.meta.dat"


def _deferred(path: Path) -> Path:
    return path / f"{NAME}.diskqueue.deferred.dat"


def _segments(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if ".dat" in n and not n.endswith("meta.dat"))


def _without_side_files(path: Path) -> None:
    """Remove the checksum side files: the segments read as Go's (or an older trionsq's)."""
    for side in path.glob("*.crc"):
        side.unlink()


def _take_all(q: DiskQueue, batch: int = 1000, limit: int = 5000) -> list[bytes]:
    """Take until the queue is dry (a queue that never runs dry fails, not hangs)."""
    out: list[bytes] = []
    while taken := q.take(batch):
        out.extend(taken)
        assert len(out) <= limit, f"more than {limit} messages taken"
    return out


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Fail (rather than hang) if a reader bug makes `take` loop forever."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _crash_copy(src: Path, dst: Path) -> Path:
    """What survives a killed process: the files as they are now (page cache included)."""
    shutil.copytree(src, dst)
    return dst


# --- rolling -----------------------------------------------------------------------------


def test_roll_like_go_test(tmp_path: Path) -> None:
    """go-diskqueue's TestDiskQueueRoll: 10 records fit a file of 10*(len+4); the 11th rolls."""
    frames = [_frame(n) for n in range(11)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=10 * size)
    for i, frame in enumerate(frames):
        q.put(frame)
        assert q.depth == i + 1
    assert _seg(tmp_path, 0).read_bytes() == b"".join(map(_record, frames[:10]))
    assert _seg(tmp_path, 1).read_bytes() == _record(frames[10])
    q.sync_now()
    assert _meta(tmp_path).read_text() == f"11\n0,0\n1,{size}\n"
    for i in range(11):
        assert q.take(1) == [frames[i]]
        assert q.depth == 10 - i
    q.close()


def test_roll_boundary_is_strictly_greater(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(3)]
    size = _rec_size(frames[0])
    # writePos + 4 + len == max: still fits; one byte less and it rolls
    (tmp_path / "a").mkdir()
    q = _queue(tmp_path / "a", max_bytes_per_file=2 * size)
    q.put_many(frames)
    assert _seg(tmp_path / "a", 0).read_bytes() == _record(frames[0]) + _record(frames[1])
    assert _seg(tmp_path / "a", 1).read_bytes() == _record(frames[2])
    q.close()
    (tmp_path / "b").mkdir()
    q = _queue(tmp_path / "b", max_bytes_per_file=2 * size - 1)
    q.put_many(frames)
    for n in range(3):
        assert _seg(tmp_path / "b", n).read_bytes() == _record(frames[n])
    q.close()


def test_record_bigger_than_max_goes_alone_in_a_file(tmp_path: Path) -> None:
    small = [_frame(n) for n in (0, 2, 3)]
    big = [_frame(1, 500), _frame(4, 600)]
    q = _queue(tmp_path, max_bytes_per_file=100)
    # a big record at position 0 does not roll (writePos == 0): it goes alone into file 0
    q.put(big[0])
    q.put(small[0])  # rolls: file 1
    q.put(big[1])  # rolls: file 2, alone
    q.put_many(small[1:])  # rolls: file 3, both fit
    assert _seg(tmp_path, 0).read_bytes() == _record(big[0])
    assert _seg(tmp_path, 1).read_bytes() == _record(small[0])
    assert _seg(tmp_path, 2).read_bytes() == _record(big[1])
    assert _seg(tmp_path, 3).read_bytes() == _record(small[1]) + _record(small[2])
    assert q.depth == 5
    assert _take_all(q, 2) == [big[0], small[0], big[1], *small[1:]]
    q.close()


def test_put_many_lays_out_files_like_single_puts(tmp_path: Path) -> None:
    frames = [_frame(n, 5 + n * 3) for n in range(40)]
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    singles = _queue(tmp_path / "one", max_bytes_per_file=250)
    for frame in frames:
        singles.put(frame)
    batched = _queue(tmp_path / "many", max_bytes_per_file=250)
    batched.put_many(frames[:3])
    batched.put_many(frames[3:])
    singles.close()
    batched.close()
    one = {n: (tmp_path / "one" / n).read_bytes() for n in os.listdir(tmp_path / "one")}
    many = {n: (tmp_path / "many" / n).read_bytes() for n in os.listdir(tmp_path / "many")}
    assert one == many
    assert len(one) > 10


def test_reads_across_files_and_finished_files_deleted_after_sync(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(25)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=8 * size)  # 8 records per file: files 0..3
    q.put_many(frames)
    assert _segments(tmp_path) == [f"{NAME}.diskqueue.{n:06d}.dat" for n in range(4)]
    assert q.take(9) == frames[:9]  # all of file 0 and the first of file 1
    # deleting a finished file waits for the sync that persists the position past it
    assert _seg(tmp_path, 0).exists()
    q.sync_now()
    assert not _seg(tmp_path, 0).exists()
    assert _meta(tmp_path).read_text() == f"16\n1,{size}\n3,{size}\n"
    assert q.take(100) == frames[9:]
    q.sync_now()
    assert _segments(tmp_path) == [f"{NAME}.diskqueue.000003.dat"]
    assert _meta(tmp_path).read_text() == f"0\n3,{size}\n3,{size}\n"
    q.close()


def test_reader_follows_writer_in_the_same_file_then_across_a_roll(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(6)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=3 * size)
    q.put(frames[0])
    assert q.take(10) == frames[:1]
    assert q.take(10) == []
    q.put_many(frames[1:3])  # fills file 0
    assert q.take(1) == frames[1:2]
    q.put_many(frames[3:])  # rolls while the reader is inside file 0
    assert q.take(10) == frames[2:]
    assert q.depth == 0
    q.close()


# --- size limits -------------------------------------------------------------------------


@pytest.mark.parametrize("body_size", [-1, 1025, 5000])
def test_put_outside_size_limits_raises_and_writes_nothing(tmp_path: Path, body_size: int) -> None:
    q = _queue(tmp_path)
    # body_size -1: a 25-byte payload, below the 26-byte minimum
    bad = _frame(0, 0)[:-1] if body_size < 0 else _frame(0, body_size)
    with pytest.raises(DiskQueueError, match="invalid message write size"):
        q.put(bad)
    with pytest.raises(DiskQueueError):
        q.put_many([_frame(1), bad, _frame(2)])
    assert q.depth == 0
    assert os.listdir(tmp_path) == []
    assert q.take(10) == []
    q.close()


def test_put_at_exact_size_limits_is_accepted(tmp_path: Path) -> None:
    smallest = encode_message_frame(_id(1), 1, 1, b"")
    largest = encode_message_frame(_id(2), 2, 1, b"z" * 1024)
    q = _queue(tmp_path)
    q.put_many([smallest, largest])
    assert _seg(tmp_path, 0).read_bytes() == _record(smallest) + _record(largest)
    assert q.take(2) == [smallest, largest]
    q.close()


def test_put_after_close_raises(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.close()
    with pytest.raises(DiskQueueError, match="exiting"):
        q.put(_frame(0))
    assert os.listdir(tmp_path) == [f"{NAME}.diskqueue.meta.dat"]


# --- depth -------------------------------------------------------------------------------


def test_depth_across_put_take_and_reopen(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(10)]
    q = _queue(tmp_path, max_bytes_per_file=4 * _rec_size(frames[0]))
    assert q.depth == 0
    q.put_many(frames[:6])
    assert q.depth == 6
    assert q.take(4) == frames[:4]
    assert q.depth == 2
    q.put_many(frames[6:])
    assert q.depth == 6
    q.close()
    q = _queue(tmp_path, max_bytes_per_file=4 * _rec_size(frames[0]))
    assert q.depth == 6
    assert q.take(3) == frames[4:7]
    assert q.depth == 3
    q.close()
    q = _queue(tmp_path, max_bytes_per_file=4 * _rec_size(frames[0]))
    assert q.depth == 3
    assert _take_all(q) == frames[7:]
    assert q.depth == 0
    q.close()


def test_depth_too_high_at_tail_is_reset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    frames = [_frame(n) for n in range(2)]
    _seg(tmp_path, 0).write_bytes(_record(frames[0]) + _record(frames[1]))
    end = 2 * _rec_size(frames[0])
    _meta(tmp_path).write_text(f"10\n0,0\n0,{end}\n")
    q = _queue(tmp_path)
    assert q.depth == 10
    with caplog.at_level(logging.ERROR, "trionsq.diskqueue"):
        assert q.take(10) == frames
    assert q.depth == 0
    assert "resetting 0" in caplog.text
    q.sync_now()
    assert _meta(tmp_path).read_text() == f"0\n0,{end}\n0,{end}\n"
    q.close()


# --- empty and delete --------------------------------------------------------------------


def test_empty_deletes_files_and_numbering_continues(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(20)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=5 * size)
    q.put_many(frames)  # files 0..3
    assert q.take(3) == frames[:3]
    q.sync_now()
    q.empty()
    assert q.depth == 0
    assert os.listdir(tmp_path) == []  # segments and metadata gone
    assert q.take(10) == []
    new = [_frame(100), _frame(101)]
    q.put_many(new)
    assert _segments(tmp_path) == [f"{NAME}.diskqueue.000004.dat"]
    assert q.depth == 2
    q.sync_now()
    assert _meta(tmp_path).read_text() == f"2\n4,0\n4,{2 * size}\n"
    assert q.take(10) == new
    q.close()
    q = _queue(tmp_path, max_bytes_per_file=5 * size)
    assert q.depth == 0
    assert q.take(10) == []
    q.close()


def test_empty_drops_owed_and_deferred(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(3)]
    q = _queue(tmp_path, track_consumption=True)
    q.put_many(frames)
    q.take(2)
    q.deferred_due[framed_id(frames[0])] = 123
    assert q.owed_count == 2
    q.empty()
    assert q.owed_count == 0
    assert q.deferred_due == {}
    q.close()
    assert _meta(tmp_path).read_text() == "0\n1,0\n1,0\n"
    assert not _deferred(tmp_path).exists()
    q = _queue(tmp_path, track_consumption=True)
    assert q.take(10) == []
    q.close()


def test_delete_removes_everything_and_refuses_writes(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(10)]
    q = _queue(tmp_path, max_bytes_per_file=3 * _rec_size(frames[0]))
    q.put_many(frames)
    q.deferred_due[framed_id(frames[9])] = 5
    q.close()
    q = _queue(tmp_path, max_bytes_per_file=3 * _rec_size(frames[0]))
    assert _deferred(tmp_path).exists()
    q.take(2)
    q.delete()
    assert q.closed and q.deleted
    assert os.listdir(tmp_path) == []
    with pytest.raises(DiskQueueError):
        q.put(frames[0])
    q.sync_now(final=True)
    assert os.listdir(tmp_path) == []


# --- recovery ----------------------------------------------------------------------------


def test_corrupt_length_renames_file_bad_and_reads_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frames = [_frame(n, 120 - 26) for n in range(25)]  # 124-byte records, 8 per file
    q = _queue(tmp_path, max_bytes_per_file=1000)
    q.put_many(frames)
    q.close()
    _without_side_files(tmp_path)  # as Go writes them: go-diskqueue's handling
    # file 1 (records 8..15): record 11's length is garbage
    seg1 = _seg(tmp_path, 1)
    data = bytearray(seg1.read_bytes())
    data[3 * 124 : 3 * 124 + 4] = struct.pack(">I", 0xFFFFFFF0)
    seg1.write_bytes(bytes(data))
    q = _queue(tmp_path, max_bytes_per_file=1000)
    assert q.depth == 25
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        taken = _take_all(q, 5)
    assert taken == frames[:11] + frames[16:]
    assert "invalid message read size (4294967280)" in caplog.text
    assert not seg1.exists()
    assert (tmp_path / f"{NAME}.diskqueue.000001.dat.bad").read_bytes() == bytes(data)
    assert q.depth == 0
    q.sync_now()
    last = _rec_size(frames[0])
    assert _meta(tmp_path).read_text() == f"0\n3,{last}\n3,{last}\n"
    assert _segments(tmp_path) == [
        f"{NAME}.diskqueue.000001.dat.bad",
        f"{NAME}.diskqueue.000003.dat",
    ]
    q.close()


def test_length_below_minimum_is_corruption(tmp_path: Path) -> None:
    """go-diskqueue's corruption test: a 0 length written after the last record of the current
    write file; reading it skips the file, and writes move to the next file too."""
    frames = [_frame(n) for n in range(4)]
    q = _queue(tmp_path)
    q.put(frames[0])
    q.close()
    with _seg(tmp_path, 0).open("ab") as f:
        f.write(b"\0\0\0\0")
    end = _rec_size(frames[0]) + 4
    _meta(tmp_path).write_text(f"2\n0,0\n0,{end}\n")
    q = _queue(tmp_path)
    q.put(frames[1])
    assert q.take(10) == frames[:1]  # then the zero length: file 0 is bad, as is frames[1]
    assert (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
    assert q.depth == 0
    q.put_many(frames[2:])
    assert _seg(tmp_path, 1).read_bytes() == _record(frames[2]) + _record(frames[3])
    assert q.take(10) == frames[2:]
    q.close()


def test_truncated_record_in_finished_file(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(9)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=4 * size)
    q.put_many(frames)  # files 0, 1 (4 each), 2 (1)
    q.close()
    os.truncate(_seg(tmp_path, 0), 2 * size + 10)  # records 0, 1 whole; 2 cut short
    q = _queue(tmp_path, max_bytes_per_file=4 * size)
    assert _take_all(q, 3) == frames[:2] + frames[4:]
    assert (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").stat().st_size == 2 * size + 10
    q.close()


def test_truncated_last_record_of_write_file(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(5)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path)
    q.put_many(frames[:3])
    q.close()
    os.truncate(_seg(tmp_path, 0), 3 * size - 5)
    q = _queue(tmp_path)
    assert q.depth == 3
    assert q.take(10) == frames[:2]
    assert q.depth == 0
    assert (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
    q.put_many(frames[3:])
    assert _seg(tmp_path, 1).read_bytes() == _record(frames[3]) + _record(frames[4])
    assert q.take(10) == frames[3:]
    q.close()


@pytest.mark.parametrize("cut", [5, 40, 120])
def test_write_file_shorter_than_write_pos_moves_writes_to_a_new_file(
    tmp_path: Path, cut: int
) -> None:
    """Spec (spec/disk_queue.py): restart moves writes to a new file whenever the write file is
    not write_pos long. Appending at write_pos of a shorter file would leave a hole that reads
    as a bad record, and the new messages would go into the .bad file with it."""
    frames = [_frame(n) for n in range(6)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path)
    q.put_many(frames[:3])
    q.close()
    os.truncate(_seg(tmp_path, 0), 3 * size - cut)
    q = _queue(tmp_path)
    q.put_many(frames[3:])  # before the reader finds the damage
    assert _seg(tmp_path, 0).stat().st_size == 3 * size - cut
    assert _seg(tmp_path, 1).read_bytes() == b"".join(_record(f) for f in frames[3:])
    whole = (3 * size - cut) // size
    assert _take_all(q) == frames[:whole] + frames[3:]
    assert q.depth == 0
    q.close()


def test_missing_write_file_moves_writes_to_a_new_file(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(6)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=2 * size)
    q.put_many(frames[:3])  # files 0 (2) and 1 (1)
    q.close()
    _seg(tmp_path, 1).unlink()
    q = _queue(tmp_path, max_bytes_per_file=2 * size)
    q.put_many(frames[3:5])
    assert _seg(tmp_path, 2).read_bytes() == _record(frames[3]) + _record(frames[4])
    assert not _seg(tmp_path, 1).exists()
    assert _take_all(q) == frames[:2] + frames[3:5]
    q.close()


def test_missing_read_file_is_skipped(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(6)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=2 * size)
    q.put_many(frames)
    q.close()
    _seg(tmp_path, 0).unlink()
    q = _queue(tmp_path, max_bytes_per_file=2 * size)
    assert _take_all(q) == frames[2:]
    q.close()


def test_missing_metadata_reads_every_segment(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(7)]
    records = [_record(f) for f in frames]
    _seg(tmp_path, 3).write_bytes(b"".join(records[:3]))
    _seg(tmp_path, 4).write_bytes(b"".join(records[3:6]))
    _seg(tmp_path, 5).write_bytes(records[6])
    (tmp_path / f"{NAME}.diskqueue.000002.dat.bad").write_bytes(b"junk")
    (tmp_path / f"{NAME}x.diskqueue.000009.dat").write_bytes(b"another queue")
    q = _queue(tmp_path)
    assert q.depth == 7
    new = _frame(7)
    q.put(new)  # after the last segment
    assert _seg(tmp_path, 6).read_bytes() == _record(new)
    assert _take_all(q, 2) == [*frames, new]
    assert q.depth == 0
    q.sync_now()
    assert _meta(tmp_path).read_text() == f"0\n6,{len(_record(new))}\n6,{len(_record(new))}\n"
    assert not _seg(tmp_path, 3).exists() and not _seg(tmp_path, 5).exists()
    q.close()


def test_unparseable_metadata_is_treated_as_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frames = [_frame(n) for n in range(3)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.close()
    _meta(tmp_path).write_text("garbage")
    with caplog.at_level(logging.ERROR, "trionsq.diskqueue"):
        q = _queue(tmp_path)
    assert "failed to retrieveMetaData" in caplog.text
    assert q.depth == 3
    assert q.take(10) == frames
    q.close()


def test_stale_metadata_salvages_extra_records(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(7)]
    size = _rec_size(frames[0])
    live = tmp_path / "live"
    live.mkdir()
    q = _queue(live)
    q.put_many(frames[:3])
    assert q.take(1) == frames[:1]
    q.sync_now()  # metadata: depth 2, read 0,size, write 0,3*size
    q.put_many(frames[3:5])  # not synced
    crashed = _crash_copy(live, tmp_path / "crashed")
    q.close()
    assert _meta(crashed).read_text() == f"2\n0,{size}\n0,{3 * size}\n"
    q = _queue(crashed)
    assert q.depth == 4  # 2 from metadata + 2 salvaged
    q.put_many(frames[5:])  # writes go to a new file
    assert _seg(crashed, 1).read_bytes() == _record(frames[5]) + _record(frames[6])
    assert _seg(crashed, 0).stat().st_size == 5 * size  # old file untouched
    assert q.depth == 6
    assert _take_all(q, 4) == frames[1:]
    q.sync_now()
    assert _meta(crashed).read_text() == f"0\n1,{2 * size}\n1,{2 * size}\n"
    assert _segments(crashed) == [f"{NAME}.diskqueue.000001.dat"]
    q.close()


def test_segments_after_metadata_write_file_are_salvaged(tmp_path: Path) -> None:
    """A crash after rolling, before the metadata caught up: files past writeFileNum."""
    frames = [_frame(n) for n in range(12)]
    size = _rec_size(frames[0])
    live = tmp_path / "live"
    live.mkdir()
    q = _queue(live, max_bytes_per_file=3 * size)
    q.put_many(frames[:2])
    q.sync_now()  # metadata: depth 2, write 0,2*size
    q.put_many(frames[2:10])  # file 0 gets one more, files 1 and 2 fill, file 3 one
    crashed = _crash_copy(live, tmp_path / "crashed")
    q.close()
    assert _meta(crashed).read_text() == f"2\n0,0\n0,{2 * size}\n"
    q = _queue(crashed, max_bytes_per_file=3 * size)
    assert q.depth == 10
    q.put_many(frames[10:])
    assert _seg(crashed, 4).read_bytes() == _record(frames[10]) + _record(frames[11])
    assert _take_all(q, 3) == frames
    assert q.depth == 0
    q.close()


def test_read_position_past_write_position_reads_every_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Beyond go (which skips to a fresh file, deleting what is between): metadata that
    cannot be right is not trusted, and every segment on disk is read again."""
    frames = [_frame(n) for n in range(4)]
    records = [_record(f) for f in frames]
    _seg(tmp_path, 0).write_bytes(records[0] + records[1])
    _seg(tmp_path, 1).write_bytes(records[2])
    # read 2,100 > write 1,len: corrupt metadata
    _meta(tmp_path).write_text(f"5\n2,100\n1,{len(records[2])}\n")
    with caplog.at_level(logging.ERROR, "trionsq.diskqueue"):
        q = _queue(tmp_path)
    assert "is past write position" in caplog.text
    assert len(caplog.records) == 1
    assert q.depth == 3
    q.put(frames[3])
    assert _seg(tmp_path, 2).read_bytes() == records[3]
    assert _take_all(q) == frames
    q.sync_now()
    end = len(records[3])
    assert _meta(tmp_path).read_text() == f"0\n2,{end}\n2,{end}\n"
    assert _segments(tmp_path) == [f"{NAME}.diskqueue.000002.dat"]
    q.close()


def test_read_position_past_write_position_in_same_file(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(2)]
    _seg(tmp_path, 0).write_bytes(_record(frames[0]))
    _meta(tmp_path).write_text(f"1\n0,{2 * _rec_size(frames[0])}\n0,{_rec_size(frames[0])}\n")
    q = _queue(tmp_path)
    assert q.depth == 1
    q.put(frames[1])
    assert _seg(tmp_path, 1).read_bytes() == _record(frames[1])
    assert _take_all(q) == frames
    q.close()


# --- consumption tracking ----------------------------------------------------------------


def _tracked(path: Path, frames: list[bytes], **kwargs: object) -> DiskQueue:
    q = _queue(path, track_consumption=True, **kwargs)
    q.put_many(frames)
    return q


def test_untracked_read_position_advances_at_take(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(8)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path)
    q.put_many(frames)
    assert q.take(5) == frames[:5]
    assert q.owed_count == 0
    q.close()
    assert _meta(tmp_path).read_text() == f"3\n0,{5 * size}\n0,{8 * size}\n"
    q = _queue(tmp_path)
    assert q.take(10) == frames[5:]
    q.close()


@pytest.mark.parametrize(
    ("released", "redelivered_from"),
    [
        ([], 0),  # nothing finished: all of it comes back
        ([0, 1], 2),  # a released prefix is not redelivered
        ([1, 0], 2),  # in any order
        ([1, 3], 0),  # released after an owed one: redelivered with it (at least once)
        ([3, 0, 2], 1),
        ([4, 2, 0, 1, 3], 5),  # everything released
    ],
)
def test_crash_redelivers_from_oldest_unreleased(
    tmp_path: Path, released: list[int], redelivered_from: int
) -> None:
    frames = [_frame(n) for n in range(8)]
    size = _rec_size(frames[0])
    live = tmp_path / "live"
    live.mkdir()
    q = _tracked(live, frames, max_bytes_per_file=3 * size)  # 3 per file: files 0, 1, 2
    assert q.take(5) == frames[:5]
    assert q.depth == 3
    assert q.owed_count == 5
    for n in released:
        q.release(framed_id(frames[n]))
    assert q.owed_count == 5 - len(released)
    q.sync_now()
    meta = _meta(live).read_text()
    file_num, pos = divmod(redelivered_from, 3)
    assert meta == f"{8 - redelivered_from}\n{file_num},{pos * size}\n2,{2 * size}\n"
    crashed = _crash_copy(live, tmp_path / "crashed")
    q.close()
    q = _queue(crashed, max_bytes_per_file=3 * size, track_consumption=True)
    assert q.depth == 8 - redelivered_from
    assert _take_all(q, 2) == frames[redelivered_from:]
    q.close()


def test_close_persists_committed_not_read_position(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(6)]
    q = _tracked(tmp_path, frames)
    assert q.take(4) == frames[:4]
    q.release(framed_id(frames[0]))
    q.close()
    q = _queue(tmp_path, track_consumption=True)
    assert q.depth == 5
    assert _take_all(q) == frames[1:]
    q.close()


def test_owed_file_is_kept_until_released(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(6)]
    size = _rec_size(frames[0])
    q = _tracked(tmp_path, frames, max_bytes_per_file=2 * size)  # files 0, 1, 2
    assert q.take(5) == frames[:5]
    for n in (1, 2, 3, 4):
        q.release(framed_id(frames[n]))
    q.sync_now()
    assert _segments(tmp_path) == [f"{NAME}.diskqueue.{n:06d}.dat" for n in range(3)]
    assert _meta(tmp_path).read_text() == f"6\n0,0\n2,{2 * size}\n"
    q.release(framed_id(frames[0]))
    q.sync_now()
    assert _segments(tmp_path) == [f"{NAME}.diskqueue.000002.dat"]
    assert _meta(tmp_path).read_text() == f"1\n2,{size}\n2,{2 * size}\n"
    q.close()


def test_put_of_owed_id_releases_it(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(4)]
    size = _rec_size(frames[0])
    q = _tracked(tmp_path, frames)
    assert q.take(2) == frames[:2]
    assert q.owed_count == 2
    requeued = encode_message_frame(_id(0), 1_700_000_000_000_000_000, 2, b"0-0-0-0-0-")
    q.put(requeued)  # message 0 written again: the new copy stands for it
    assert q.owed_count == 1
    assert q.depth == 3
    q.release(framed_id(frames[1]))
    assert q.owed_count == 0
    q.sync_now()
    assert _meta(tmp_path).read_text() == f"3\n0,{2 * size}\n0,{5 * size}\n"
    q.close()
    q = _queue(tmp_path, track_consumption=True)
    assert _take_all(q) == [*frames[2:], requeued]
    q.close()


def test_release_of_unknown_id_is_harmless(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(2)]
    q = _tracked(tmp_path, frames)
    q.take(1)
    q.release(_id(999))
    q.release(framed_id(frames[0]))
    q.release(framed_id(frames[0]))
    assert q.owed_count == 0
    q.close()
    size = _rec_size(frames[0])
    assert _meta(tmp_path).read_text() == f"1\n0,{size}\n0,{2 * size}\n"


def _requeued_then_crashed(tmp_path: Path) -> tuple[list[bytes], Path]:
    """Messages 0 and 1 handed out, 1 requeued (written again, which releases it), then a
    crash: on disk 0, 1, 2, 1' with the committed position still at 0."""
    frames = [_frame(n) for n in range(3)]
    live = tmp_path / "live"
    live.mkdir()
    q = _tracked(live, frames)
    assert q.take(2) == frames[:2]
    q.put(frames[1])
    assert q.owed_count == 1
    q.sync_now()
    assert _meta(live).read_text() == f"4\n0,0\n0,{4 * _rec_size(frames[0])}\n"
    crashed = _crash_copy(live, tmp_path / "crashed")
    q.close()
    return frames, crashed


def test_second_copy_of_an_owed_message_is_not_handed_out(tmp_path: Path) -> None:
    """After the crash, the old copy of 1 is owed again when its second copy is read: the
    second copy is skipped (counted out of the depth), the owed one stands for both."""
    frames, crashed = _requeued_then_crashed(tmp_path)
    q = _queue(crashed, track_consumption=True)
    assert q.depth == 4
    assert _take_all(q, 2) == frames
    assert q.depth == 0
    assert q.owed_count == 3
    q.release(framed_id(frames[1]))
    q.release(framed_id(frames[0]))
    q.sync_now()
    size = _rec_size(frames[0])
    # 2 still owed: committed at it; depth counts 2 and the skipped copy after it
    assert _meta(crashed).read_text() == f"2\n0,{2 * size}\n0,{4 * size}\n"
    again = _crash_copy(crashed, tmp_path / "again")
    q.release(framed_id(frames[2]))
    assert q.owed_count == 0
    q.sync_now()
    assert _meta(crashed).read_text() == f"0\n0,{4 * size}\n0,{4 * size}\n"
    q.close()
    # the depth persisted matches what a restart finds there
    q = _queue(again, track_consumption=True)
    assert q.depth == 2
    assert q.take(1) == frames[2:]
    assert q.depth == 1
    assert q.take(10) == frames[1:2]
    q.close()


def test_second_copy_is_handed_out_once_the_first_is_released(tmp_path: Path) -> None:
    frames, crashed = _requeued_then_crashed(tmp_path)
    q = _queue(crashed, track_consumption=True)
    assert q.take(2) == frames[:2]
    q.release(framed_id(frames[1]))
    assert q.take(10) == [frames[2], frames[1]]
    assert q.owed_count == 3
    assert q.depth == 0
    q.close()


# --- reading in chunks -------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 7, 40, 41, 64, 100, 1000])
@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_records_straddling_read_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, batch: int
) -> None:
    monkeypatch.setattr(dqqueue, "READ_CHUNK", chunk)
    frames = [_frame(n, 3 + (n * 7) % 50) for n in range(60)]
    q = _queue(tmp_path, max_bytes_per_file=900, track_consumption=True)
    q.put_many(frames[:30])
    with _deadline(2):
        first = q.take(5)
        q.put_many(frames[30:])
        assert first + _take_all(q, batch) == frames
    assert q.depth == 0
    assert q.owed_count == 60
    q.close()


def test_one_take_across_the_default_read_chunk(tmp_path: Path) -> None:
    assert dqqueue.READ_CHUNK == 1 << 20
    frames = [_frame(n, 1000) for n in range(1200)]  # 1.24 MB in one segment
    q = _queue(tmp_path, max_bytes_per_file=1 << 22)
    q.put_many(frames)
    with _deadline(5):
        assert q.take(10_000) == frames
    q.close()


# --- deferred side file ------------------------------------------------------------------


def test_deferred_due_survives_close_and_reopen(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(3)]
    q = _queue(tmp_path, track_consumption=True)
    q.put_many(frames)
    q.deferred_due[_id(1)] = 1_700_000_123_000_000_000
    q.deferred_due[_id(2)] = 1_700_000_456_000_000_000
    q.sync_now()
    assert not _deferred(tmp_path).exists()  # written at shutdown only
    q.close()
    assert _deferred(tmp_path).exists()
    q = _queue(tmp_path, track_consumption=True)
    assert q.deferred_due == {_id(1): 1_700_000_123_000_000_000, _id(2): 1_700_000_456_000_000_000}
    del q.deferred_due[_id(1)]
    q.sync_now()
    assert _deferred(tmp_path).exists()  # still entries left
    q.deferred_due.clear()
    q.sync_now()
    assert not _deferred(tmp_path).exists()
    q.close()
    assert not _deferred(tmp_path).exists()
    q = _queue(tmp_path)
    assert q.deferred_due == {}
    q.close()


def test_corrupt_deferred_file_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    frames = [_frame(n) for n in range(2)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.close()
    _deferred(tmp_path).write_bytes(b"{not json")
    with caplog.at_level(logging.ERROR, "trionsq.diskqueue"):
        q = _queue(tmp_path)
    assert "ignoring unreadable deferred file" in caplog.text
    assert q.deferred_due == {}
    assert q.take(10) == frames
    q.sync_now()
    assert not _deferred(tmp_path).exists()
    q.close()


# --- write failures ----------------------------------------------------------------------


def _failing_write(fs: LocalFileSystem, partial: int, err: int) -> Callable[[], None]:
    """`fs.pwrite` writes `partial` bytes on the first call, then fails with `err`; returns
    the function that ends the failures."""
    real_pwrite = fs.pwrite
    calls = 0

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 1 and partial:
            return real_pwrite(fd, data[:partial], offset)
        raise OSError(err, os.strerror(err))

    fs.pwrite = pwrite  # type: ignore[method-assign]
    return lambda: delattr(fs, "pwrite")


@pytest.mark.parametrize(("partial", "err"), [(7, errno.ENOSPC), (0, errno.EIO), (45, errno.EIO)])
def test_write_failure_leaves_no_partial_record(tmp_path: Path, partial: int, err: int) -> None:
    frames = [_frame(n) for n in range(6)]
    size = _rec_size(frames[0])
    fs = LocalFileSystem()
    q = _queue(tmp_path, fs=fs)
    q.put_many(frames[:2])
    restore = _failing_write(fs, partial, err)
    with pytest.raises(OSError) as info:
        q.put_many(frames[2:4])
    restore()
    assert info.value.errno == err
    assert q.depth == 2
    assert _seg(tmp_path, 0).stat().st_size == 2 * size
    q.put_many(frames[4:])
    assert _seg(tmp_path, 0).read_bytes() == b"".join(_record(f) for f in frames[:2] + frames[4:])
    assert q.depth == 4
    assert q.take(10) == frames[:2] + frames[4:]
    q.close()
    assert _meta(tmp_path).read_text() == f"0\n0,{4 * size}\n0,{4 * size}\n"


def test_write_failure_when_truncate_fails_too(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(4)]
    size = _rec_size(frames[0])
    fs = LocalFileSystem()
    q = _queue(tmp_path, fs=fs)
    q.put(frames[0])

    def ftruncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "ftruncate failed")

    restore = _failing_write(fs, 10, errno.ENOSPC)
    fs.ftruncate = ftruncate  # type: ignore[method-assign]
    with pytest.raises(OSError):
        q.put(frames[1])
    restore()
    del fs.ftruncate
    assert _seg(tmp_path, 0).stat().st_size == size + 10  # the partial record is still there
    assert q.depth == 1
    # the next write reopens the file, cuts the partial record off and appends
    q.put_many(frames[2:])
    assert _seg(tmp_path, 0).read_bytes() == b"".join(_record(f) for f in [frames[0], *frames[2:]])
    assert q.take(10) == [frames[0], *frames[2:]]
    q.close()


def test_write_failure_in_the_read_file_does_not_reach_the_reader(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(4)]
    fs = LocalFileSystem()
    q = _queue(tmp_path, fs=fs)
    q.put(frames[0])
    assert q.take(10) == frames[:1]
    restore = _failing_write(fs, 20, errno.ENOSPC)
    with pytest.raises(OSError):
        q.put(frames[1])
    restore()
    assert q.take(10) == []
    q.put_many(frames[2:])
    assert q.take(10) == frames[2:]
    assert q.depth == 0
    q.close()


# --- read failures -----------------------------------------------------------------------


def _failing_reads(fs: LocalFileSystem, after: int, call: str = "pread") -> Callable[[], None]:
    """`fs.<call>` works `after` times, then fails with EIO; returns the function that ends
    the failures."""
    real = getattr(fs, call)
    calls = 0

    def failing(*args: object) -> object:
        nonlocal calls
        calls += 1
        if calls > after:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(*args)

    setattr(fs, call, failing)
    return lambda: delattr(fs, call)


@pytest.mark.parametrize(("track", "raw"), [(False, False), (True, False), (False, True)])
def test_a_failed_read_hands_out_what_was_read_and_the_next_take_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, track: bool, raw: bool
) -> None:
    """EIO in the middle of a batch: the records read before it are handed out (not lost
    with the exception, as they were), the reader stays before the failed read, and once
    the disk reads again everything else comes, each message once."""
    monkeypatch.setattr(dqqueue, "READ_CHUNK", 200)
    frames = [_frame(n, 3 + (n * 7) % 50) for n in range(40)]
    fs = LocalFileSystem()
    q = _queue(tmp_path, fs=fs, max_bytes_per_file=1000, track_consumption=track)
    q.put_many(frames)
    restore = _failing_reads(fs, after=2)

    def take(count: int) -> list[bytes]:
        if not raw:
            return q.take(count)
        pieces, taken = q.take_records(count)
        got = frames_from_records(pieces)
        assert len(got) == taken
        return got

    first = take(100)
    assert 0 < len(first) < len(frames)
    assert first == frames[: len(first)]
    assert q.read_error is not None and q.read_error.errno == errno.EIO
    assert take(100) == []  # still failing: nothing, no exception, no skipped segment
    assert q.depth == len(frames) - len(first)
    restore()
    rest = take(100)
    rest += take(100)
    assert first + rest == frames
    assert q.read_error is None
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".bad")]
    q.close()


def test_a_segment_that_cannot_be_opened_is_retried_not_set_aside(tmp_path: Path) -> None:
    """go-diskqueue renames a segment .bad on any read error; an open refused by the disk
    loses nothing here."""
    frames = [_frame(n) for n in range(20)]
    fs = LocalFileSystem()
    q = _queue(tmp_path, fs=fs, max_bytes_per_file=200)
    q.put_many(frames)
    restore = _failing_reads(fs, after=0, call="open")
    assert q.take(100) == []
    assert q.read_error is not None
    restore()
    assert _take_all(q) == frames
    assert q.read_error is None
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".bad")]
    q.close()


# --- sync failures -----------------------------------------------------------------------


def test_failed_sync_keeps_finished_files_for_the_next_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = [_frame(n) for n in range(5)]
    size = _rec_size(frames[0])
    q = _queue(tmp_path, max_bytes_per_file=2 * size)
    q.put_many(frames)  # files 0, 1, 2
    q.sync_now()
    assert q.take(5) == frames  # into file 2: files 0 and 1 are finished
    real = dqqueue.write_file_atomically

    def full_disk(fs: object, path: str, data: bytes, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dqqueue, "write_file_atomically", full_disk)
    with pytest.raises(OSError):
        q.sync_now()
    assert q.unsynced
    assert _meta(tmp_path).read_text() == f"5\n0,0\n2,{size}\n"
    assert _seg(tmp_path, 0).exists() and _seg(tmp_path, 1).exists()
    monkeypatch.setattr(dqqueue, "write_file_atomically", real)
    q.sync_now()
    assert not q.unsynced
    assert _meta(tmp_path).read_text() == f"0\n2,{size}\n2,{size}\n"
    assert _segments(tmp_path) == [f"{NAME}.diskqueue.000002.dat"]
    q.close()


def test_sync_fsyncs_data_before_the_metadata(tmp_path: Path) -> None:
    """The metadata must never claim records that are not durable: every file written since the
    last sync (the rolled ones and the current one) is fsynced before the metadata is written."""
    frames = [_frame(n) for n in range(5)]
    q_fs = LocalFileSystem()
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = q_fs.fsync, q_fs.rename

    def fsync(fd: int) -> None:
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def rename(src: str, dst: str) -> None:
        events.append(("rename", os.path.basename(dst)))
        real_rename(src, dst)

    q = _queue(tmp_path, max_bytes_per_file=2 * _rec_size(frames[0]), fs=q_fs)
    q.put_many(frames)  # rolls twice: files 0, 1 are retired, 2 is the write file
    q_fs.fsync, q_fs.rename = fsync, rename  # type: ignore[method-assign]
    q.sync_now()
    assert sorted(events[:3]) == [("fsync", f"{NAME}.diskqueue.{n:06d}.dat") for n in range(3)]
    # then the finished segments' side files (their slots written after the data's fsync),
    # then the metadata: its temporary file fsynced, then renamed over it
    assert [e for e in events[3:] if e[0] == "rename"] == [("rename", f"{NAME}.diskqueue.meta.dat")]
    fsyncs = [name for kind, name in events[3:] if kind == "fsync"]
    assert fsyncs[:2] == [f"{NAME}.diskqueue.{n:06d}.crc" for n in range(2)]
    assert all(name.endswith(".tmp") for name in fsyncs[2:])
    q.close()
