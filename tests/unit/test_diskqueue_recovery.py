"""Opening a disk queue on metadata that cannot be right (recovery.py), one test per kind of
corruption: values beyond int64 or negative, the read position past the write position,
positions beyond a file's size, file numbers far apart, a wrong depth. In each case nothing
readable is lost, one log line says what was corrected, and nothing walks missing segment
numbers one at a time."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from trionsq.diskqueue import DiskQueue
from trionsq.diskqueue.fs import LocalFileSystem
from trionsq.diskqueue.recovery import recover
from trionsq.protocol.message import encode_message_frame

MIN = 26
MAX = 26 + 1024
NAME = "t"


def _frame(n: int) -> bytes:
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 1, b"body-%d" % n)


def _record(frame: bytes) -> bytes:
    return struct.pack(">I", len(frame) - 8) + frame[8:]


class CountingFS(LocalFileSystem):
    """The local file system, counting the segments opened."""

    def __init__(self) -> None:
        self.opens = 0

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        self.opens += path.endswith(".dat")
        return super().open(path, flags, mode)


def _queue(path: Path, fs: LocalFileSystem | None = None, **kwargs: object) -> DiskQueue:
    return DiskQueue(
        NAME,
        str(path),
        max_bytes_per_file=1 << 20,
        min_msg_size=MIN,
        max_msg_size=MAX,
        sync_every=1 << 30,
        fs=fs or LocalFileSystem(),
        **kwargs,  # type: ignore[arg-type]
    )


def _segments(path: Path, files: dict[int, list[int]]) -> list[bytes]:
    """Write segments holding the numbered messages; returns their frames in order."""
    frames = []
    for num, messages in sorted(files.items()):
        data = b""
        for n in messages:
            frame = _frame(n)
            frames.append(frame)
            data += _record(frame)
        (path / f"{NAME}.diskqueue.{num:06d}.dat").write_bytes(data)
    return frames


def _meta(path: Path, text: str) -> None:
    (path / f"{NAME}.diskqueue.meta.dat").write_text(text)


def _drain(q: DiskQueue) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(100):
        taken = q.take(1000)
        if not taken:
            return out
        out += taken
    raise AssertionError("the queue never ran dry")


def _recovery_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "recovery:" in r.getMessage()]


@pytest.mark.parametrize(
    "metadata",
    [
        "3\n0,0\n9223372036854775808,0\n",  # beyond int64
        "99999999999999999999999999\n0,0\n2,0\n",
        "3\n-1,0\n2,0\n",  # negative positions and file numbers
        "3\n0,-5\n2,0\n",
        "garbage",
    ],
)
def test_metadata_no_queue_can_have_reads_every_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, metadata: str
) -> None:
    frames = _segments(tmp_path, {0: [0, 1], 1: [2]})
    _meta(tmp_path, metadata)
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        q = _queue(tmp_path)
    assert q.depth == 3
    assert _drain(q) == frames
    lines = _recovery_lines(caplog)
    assert len(lines) == 1 and "reading every segment on disk (000000-000001)" in lines[0]
    assert caplog.records[0].levelno == logging.ERROR
    q.put(_frame(9))  # writes go after the last segment
    assert (tmp_path / f"{NAME}.diskqueue.000002.dat").exists()
    assert _drain(q) == [_frame(9)]
    q.close()


def test_read_past_write_reads_every_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frames = _segments(tmp_path, {4: [0], 5: [1, 2]})
    _meta(tmp_path, "1\n9,0\n5,10\n")
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        q = _queue(tmp_path)
    assert _drain(q) == frames
    assert "read position 9,0 is past write position 5,10" in _recovery_lines(caplog)[0]
    q.close()


def test_write_file_far_ahead_of_read_file_is_not_walked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The fuzzer's finding: ``5\\n0,0\\n100000000,0\\n`` made nsqd try 100 million missing
    segments one at a time, logging a line for each."""
    frames = _segments(tmp_path, {0: [0, 1], 1: [2], 2: [3]})
    _meta(tmp_path, "5\n0,0\n100000000,0\n")
    fs = CountingFS()
    with caplog.at_level(logging.INFO, "trionsq.diskqueue"):
        q = _queue(tmp_path, fs)
        assert q.depth == 4  # counted, as segments are missing between read and write
        assert _drain(q) == frames
    assert fs.opens < 10
    # (besides go-diskqueue's one "readOne() opened" line per segment read)
    lines = [r.getMessage() for r in caplog.records if "() opened " not in r.getMessage()]
    assert len(lines) <= 3, lines
    assert "segments missing between read file 0 and write file 100000000" in caplog.text
    q.put(_frame(7))
    assert (tmp_path / f"{NAME}.diskqueue.100000000.dat").exists()
    assert _drain(q) == [_frame(7)]
    q.sync_now()
    # the finished segments were deleted, without trying the numbers between
    assert sorted(p.name for p in tmp_path.glob("*.dat")) == [
        f"{NAME}.diskqueue.100000000.dat",
        f"{NAME}.diskqueue.meta.dat",
    ]
    assert fs.opens < 20
    q.close()


def test_missing_read_file_jumps_to_the_next_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frames = _segments(tmp_path, {70000: [0], 70001: [1]})
    _meta(tmp_path, f"2\n3,0\n70001,{len(_record(_frame(1)))}\n")
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        q = _queue(tmp_path)
    assert "read file 3 is missing, reading from 70000" in _recovery_lines(caplog)[0]
    assert _drain(q) == frames
    q.close()


def test_segment_missing_between_read_and_write_is_skipped_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frames = _segments(tmp_path, {0: [0], 2: [2]})
    _meta(tmp_path, f"3\n0,0\n2,{len(_record(_frame(2)))}\n")
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        q = _queue(tmp_path)
        assert q.depth == 2  # recounted: the metadata's 3 counts the missing segment's record
        assert _drain(q) == frames
    assert "segment 000001 missing, reading on at 000002" in caplog.text
    q.close()


def test_read_position_beyond_its_file_rereads_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frames = _segments(tmp_path, {0: [0, 1], 1: [2]})
    _meta(tmp_path, f"3\n0,99999\n1,{len(_record(_frame(2)))}\n")
    with caplog.at_level(logging.WARNING, "trionsq.diskqueue"):
        q = _queue(tmp_path)
    assert "read position 99999 is beyond the" in _recovery_lines(caplog)[0]
    assert _drain(q) == frames  # at least once: nothing readable is lost
    q.close()


@pytest.mark.parametrize("depth", ["0", "-4", "1"])
def test_wrong_depth_does_not_leave_messages_unread(tmp_path: Path, depth: str) -> None:
    frames = _segments(tmp_path, {0: [0, 1, 2]})
    end = 3 * len(_record(_frame(0)))
    _meta(tmp_path, f"{depth}\n0,0\n0,{end}\n")
    q = _queue(tmp_path)
    assert q.depth >= 1
    assert _drain(q) == frames
    assert q.depth == 0
    q.close()


def test_recover_touches_only_its_own_files_and_reports_nothing_when_sound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frames = _segments(tmp_path, {0: [0, 1]})
    _meta(tmp_path, f"2\n0,0\n0,{(2 * len(_record(frames[0])))}\n")
    (tmp_path / "other.diskqueue.000000.dat").write_bytes(b"junk")
    with caplog.at_level(logging.DEBUG, "trionsq.diskqueue"):
        recovered = recover(
            LocalFileSystem(), NAME, str(tmp_path), min_msg_size=MIN, max_msg_size=MAX
        )
    assert recovered.notes == [] and caplog.records == []
    assert recovered.meta.depth == 2 and recovered.segments == [0]
