"""Moving records between disk queues undecoded (`take_records` / `put_records`), as the topic
pump does with --mem-queue-size=0: same bytes, Go's roll rule, reads across chunks and files,
corrupt segments, and the decoding fallback `frames_from_records`."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from trionsq.diskqueue import DiskQueue, checksums, frames_from_records
from trionsq.diskqueue import queue as dqqueue
from trionsq.protocol.message import encode_message_frame


def _frame(n: int, size: int = 20) -> bytes:
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 1, b"%0*d" % (size, n))


def _queue(path: Path, name: str, max_bytes: int = 1 << 20) -> DiskQueue:
    return DiskQueue(
        name,
        str(path),
        max_bytes_per_file=max_bytes,
        min_msg_size=26,
        max_msg_size=26 + 4096,
        sync_every=1 << 30,
    )


def _segments(path: Path, name: str) -> list[bytes]:
    return [
        p.read_bytes() for p in sorted(path.glob(f"{name}.diskqueue.*.dat")) if "meta" not in p.name
    ]


def test_records_move_byte_for_byte_and_decode_to_the_same_frames(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(50)]
    source, target = _queue(tmp_path, "t"), _queue(tmp_path, "t:c")
    source.put_many(frames)
    pieces, count = source.take_records(30)
    assert count == 30 and source.depth == 20
    assert frames_from_records(pieces) == frames[:30]
    target.put_records(pieces, count)
    pieces, count = source.take_records(100)
    assert (count, source.depth, source.take_records(5)) == (20, 0, ([], 0))
    target.put_records(pieces, count)
    assert target.depth == 50
    assert _segments(tmp_path, "t:c") == [
        b"".join(struct.pack(">I", len(f) - 8) + f[8:] for f in frames)
    ]
    assert target.take(100) == frames


def test_put_records_rolls_segments_where_go_would(tmp_path: Path) -> None:
    frames = [_frame(n, size=10 + n % 7) for n in range(40)]
    by_frames, by_records = (
        _queue(tmp_path, "a", max_bytes=300),
        _queue(tmp_path, "b", max_bytes=300),
    )
    by_frames.put_many(frames)
    source = _queue(tmp_path, "src")
    source.put_many(frames)
    pieces, count = source.take_records(40)
    by_records.put_records(pieces, count)
    assert len(_segments(tmp_path, "a")) > 3
    assert _segments(tmp_path, "b") == _segments(tmp_path, "a")
    assert by_records.take(100) == frames


def test_take_records_across_read_chunks_and_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dqqueue, "READ_CHUNK", 100)  # a few records per read
    frames = [_frame(n, size=30 + n % 11) for n in range(60)]
    source = _queue(tmp_path, "t", max_bytes=700)
    source.put_many(frames)
    taken: list[bytes] = []
    while True:
        pieces, count = source.take_records(7)
        if not count:
            break
        decoded = frames_from_records(pieces)
        assert len(decoded) == count <= 7
        taken += decoded
    assert taken == frames and source.depth == 0


def test_a_corrupt_segment_is_set_aside_and_the_records_after_it_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without side files (segments as Go writes them), go-diskqueue's handling."""
    monkeypatch.setattr(checksums, "ENABLED", False)
    frames = [_frame(n) for n in range(12)]
    source = _queue(tmp_path, "t", max_bytes=200)
    source.put_many(frames)
    first = tmp_path / "t.diskqueue.000000.dat"
    per_file = len(first.read_bytes()) // (4 + len(frames[0]) - 8)
    data = bytearray(first.read_bytes())
    data[0:4] = struct.pack(">I", 5)  # below the minimum record size
    first.write_bytes(bytes(data))
    pieces, count = source.take_records(100)
    assert (tmp_path / "t.diskqueue.000000.dat.bad").exists()
    assert frames_from_records(pieces) == frames[per_file:]
    assert count == len(frames) - per_file


def test_a_record_failing_its_checksum_is_set_aside_and_the_others_move_with_their_slots(
    tmp_path: Path,
) -> None:
    """With side files, only the damaged record is set aside; the others move undecoded with
    their checksum slots, so the target's side file describes them without computing them
    again, and the target reads them back checked."""
    frames = [_frame(n) for n in range(12)]
    source, target = _queue(tmp_path, "t", max_bytes=200), _queue(tmp_path, "t:c")
    source.put_many(frames)
    source.sync_now()
    first = tmp_path / "t.diskqueue.000000.dat"
    data = bytearray(first.read_bytes())
    data[20] ^= 0x10  # a bit of record 0's payload
    first.write_bytes(bytes(data))
    pieces, count = source.take_records(100)
    assert frames_from_records(pieces) == frames[1:]
    assert count == len(frames) - 1
    assert source.corrupt_records == 1
    assert getattr(pieces, "units", None) is not None
    assert len(pieces.units) == checksums.UNIT * count  # type: ignore[attr-defined]
    target.put_records(pieces, count)
    target.close()
    target = _queue(tmp_path, "t:c")
    got = target.take(100)
    assert got == frames[1:]
    assert target.corrupt_records == 0
    target.close()
