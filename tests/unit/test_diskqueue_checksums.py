"""Checksum side files (trionsq/diskqueue/checksums.py): a CRC-32C per record of the segments
trionsq writes, in ``<name>.diskqueue.%06d.crc``, which Go ignores. A record damaged on disk is
found when read, counted, moved to ``<name>.diskqueue.bad`` and not delivered, and the records
after it are; a segment without a side file reads as before; a side file that is not its
segment's, torn, damaged or left by a crash or a power cut never makes a good record look
corrupt; a side file goes with its segment."""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
import struct
from pathlib import Path

import pytest

from trionsq.diskqueue import DiskQueue, checksums, frames_from_records
from trionsq.diskqueue.checksums import HEADER_SIZE, UNIT
from trionsq.diskqueue.fs import LocalFileSystem
from trionsq.diskqueue.simulated import SimulatedDisk
from trionsq.protocol.crc32c import crc32c
from trionsq.protocol.message import encode_message_frame

MIN = 26
MAX = 26 + 1024
NAME = "t"

pytestmark = pytest.mark.skipif(not checksums.ENABLED, reason="no compiled CRC-32C")


def _frame(n: int, body_size: int = 40) -> bytes:
    body = (b"%d-" % n * body_size)[:body_size]
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 1, body)


def _record(frame: bytes) -> bytes:
    return struct.pack(">I", len(frame) - 8) + frame[8:]


def _queue(path: Path | str, **kwargs: object) -> DiskQueue:
    options: dict[str, object] = {
        "max_bytes_per_file": 1 << 20,
        "min_msg_size": MIN,
        "max_msg_size": MAX,
        "sync_every": 1 << 30,
    }
    options.update(kwargs)
    return DiskQueue(NAME, str(path), **options)  # type: ignore[arg-type]


def _seg(path: Path, num: int = 0) -> Path:
    return path / f"{NAME}.diskqueue.{num:06d}.dat"


def _side(path: Path, num: int = 0) -> Path:
    return path / f"{NAME}.diskqueue.{num:06d}.crc"


def _bad(path: Path) -> Path:
    return path / f"{NAME}.diskqueue.bad"


def _take_all(q: DiskQueue, raw: bool = False, batch: int = 7) -> list[bytes]:
    out: list[bytes] = []
    while True:
        if raw:
            pieces, count = q.take_records(batch)
            got = frames_from_records(pieces)
            assert len(got) == count
        else:
            got = q.take(batch)
        if not got:
            return out
        out += got
        assert len(out) < 100_000


def _flip(path: Path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def _offset(frames: list[bytes], index: int) -> int:
    """Where record `index` starts in a segment holding `frames` from offset 0."""
    return sum(len(f) - 4 for f in frames[:index])


# --- the format --------------------------------------------------------------------------


def test_the_segment_is_gos_and_the_side_file_describes_it(tmp_path: Path) -> None:
    frames = [_frame(n, 10 + n) for n in range(50)]
    q = _queue(tmp_path)
    q.put_many(frames[:20])
    for frame in frames[20:]:
        q.put(frame)
    q.close()
    assert _seg(tmp_path).read_bytes() == b"".join(map(_record, frames))
    side = _side(tmp_path).read_bytes()
    assert checksums.parse_header(side) == (len(frames[0]) - 8, crc32c(frames[0][8:]))
    # record units, then the group that covers them all (closed by the last sync)
    units = side[HEADER_SIZE:-16]
    words = struct.unpack(f"<{len(units) // 4}I", units)
    assert list(words[0::2]) == [len(f) - 8 for f in frames]
    assert list(words[1::2]) == [crc32c(f[8:]) for f in frames]
    count, data_crc, span, units_crc = struct.unpack("<IIII", side[-16:])
    data = _seg(tmp_path).read_bytes()
    assert (count, data_crc, span, units_crc) == (
        checksums.GROUP_BASE + 50,
        crc32c(data),
        len(data),
        crc32c(units),
    )


def test_units_reach_the_side_file_only_after_their_data_is_fsynced(tmp_path: Path) -> None:
    fs = LocalFileSystem()
    events: list[str] = []
    real_fsync, real_pwrite = fs.fsync, fs.pwrite

    def fsync(fd: int) -> None:
        events.append("fsync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        events.append("write " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_pwrite(fd, data, offset)

    fs.fsync, fs.pwrite = fsync, pwrite  # type: ignore[method-assign]
    q = _queue(tmp_path, fs=fs)
    q.put_many([_frame(n) for n in range(checksums.GROUP_MIN)])
    assert _side(tmp_path).read_bytes() == b""  # held in memory until the data is durable
    q.sync_now()
    assert events.index(f"fsync {NAME}.diskqueue.000000.dat") < events.index(
        f"write {NAME}.diskqueue.000000.crc"
    )
    # a group too small to close now stays in memory (written once it grows, or at the end)
    q.put_many([_frame(n) for n in range(100, 110)])
    size = _side(tmp_path).stat().st_size
    events.clear()
    q.sync_now()
    assert _side(tmp_path).stat().st_size == size
    # the next round fsyncs what the last one wrote, after the data
    assert events[:2] == [
        f"fsync {NAME}.diskqueue.000000.dat",
        f"fsync {NAME}.diskqueue.000000.crc",
    ]
    assert not [e for e in events if e == f"write {NAME}.diskqueue.000000.crc"]
    q.put_many([_frame(n) for n in range(200, 200 + checksums.GROUP_MIN)])
    events.clear()
    q.sync_now()
    assert events[:2] == [
        f"fsync {NAME}.diskqueue.000000.dat",
        f"write {NAME}.diskqueue.000000.crc",
    ]
    assert _side(tmp_path).stat().st_size == size + (10 + checksums.GROUP_MIN) * UNIT + 16
    q.close()


# --- a damaged record --------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 17, 39])
@pytest.mark.parametrize("where", ["length", "body", "id", "crc-neutral"])
@pytest.mark.parametrize(("raw", "track"), [(False, False), (False, True), (True, False)])
def test_a_flipped_bit_is_found_counted_moved_aside_and_the_rest_delivered(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    index: int,
    where: str,
    raw: bool,
    track: bool,
) -> None:
    frames = [_frame(n) for n in range(40)]
    q = _queue(tmp_path, track_consumption=track)
    q.put_many(frames)
    q.close()
    start = _offset(frames, index)
    # a bit of the length (in bounds or not), of the body, of the message ID
    offset, bit = {
        "length": (start + 3, 0),
        "body": (start + 4 + 26 + 5, 3),
        "id": (start + 4 + 10, 6),
        "crc-neutral": (start + 1, 7),
    }[where]
    _flip(_seg(tmp_path), offset, bit)
    damaged = _seg(tmp_path).read_bytes()[start : start + len(frames[index]) - 4]
    q = _queue(tmp_path, track_consumption=track)
    assert q.depth == 40 or where in ("length", "crc-neutral")  # recovery counts by lengths
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        got = _take_all(q, raw)
    assert got == frames[:index] + frames[index + 1 :]
    assert q.corrupt_records == 1
    assert q.depth == 0
    # moved aside: a go-diskqueue record, the length from the side file, the payload as read
    assert _bad(tmp_path).read_bytes() == struct.pack(">I", len(frames[index]) - 8) + damaged[4:]
    lines = [r for r in caplog.records if "fails its checksum" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR
    assert f"record at {start} of " in lines[0].getMessage()
    assert not (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
    if track:
        for frame in got:
            q.release(frame[18:34])
    q.sync_now()
    # the read position moved past it, durably: a restart does not read it again
    q.close()
    q = _queue(tmp_path)
    assert q.take(100) == []
    assert q.corrupt_records == 0
    q.close()


def test_several_damaged_records_in_several_segments(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(60)]
    size = len(frames[0]) - 4
    q = _queue(tmp_path, max_bytes_per_file=20 * size)
    q.put_many(frames)
    q.close()
    for num, index in [(0, 0), (0, 19), (1, 5), (1, 6), (2, 10)]:
        _flip(_seg(tmp_path, num), index * size + 40)
    q = _queue(tmp_path, max_bytes_per_file=20 * size)
    got = _take_all(q)
    lost = {0, 19, 25, 26, 50}
    assert got == [f for n, f in enumerate(frames) if n not in lost]
    assert q.corrupt_records == 5
    q.close()


def test_a_damaged_record_found_by_a_queue_reading_what_it_wrote(tmp_path: Path) -> None:
    """In one process: records synced (their units on disk), then damaged, then read."""
    frames = [_frame(n) for n in range(checksums.GROUP_MIN + 10)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.sync_now()
    _flip(_seg(tmp_path), _offset(frames, 12) + 50)
    assert _take_all(q) == frames[:12] + frames[13:]
    assert q.corrupt_records == 1
    q.close()


def test_records_read_back_before_their_units_are_written_are_not_checked(
    tmp_path: Path,
) -> None:
    """Units still in memory (appended since the segment's last sync, or in a group too small
    to close) are believed without a check: the records are read back from the page cache the
    process just wrote to."""
    frames = [_frame(n) for n in range(20)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.sync_now()
    _flip(_seg(tmp_path), _offset(frames, 12) + 50)
    got = _take_all(q)
    assert len(got) == 20 and got[12] != frames[12] and q.corrupt_records == 0
    q.close()


def test_a_damaged_first_record_is_found_too(tmp_path: Path) -> None:
    """The header names the first record: when that record is the damaged one, the side file
    is still recognised as the segment's (by the next record) and the record set aside."""
    frames = [_frame(n) for n in range(10)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.close()
    _flip(_seg(tmp_path), 4 + 30)
    q = _queue(tmp_path)
    assert _take_all(q) == frames[1:]
    assert q.corrupt_records == 1
    q.close()


def test_a_segment_truncated_inside_a_record_is_gos_bad_segment(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(10)]
    q = _queue(tmp_path, max_bytes_per_file=5 * (len(frames[0]) - 4))
    q.put_many(frames)
    q.close()
    data = _seg(tmp_path).read_bytes()
    _seg(tmp_path).write_bytes(data[: _offset(frames, 3) + 20])
    q = _queue(tmp_path, max_bytes_per_file=5 * (len(frames[0]) - 4))
    assert _take_all(q) == frames[:3] + frames[5:]
    assert q.corrupt_records == 0
    assert (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
    assert (tmp_path / f"{NAME}.diskqueue.000000.crc.bad").exists()
    q.close()


# --- segments without checks -------------------------------------------------------------


def test_a_segment_without_a_side_file_reads_as_before(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(20)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.close()
    _side(tmp_path).unlink()
    _flip(_seg(tmp_path), _offset(frames, 5) + 40)  # a body bit: Go delivers it
    q = _queue(tmp_path)
    got = _take_all(q)
    assert len(got) == 20 and got[5] != frames[5] and got[:5] + got[6:] == frames[:5] + frames[6:]
    assert q.corrupt_records == 0
    assert not _bad(tmp_path).exists()
    q.close()


def test_records_go_appended_after_trionsq_stopped_are_read_unchecked(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(20)]
    q = _queue(tmp_path)
    q.put_many(frames[:10])
    q.close()
    # Go nsqd appends at the write position and rewrites the metadata
    with open(_seg(tmp_path), "ab") as f:
        f.write(b"".join(map(_record, frames[10:])))
    end = _seg(tmp_path).stat().st_size
    (tmp_path / f"{NAME}.diskqueue.meta.dat").write_text(f"20\n0,0\n0,{end}\n")
    _flip(_seg(tmp_path), _offset(frames, 15) + 40)  # Go's record: not checked
    _flip(_seg(tmp_path), _offset(frames, 3) + 40)  # trionsq's: checked
    q = _queue(tmp_path)
    got = _take_all(q)
    assert got[:3] == frames[:3] and got[3:14] == frames[4:15] and got[15:] == frames[16:]
    assert got[14] != frames[15]
    assert q.corrupt_records == 1
    q.close()


def test_trionsq_going_on_in_a_segment_go_wrote_checks_its_own_records(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(20)]
    _seg(tmp_path).write_bytes(b"".join(map(_record, frames[:10])))
    end = _offset(frames, 10)
    (tmp_path / f"{NAME}.diskqueue.meta.dat").write_text(f"10\n0,0\n0,{end}\n")
    q = _queue(tmp_path)
    q.put_many(frames[10:])
    q.close()
    _flip(_seg(tmp_path), _offset(frames, 12) + 40)
    _flip(_seg(tmp_path), _offset(frames, 4) + 40)  # Go's: unchecked
    q = _queue(tmp_path)
    got = _take_all(q)
    assert got[4] != frames[4]
    assert got[:4] + got[5:] == frames[:4] + frames[5:12] + frames[13:]
    assert q.corrupt_records == 1
    q.close()


def test_writes_going_on_after_a_restart_keep_their_checks(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(30)]
    for part in range(3):
        q = _queue(tmp_path)
        q.put_many(frames[10 * part : 10 * part + 10])
        q.close()
    for index in (2, 15, 27):
        _flip(_seg(tmp_path), _offset(frames, index) + 40)
    q = _queue(tmp_path)
    assert _take_all(q) == [f for n, f in enumerate(frames) if n not in (2, 15, 27)]
    assert q.corrupt_records == 3
    q.close()


def test_without_the_compiled_crc_no_side_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = [_frame(n) for n in range(10)]
    q = _queue(tmp_path)
    q.put_many(frames)
    q.close()
    _flip(_seg(tmp_path), 40)
    monkeypatch.setattr(checksums, "ENABLED", False)
    q = _queue(tmp_path)
    got = q.take(100)
    assert len(got) == 10 and got[0] != frames[0]  # read as Go reads it
    q.put_many(frames)
    assert not _side(tmp_path, 1).exists()
    q.close()


# --- side files that must not be believed ------------------------------------------------


def test_a_side_file_of_another_segment_instance_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Go deleted segment 0 and later wrote another segment 0 (no metadata: it starts over
    at 0,0); trionsq's side file of the old one is still there."""
    old = [_frame(n) for n in range(20)]
    q = _queue(tmp_path)
    q.put_many(old)
    q.close()
    side = _side(tmp_path).read_bytes()
    new = [_frame(100 + n, 40) for n in range(20)]
    _seg(tmp_path).write_bytes(b"".join(map(_record, new)))
    (tmp_path / f"{NAME}.diskqueue.meta.dat").unlink()
    _side(tmp_path).write_bytes(side)
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        q = _queue(tmp_path)
        assert _take_all(q) == new
    assert q.corrupt_records == 0
    assert "does not belong to" in caplog.text
    q.close()


def test_a_segment_go_overwrote_from_the_start_is_not_judged_by_the_old_side_file(
    tmp_path: Path,
) -> None:
    """Go without metadata writes over segment 0 from offset 0 (it does not truncate): the
    old records after its new ones are still there, and so is the old side file."""
    old = [_frame(n) for n in range(20)]
    q = _queue(tmp_path)
    q.put_many(old)
    q.close()
    new = [_frame(200 + n, 40) for n in range(5)]
    with open(_seg(tmp_path), "r+b") as f:
        f.write(b"".join(map(_record, new)))
    (tmp_path / f"{NAME}.diskqueue.meta.dat").write_text(f"5\n0,0\n0,{_offset(new, 5)}\n")
    q = _queue(tmp_path)
    got = _take_all(q)
    assert got[:5] == new
    assert got[5:] == old[5:]  # salvaged, as go would
    assert q.corrupt_records == 0
    q.close()


@pytest.mark.parametrize("cut", ["header", "unit", "group", "mid", "zeros", "garbage"])
def test_a_torn_side_file_makes_nothing_corrupt(tmp_path: Path, cut: str) -> None:
    frames = [_frame(n) for n in range(100)]
    q = _queue(tmp_path)
    q.put_many(frames[:70])
    q.sync_now()
    q.put_many(frames[70:])
    q.close()
    side = _side(tmp_path).read_bytes()
    first_group_end = HEADER_SIZE + 70 * UNIT + 16
    torn = {
        "header": side[:10],
        "unit": side[: first_group_end + 5 * UNIT + 3],
        "group": side[: len(side) - 5],
        "mid": side[: first_group_end - 3],
        "zeros": side[:first_group_end] + bytes(len(side) - first_group_end),
        "garbage": side[:first_group_end] + random.Random(7).randbytes(len(side) - first_group_end),
    }[cut]
    _side(tmp_path).write_bytes(torn)
    q = _queue(tmp_path)
    assert _take_all(q) == frames
    assert q.corrupt_records == 0
    q.close()


def test_a_torn_side_file_still_checks_what_it_covers(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(100)]
    q = _queue(tmp_path)
    q.put_many(frames[:70])
    q.sync_now()
    q.put_many(frames[70:])
    q.close()
    side = _side(tmp_path).read_bytes()
    _side(tmp_path).write_bytes(side[: HEADER_SIZE + 70 * UNIT + 16 + 7])
    _flip(_seg(tmp_path), _offset(frames, 10) + 40)  # covered: found
    _flip(_seg(tmp_path), _offset(frames, 80) + 40)  # past the tear: read unchecked
    q = _queue(tmp_path)
    got = _take_all(q)
    assert got[:10] == frames[:10] and got[10:79] == frames[11:80] and got[80:] == frames[81:]
    assert got[79] != frames[80]
    assert q.corrupt_records == 1
    q.close()


def test_no_bit_flipped_in_a_side_file_makes_a_good_record_corrupt(tmp_path: Path) -> None:
    """Every bit of a side file, flipped in turn (a damaged side file, good records): each
    record is delivered, none is set aside."""
    frames = [_frame(n, 20 + n % 3) for n in range(12)]
    q = _queue(tmp_path)
    q.put_many(frames[:6])
    q.sync_now()
    q.put_many(frames[6:])
    q.close()
    side = _side(tmp_path).read_bytes()
    for offset in range(len(side)):
        for bit in range(8):
            damaged = bytearray(side)
            damaged[offset] ^= 1 << bit
            _side(tmp_path).write_bytes(bytes(damaged))
            copy = tmp_path / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            copy.mkdir()
            for name in os.listdir(tmp_path):
                if name != "copy":
                    shutil.copy(tmp_path / name, copy / name)
            q = _queue(copy)
            assert _take_all(q, batch=100) == frames, (offset, bit)
            assert q.corrupt_records == 0, (offset, bit)
            q.close()


# --- crashes and power cuts --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(30))
def test_a_power_cut_leaves_no_false_corruption(seed: int) -> None:
    """Writes, syncs and reads on a simulated disk; the power is cut (unsynced writes lost,
    some torn); what survives reads back with nothing called corrupt, and Go appending to the
    write file at its metadata's position afterwards does not make its records look corrupt
    (the side file never describes data a power cut took away)."""
    rng = random.Random(seed)
    disk = SimulatedDisk()
    data = "/d"
    size = len(_frame(0)) - 4
    q = _queue(data, fs=disk, max_bytes_per_file=rng.choice([15, 40, 1000]) * size)
    n = 0
    for _ in range(rng.randint(3, 12)):
        batch = [_frame(n + i) for i in range(rng.randint(1, 30))]
        n += len(batch)
        q.put_many(batch)
        if rng.random() < 0.5:
            q.sync_now()
        if rng.random() < 0.3:
            q.take(rng.randint(1, 20))
    survivor = disk.power_cut(rng, torn=True)
    q = _queue(data, fs=survivor, max_bytes_per_file=40 * size)
    got = _take_all(q, batch=13)
    assert q.corrupt_records == 0
    assert len(set(got)) == len(got)
    q.close()
    # Go appends (its own records) at the write position the metadata gives
    files = survivor.files()
    meta = files[f"{data}/{NAME}.diskqueue.meta.dat"].decode().split("\n")
    write_file, write_pos = map(int, meta[2].split(","))
    go = [_frame(10_000 + i) for i in range(5)]
    seg = f"{data}/{NAME}.diskqueue.{write_file:06d}.dat"
    fd = survivor.open(seg, os.O_WRONLY | os.O_CREAT)
    survivor.pwrite(fd, b"".join(map(_record, go)), write_pos)
    survivor.fsync(fd)
    survivor.close(fd)
    depth = int(meta[0]) + len(go)
    end = write_pos + 5 * size
    meta_text = f"{depth}\n{meta[1]}\n{write_file},{end}\n".encode()
    fd = survivor.open(f"{data}/{NAME}.diskqueue.meta.dat", os.O_WRONLY | os.O_TRUNC)
    survivor.pwrite(fd, meta_text, 0)
    survivor.close(fd)
    q = _queue(data, fs=survivor, max_bytes_per_file=40 * size)
    assert q.corrupt_records == 0
    got = _take_all(q, batch=13)
    assert got[-5:] == go
    assert q.corrupt_records == 0
    q.close()


@pytest.mark.parametrize("seed", range(10))
def test_a_killed_process_leaves_no_false_corruption(tmp_path: Path, seed: int) -> None:
    """kill -9 at any point: the files as they are (page cache included), units held in
    memory lost."""
    rng = random.Random(seed)
    size = len(_frame(0)) - 4
    (tmp_path / "live").mkdir()
    q = _queue(tmp_path / "live", max_bytes_per_file=25 * size)
    frames = [_frame(n) for n in range(200)]
    i = 0
    while i < len(frames):
        count = rng.randint(1, 40)
        q.put_many(frames[i : i + count])
        i += count
        if rng.random() < 0.4:
            q.sync_now()
        if rng.random() < 0.2:
            shutil.copytree(tmp_path / "live", tmp_path / f"crash{i}")
    crashes = [p for p in tmp_path.iterdir() if p.name.startswith("crash")]
    assert crashes or i
    for crash in crashes:
        c = _queue(crash, max_bytes_per_file=25 * size)
        got = _take_all(c, batch=50)
        assert c.corrupt_records == 0
        assert set(got) <= set(frames)
        c.close()
    q.close()


# --- a side file goes with its segment ---------------------------------------------------


def test_side_files_are_removed_with_their_segments(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(30)]
    size = len(frames[0]) - 4
    q = _queue(tmp_path, max_bytes_per_file=10 * size)
    q.put_many(frames)  # segments 0, 1, 2
    q.sync_now()
    assert all(_side(tmp_path, n).exists() for n in range(3))
    assert q.take(20) == frames[:20]
    q.sync_now()  # segments 0 and 1 consumed: gone, with their side files
    assert sorted(os.listdir(tmp_path)) == [
        f"{NAME}.diskqueue.000002.crc",
        f"{NAME}.diskqueue.000002.dat",
        f"{NAME}.diskqueue.meta.dat",
    ]
    q.empty()
    q.sync_now()
    assert os.listdir(tmp_path) == [f"{NAME}.diskqueue.meta.dat"]
    q.put_many(frames[:3])
    q.sync_now()
    q.delete()
    assert os.listdir(tmp_path) == []


def test_a_side_file_whose_segment_is_gone_is_removed_at_start(tmp_path: Path) -> None:
    """Go deleted consumed segments (it does not know side files)."""
    frames = [_frame(n) for n in range(30)]
    size = len(frames[0]) - 4
    q = _queue(tmp_path, max_bytes_per_file=10 * size)
    q.put_many(frames)
    q.close()
    _seg(tmp_path, 0).unlink()
    _seg(tmp_path, 1).rename(tmp_path / f"{NAME}.diskqueue.000001.dat.bad")
    (tmp_path / f"{NAME}.diskqueue.meta.dat").write_text(f"10\n2,0\n2,{10 * size}\n")
    q = _queue(tmp_path, max_bytes_per_file=10 * size)
    assert not _side(tmp_path, 0).exists() and not _side(tmp_path, 1).exists()
    assert _take_all(q) == frames[20:]
    q.close()


def test_moved_records_take_their_units_with_them(tmp_path: Path) -> None:
    """take_records/put_records (the topic pump): the target's side file describes what it
    got, and a record damaged in the source is set aside there, not moved."""
    frames = [_frame(n, 20 + n % 5) for n in range(300)]
    source = DiskQueue(
        "t",
        str(tmp_path),
        max_bytes_per_file=4000,
        min_msg_size=MIN,
        max_msg_size=MAX,
        sync_every=1 << 30,
    )
    source.put_many(frames)
    source.sync_now()
    _flip(tmp_path / "t.diskqueue.000001.dat", 100)
    target = DiskQueue(
        "t:c",
        str(tmp_path),
        max_bytes_per_file=3000,
        min_msg_size=MIN,
        max_msg_size=MAX,
        sync_every=1 << 30,
    )
    moved = 0
    while True:
        pieces, count = source.take_records(37)
        if not count:
            break
        target.put_records(pieces, count)
        moved += count
    assert moved == 299 and source.corrupt_records == 1
    target.close()
    target = DiskQueue(
        "t:c",
        str(tmp_path),
        max_bytes_per_file=3000,
        min_msg_size=MIN,
        max_msg_size=MAX,
        sync_every=1 << 30,
    )
    got = _take_all(target, batch=50)
    assert len(got) == 299 and set(got) < set(frames)
    assert target.corrupt_records == 0
    # every target segment has a side file that checks it
    for name in sorted(os.listdir(tmp_path)):
        if name.startswith("t:c.diskqueue.0") and name.endswith(".dat"):
            assert (tmp_path / (name[:-4] + ".crc")).exists(), name
    source.close()
    target.close()


def test_a_side_file_that_cannot_be_written_fails_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = LocalFileSystem()
    real = fs.pwrite

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".crc"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    fs.pwrite = pwrite  # type: ignore[method-assign]
    frames = [_frame(n) for n in range(100)]
    q = _queue(tmp_path, fs=fs)
    q.put_many(frames[:70])
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        q.sync_now()  # the data's sync works
    assert "failed to write" in caplog.text and ".crc" in caplog.text
    q.put_many(frames[70:])
    q.close()
    q = _queue(tmp_path)
    assert _take_all(q) == frames
    assert q.corrupt_records == 0
    q.close()


def test_checksums_a_failing_sync_never_writes_are_given_up_not_hoarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trionsq.diskqueue import queue as dqqueue

    monkeypatch.setattr(dqqueue, "_SIDE_HELD_MAX", 50 * UNIT)
    frames = [_frame(n) for n in range(100)]
    q = _queue(tmp_path)
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        for frame in frames:
            q.put(frame)
    assert "not checked" in caplog.text
    assert q._side is None and not q._sides
    q.close()
    q = _queue(tmp_path)
    assert _take_all(q) == frames
    assert q.corrupt_records == 0
    q.close()


def test_groups_of_huge_records_close_by_their_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group's span is a uint32: with large enough records, bytes close a group before its
    count does (here the limit is made small)."""
    monkeypatch.setattr(checksums, "SPAN_MAX", 300)
    frames = [_frame(n, 10 + (n * 37) % 200) for n in range(60)]
    q = _queue(tmp_path)
    q.put_many(frames[:40])
    for frame in frames[40:]:
        q.put(frame)
    q.close()
    side = _side(tmp_path).read_bytes()
    spans = [
        struct.unpack_from("<I", side, off + 8)[0]
        for off in range(HEADER_SIZE, len(side) - 15, UNIT)
        if side[off + 3] == 0xFF
    ]
    assert len(spans) > 5 and all(span <= 300 for span in spans)
    for index in (3, 33, 55):
        _flip(_seg(tmp_path), _offset(frames, index) + 30)
    q = _queue(tmp_path)
    assert _take_all(q) == [f for n, f in enumerate(frames) if n not in (3, 33, 55)]
    assert q.corrupt_records == 3
    q.close()
