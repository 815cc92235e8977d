"""go-diskqueue's on-disk format, byte for byte (docs/protocol.md §7): file names, record framing,
the metadata text, atomic rewrites and trionsq's deferred side file; directories written by hand the
way Go nsqd writes them open in trionsq, and what trionsq writes reads back with an independent
reader that follows §7 only."""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
from pathlib import Path

import pytest

from trionsq.diskqueue import DiskQueue
from trionsq.diskqueue.files import (
    Metadata,
    MetadataError,
    data_file_name,
    deferred_file_name,
    encode_deferred,
    metadata_file_name,
    parse_metadata,
    read_deferred,
    read_metadata,
    write_file_atomically,
)
from trionsq.diskqueue.fs import LOCAL, LocalFileSystem
from trionsq.protocol.message import encode_message, encode_message_frame

MIN = 26
MAX = 26 + 1024


def _id(n: int) -> bytes:
    return b"%016x" % n


def _frame(n: int, body: bytes | None = None) -> bytes:
    return encode_message_frame(
        _id(n), 1_700_000_000_000_000_000 + n, n % 7 + 1, body or b"msg-%d" % n
    )


def _payload(frame: bytes) -> bytes:
    return frame[8:]


def _record(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _queue(path: Path, name: str = "t", **kwargs: object) -> DiskQueue:
    options: dict[str, object] = {
        "max_bytes_per_file": 1 << 20,
        "min_msg_size": MIN,
        "max_msg_size": MAX,
        "sync_every": 1 << 30,
    }
    options.update(kwargs)
    return DiskQueue(name, str(path), **options)  # type: ignore[arg-type]


def _read_go_dir(path: Path, name: str) -> tuple[Metadata, list[bytes]]:
    """An independent reader following docs/protocol.md §7 only: parse the metadata text, then read
    ``[4-byte BE length][payload]`` records from readFileNum,readPos up to writeFileNum,writePos,
    a finished file ending at its size."""
    text = (path / f"{name}.diskqueue.meta.dat").read_text()
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 4, text
    depth = int(lines[0])
    read_file, read_pos = (int(x) for x in lines[1].split(","))
    write_file, write_pos = (int(x) for x in lines[2].split(","))
    payloads: list[bytes] = []
    file_num, pos = read_file, read_pos
    while (file_num, pos) < (write_file, write_pos):
        data = (path / f"{name}.diskqueue.{file_num:06d}.dat").read_bytes()
        end = write_pos if file_num == write_file else len(data)
        while pos < end:
            (length,) = struct.unpack(">I", data[pos : pos + 4])
            payloads.append(data[pos + 4 : pos + 4 + length])
            pos += 4 + length
        assert pos == end
        file_num, pos = file_num + 1, 0
    return Metadata(depth, read_file, read_pos, write_file, write_pos), payloads


# --- names -------------------------------------------------------------------------------


def test_file_names_follow_go(tmp_path: Path) -> None:
    base = str(tmp_path)
    assert data_file_name(base, "t", 0) == os.path.join(base, "t.diskqueue.000000.dat")
    assert data_file_name(base, "t:c", 42) == os.path.join(base, "t:c.diskqueue.000042.dat")
    assert data_file_name(base, "t", 999999) == os.path.join(base, "t.diskqueue.999999.dat")
    # %06d grows beyond six digits
    assert data_file_name(base, "t", 1234567) == os.path.join(base, "t.diskqueue.1234567.dat")
    assert metadata_file_name(base, "t:c") == os.path.join(base, "t:c.diskqueue.meta.dat")
    assert deferred_file_name(base, "t") == os.path.join(base, "t.diskqueue.deferred.dat")


# --- metadata text -----------------------------------------------------------------------


def test_metadata_encode_is_go_text() -> None:
    assert Metadata(7, 1, 2, 3, 4).encode() == b"7\n1,2\n3,4\n"
    assert Metadata().encode() == b"0\n0,0\n0,0\n"
    assert Metadata(-1, 0, 10, 12, 123456789).encode() == b"-1\n0,10\n12,123456789\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"7\n1,2\n3,4\n", Metadata(7, 1, 2, 3, 4)),
        (b"0\n0,0\n0,0\n", Metadata(0, 0, 0, 0, 0)),
        (b"-3\n0,0\n5,100\n", Metadata(-3, 0, 0, 5, 100)),
        (b"12345678901\n10,2\n11,3\ntrailing", Metadata(12345678901, 10, 2, 11, 3)),
    ],
)
def test_parse_metadata(text: bytes, expected: Metadata) -> None:
    assert parse_metadata(text) == expected


@pytest.mark.parametrize(
    "text", [b"", b"7\n1,2\n3,4", b"7\n1 2\n3,4\n", b"x\n1,2\n3,4\n", b"7\n1,2\n", b"1,2\n3,4\n"]
)
def test_parse_metadata_rejects_other_text(text: bytes) -> None:
    with pytest.raises(MetadataError):
        parse_metadata(text)


@pytest.mark.parametrize(
    "text",
    [
        b"7\n1,2\n3,9223372036854775808\n",  # beyond int64
        b"99999999999999999999999\n0,0\n0,0\n",
        b"7\n-1,2\n3,4\n",  # negative positions and file numbers
        b"7\n1,-2\n3,4\n",
        b"7\n1,2\n3,-4\n",
    ],
)
def test_parse_metadata_rejects_values_no_queue_has(text: bytes) -> None:
    with pytest.raises(MetadataError):
        parse_metadata(text)


def test_parse_metadata_takes_go_s_negative_depth() -> None:
    assert parse_metadata(b"-3\n1,2\n3,4\n") == Metadata(-3, 1, 2, 3, 4)


def test_read_metadata_missing_file_is_none(tmp_path: Path) -> None:
    assert read_metadata(LOCAL, str(tmp_path / "nope.diskqueue.meta.dat")) is None
    (tmp_path / "m").write_bytes(b"3\n0,8\n1,16\n")
    assert read_metadata(LOCAL, str(tmp_path / "m")) == Metadata(3, 0, 8, 1, 16)


# --- atomic writes -----------------------------------------------------------------------


def test_write_file_atomically_replaces_and_leaves_no_tmp(tmp_path: Path) -> None:
    target = tmp_path / "x.diskqueue.meta.dat"
    target.write_bytes(b"old contents that are longer")
    write_file_atomically(LOCAL, str(target), b"new")
    assert target.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["x.diskqueue.meta.dat"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_write_file_atomically_failure_keeps_old_file(tmp_path: Path) -> None:
    target = tmp_path / "m"
    target.write_bytes(b"old")
    fs = LocalFileSystem()

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "fsync failed")

    fs.fsync = failing_fsync  # type: ignore[method-assign]
    with pytest.raises(OSError) as info:
        write_file_atomically(fs, str(target), b"new")
    assert info.value.errno == errno.EIO
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["m"]


# --- deferred side file ------------------------------------------------------------------


def test_deferred_round_trip(tmp_path: Path) -> None:
    due = {_id(1): 1_700_000_000_123_456_789, _id(2): 5}
    encoded = encode_deferred(due)
    assert json.loads(encoded) == {
        "version": 1,
        "deferred": {"0000000000000001": 1_700_000_000_123_456_789, "0000000000000002": 5},
    }
    path = tmp_path / "d"
    path.write_bytes(encoded)
    assert read_deferred(LOCAL, str(path)) == due
    assert read_deferred(LOCAL, str(tmp_path / "missing")) == {}


def test_read_deferred_skips_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "d"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "deferred": {
                    "0000000000000001": 10,
                    "short": 11,
                    "000000000000000x": "12",
                    "000000000000000\u00e9": 13,
                    "0000000000000004": 14.5,
                },
            }
        )
    )
    assert read_deferred(LOCAL, str(path)) == {_id(1): 10}


@pytest.mark.parametrize("text", [b"not json", b"[]", b'{"version":1}', b'{"deferred":[1]}'])
def test_read_deferred_rejects_other_files(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "d"
    path.write_bytes(text)
    with pytest.raises(ValueError):
        read_deferred(LOCAL, str(path))


# --- what trionsq writes -----------------------------------------------------------------


def test_data_file_bytes_are_go_records(tmp_path: Path) -> None:
    frames = [_frame(n, b"x" * n) for n in range(5)]
    q = _queue(tmp_path)
    q.put(frames[0])
    q.put_many(frames[1:])
    expected = b"".join(_record(_payload(f)) for f in frames)
    data_file = tmp_path / "t.diskqueue.000000.dat"
    assert data_file.read_bytes() == expected
    # the record payload is exactly the §1.5 message encoding
    assert _payload(frames[3]) == encode_message(_id(3), 1_700_000_000_000_000_003, 4, b"xxx")
    assert stat.S_IMODE(data_file.stat().st_mode) == 0o600
    q.sync_now()
    assert (tmp_path / "t.diskqueue.meta.dat").read_bytes() == (b"5\n0,0\n0,%d\n" % len(expected))
    # beside the segment, trionsq's checksum side file (which Go ignores)
    assert sorted(os.listdir(tmp_path)) == [
        "t.diskqueue.000000.crc",
        "t.diskqueue.000000.dat",
        "t.diskqueue.meta.dat",
    ]
    q.close()


def test_metadata_text_after_reads_and_writes(tmp_path: Path) -> None:
    frames = [_frame(n) for n in range(4)]
    sizes = [4 + len(_payload(f)) for f in frames]
    q = _queue(tmp_path, "t:c")
    q.put_many(frames)
    assert q.take(1) == frames[:1]
    q.sync_now()
    meta = (tmp_path / "t:c.diskqueue.meta.dat").read_text()
    assert meta == f"3\n0,{sizes[0]}\n0,{sum(sizes)}\n"
    q.close()
    assert (tmp_path / "t:c.diskqueue.meta.dat").read_text() == meta


def test_independent_reader_parses_what_trionsq_wrote(tmp_path: Path) -> None:
    frames = [_frame(n, b"%d" % n * (n + 1)) for n in range(30)]
    q = _queue(tmp_path, max_bytes_per_file=200)
    q.put_many(frames[:20])
    for frame in frames[20:]:
        q.put(frame)
    assert q.take(3) == frames[:3]
    q.close()
    meta, payloads = _read_go_dir(tmp_path, "t")
    assert meta.depth == 27
    assert meta.write_file > 1
    assert payloads == [_payload(f) for f in frames[3:]]


def test_go_written_directory_opens_and_reads_in_order(tmp_path: Path) -> None:
    frames = [_frame(n, b"body %d" % n) for n in range(7)]
    records = [_record(_payload(f)) for f in frames]
    # Go wrote records 0-2 to file 4, 3-5 to file 5 and 6 to file 6; a consumer had read
    # record 0; metadata: depth 6, read 4,len(rec0), write 6,len(rec6).
    (tmp_path / "g.diskqueue.000004.dat").write_bytes(b"".join(records[0:3]))
    (tmp_path / "g.diskqueue.000005.dat").write_bytes(b"".join(records[3:6]))
    (tmp_path / "g.diskqueue.000006.dat").write_bytes(records[6])
    (tmp_path / "g.diskqueue.meta.dat").write_text(f"6\n4,{len(records[0])}\n6,{len(records[6])}\n")
    q = _queue(tmp_path, "g")
    assert q.depth == 6
    assert q.take(2) == frames[1:3]
    assert q.depth == 4
    assert q.take(100) == frames[3:]
    assert q.depth == 0
    # writes continue in Go's write file at its write position
    extra = _frame(99)
    q.put(extra)
    assert (tmp_path / "g.diskqueue.000006.dat").read_bytes() == records[6] + _record(
        _payload(extra)
    )
    assert q.take(5) == [extra]
    q.sync_now()
    end = len(records[6]) + len(_record(_payload(extra)))
    assert (tmp_path / "g.diskqueue.meta.dat").read_text() == f"0\n6,{end}\n6,{end}\n"
    # the finished files 4 and 5 are gone after the sync; Go's write file got a side file for
    # the records trionsq appended
    assert sorted(os.listdir(tmp_path)) == [
        "g.diskqueue.000006.crc",
        "g.diskqueue.000006.dat",
        "g.diskqueue.meta.dat",
    ]
    q.close()


def test_go_written_metadata_is_read_by_go_scanf_rules(tmp_path: Path) -> None:
    """A metadata file with positions at a record boundary inside the file is honoured."""
    frames = [_frame(n) for n in range(3)]
    records = [_record(_payload(f)) for f in frames]
    (tmp_path / "g.diskqueue.000000.dat").write_bytes(b"".join(records))
    (tmp_path / "g.diskqueue.meta.dat").write_text(
        f"1\n0,{len(records[0]) + len(records[1])}\n0,{sum(map(len, records))}\n"
    )
    q = _queue(tmp_path, "g")
    assert q.depth == 1
    assert q.take(10) == frames[2:]
    q.close()


def test_round_trip_through_reopen_is_identity(tmp_path: Path) -> None:
    frames = [_frame(n, bytes(range(256)) * (n % 4)) for n in range(50)]
    q = _queue(tmp_path, max_bytes_per_file=3000)
    q.put_many(frames)
    q.close()
    q2 = _queue(tmp_path, max_bytes_per_file=3000)
    assert q2.depth == 50
    taken: list[bytes] = []
    while batch := q2.take(7):
        taken.extend(batch)
        assert len(taken) <= 50
    assert taken == frames
    q2.close()


@pytest.mark.parametrize("track", [False, True])
def test_metadata_never_points_at_the_end_of_a_finished_file(tmp_path: Path, track: bool) -> None:
    """Go's reader moves to the next file as it reads a finished file's last record, so its
    metadata never says readPos == size of a finished file; Go nsqd given such metadata reads
    EOF there and renames the file .bad (go-diskqueue #42). What trionsq persists after taking
    exactly a finished file's records must be the next file at 0, and the file deleted."""
    frames = [_frame(n) for n in range(5)]
    records = [_record(_payload(f)) for f in frames]
    q = _queue(tmp_path, max_bytes_per_file=3 * len(records[0]), track_consumption=track)
    q.put_many(frames)  # file 0: 0-2, file 1: 3-4
    assert q.take(3) == frames[:3]
    for f in frames[:3]:
        q.release(f[18:34])
    q.sync_now()
    meta, payloads = _read_go_dir(tmp_path, "t")
    assert meta == Metadata(2, 1, 0, 1, 2 * len(records[0]))
    assert payloads == [_payload(f) for f in frames[3:]]
    assert sorted(os.listdir(tmp_path)) == [
        "t.diskqueue.000001.crc",
        "t.diskqueue.000001.dat",
        "t.diskqueue.meta.dat",
    ]
    q.close()
