"""`DiskQueue.peek` / `QueuePeek.read`: the unread records, in the order `take` hands them
out, across segments, bounded by count and bytes, skipping what the reader skips, and without
changing anything of the queue (positions, depth, what is owed, what a sync persists)."""

from __future__ import annotations

from pathlib import Path

from trionsq.diskqueue import DiskQueue
from trionsq.protocol.message import encode_message_frame

MIN = 26
MAX = 26 + 1024
NAME = "t"


def _id(n: int) -> bytes:
    return b"%016x" % n


def _frame(n: int, body_size: int = 10) -> bytes:
    body = (b"%d-" % n * body_size)[:body_size]
    return encode_message_frame(_id(n), 1_700_000_000_000_000_000 + n, n % 3, body)


def _queue(path: Path, **kwargs: object) -> DiskQueue:
    options: dict[str, object] = {
        "max_bytes_per_file": 200,  # a few records per segment
        "min_msg_size": MIN,
        "max_msg_size": MAX,
        "sync_every": 1 << 30,
    }
    options.update(kwargs)
    return DiskQueue(NAME, str(path), **options)  # type: ignore[arg-type]


def _state(q: DiskQueue) -> tuple[object, ...]:
    return (q.depth, q._read_file, q._read_pos, q._write_file, q._write_pos, dict(q.owed))


def test_peek_reads_what_take_would_hand_out_next_across_segments(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    frames = [_frame(i, 10 + i) for i in range(20)]
    q.put_many(frames)
    assert q._write_file > 2  # the records span several segments
    assert q.take(3) == frames[:3]  # the reader stands in the middle of a segment
    before = _state(q)
    assert q.peek().read(100, 1 << 20) == frames[3:]
    assert q.peek().read(4, 1 << 20) == frames[3:7]
    assert _state(q) == before
    assert q.take(100) == frames[3:]  # delivery is unchanged
    assert q.peek().read(10, 1 << 20) == []


def test_peek_is_bounded_by_bytes_but_shows_at_least_one(tmp_path: Path) -> None:
    q = _queue(tmp_path, max_bytes_per_file=1 << 20)
    frames = [_frame(i, 500) for i in range(10)]
    q.put_many(frames)
    # Stops once the frames add up to the limit.
    assert q.peek().read(10, 3 * len(frames[0])) == frames[:3]
    assert q.peek().read(10, 3 * len(frames[0]) + 1) == frames[:4]
    assert q.peek().read(10, 1) == frames[:1]


def test_peek_skips_what_the_reader_skips(tmp_path: Path) -> None:
    # A tracking queue skips a second copy of a message it handed out and that is still owed
    # (a crash made the writer repeat it), and a message its deferred log holds: so does peek.
    q = _queue(tmp_path, track_consumption=True)
    frames = [_frame(i) for i in range(6)]
    held = _frame(99)
    q.put_many([*frames, frames[0]])
    q.hold_deferred([(held, 1 << 62)])
    q.put_many([held, _frame(7)])
    assert q.take(2) == frames[:2]
    owed = dict(q.owed)
    peeked = q.peek().read(100, 1 << 20)
    assert peeked == [*frames[2:], _frame(7)]
    assert q.owed == owed
    assert q.take(100) == peeked


def test_peek_stops_at_a_segment_deleted_meanwhile_and_at_a_corrupt_record(
    tmp_path: Path,
) -> None:
    q = _queue(tmp_path)
    frames = [_frame(i) for i in range(20)]  # 40-byte records: 5 per 200-byte segment
    q.put_many(frames)
    view = q.peek()
    # A corrupt length at the start of the second segment: its reading ends there (the
    # reader would move it aside), the next segment's goes on.
    seg1 = tmp_path / f"{NAME}.diskqueue.000001.dat"
    data = bytearray(seg1.read_bytes())
    data[0:4] = (MAX + 1).to_bytes(4, "big")
    seg1.write_bytes(bytes(data))
    assert view.read(100, 1 << 20) == frames[:5] + frames[10:]
    # The first segment deleted (consumed meanwhile): the read starts with the next.
    (tmp_path / f"{NAME}.diskqueue.000000.dat").unlink()
    assert view.read(100, 1 << 20) == frames[10:]
