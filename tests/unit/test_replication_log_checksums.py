"""The replication log's checksums (trionsq/nsqd/replication_log.py, issue 30): a flipped bit
in any byte of a record drops that record alone (moved aside at load, skipped by a scan,
counted, the log marked damaged) and the records after it load; a torn tail is still cut off;
a log and ID files written before the versions load and are converted; a bad block of a FIN
or emptied file is skipped; a bad MSGS, BODIES or PUB_FORWARD blob is refused; members of
another replication version are refused with one clear line. Every test runs with the log's
loops in Python and compiled (the fixture of test_replication_log.py)."""

from __future__ import annotations

import logging
import os
import struct
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_replication_log import ids_of, log_loops, records  # noqa: F401
from trionsq.nsqd.replication import log as log_module
from trionsq.nsqd.replication import roles
from trionsq.nsqd.replication import topic as rt
from trionsq.nsqd.replication import wire as wire
from trionsq.nsqd.replication.log import (
    CORRUPT_SUFFIX,
    ID_BLOCK_MAX,
    ID_HEADER,
    LOG_HEADER,
    LOG_START,
    ReplicationLog,
    count_records,
    decode_records,
    encode_records,
    read_id_file,
    write_id_block,
)
from trionsq.protocol.message import encode_new_frames, framed_id

TOPIC = "rt"
Records = list[tuple[int, bytes]]


def write_log(path: Path, recs: Records) -> tuple[str, list[int]]:
    """A log of `recs` (closed); its path and where each record starts."""
    log = ReplicationLog(str(path), TOPIC)
    log.append(recs)
    log.close()
    starts, pos = [], LOG_START
    for rec in recs:
        starts.append(pos)
        pos += len(encode_records([rec]))
    assert pos == os.path.getsize(log.path)
    return log.path, starts


def flip(path: str, offset: int, mask: int = 1) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def corrupt_files(path: Path) -> list[str]:
    return sorted(name for name in os.listdir(path) if CORRUPT_SUFFIX in name)


def sample_records() -> Records:
    """Five records, one with a due time and one with a body long enough to hold another
    record's worth of bytes."""
    recs = records(0, 5, due=0)
    recs[1] = (1_800_000_000_000_000_000, recs[1][1])
    recs[3] = (0, encode_new_frames([b"%016x" % 3], 1, [b"b" * 300])[0])
    return recs


# -- the log -----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 2, 3, 4])  # the first, a middle, the long, the last
def test_a_flipped_bit_in_any_byte_of_a_record_drops_that_record_alone(
    tmp_path: Path, which: int, caplog: pytest.LogCaptureFixture
) -> None:
    recs = sample_records()
    size = len(encode_records([recs[which]]))
    # Every byte of the record: length, due time, frame size and type, timestamp, attempts,
    # ID, body, CRC (a few bits of each, in turn).
    for byte in range(size):
        directory = tmp_path / str(byte)
        directory.mkdir()
        path, starts = write_log(directory, recs)
        flip(path, starts[which] + byte, 1 << (byte % 8))
        caplog.clear()
        with caplog.at_level(logging.ERROR, "trionsq.nsqd"):
            log = ReplicationLog(str(directory), TOPIC)
        kept = recs[:which] + recs[which + 1 :]
        assert list(log.records()) == kept, byte
        assert len(log) == len(kept)
        assert log.corrupt_records == 1 and log.damaged
        assert os.path.getsize(path) == LOG_START + len(encode_records(kept))
        (name,) = corrupt_files(directory)
        assert name.startswith(TOPIC + ".replication.log.corrupt-")
        assert (directory / name).stat().st_size == size  # the record's bytes, aside
        lines = [r.getMessage() for r in caplog.records]
        assert lines == [
            f"REPLICATION({TOPIC}): {size} corrupt bytes at offset {starts[which]} of the log "
            f"moved to {directory / name}"
        ]
        log.append(records(10, 1))  # appends go on after the rewritten records
        log.close()
        again = ReplicationLog(str(directory), TOPIC)
        assert list(again.records()) == kept + records(10, 1)
        assert again.corrupt_records == 0 and not again.damaged
        again.close()
        assert not [n for n in os.listdir(directory) if n.endswith(".tmp")]


def test_runs_of_bad_bytes_in_several_places_are_each_moved_aside(tmp_path: Path) -> None:
    recs = records(0, 12)
    path, starts = write_log(tmp_path, recs)
    flip(path, starts[1] + 2)  # the length
    flip(path, starts[5] + 40, 0xFF)  # the ID
    flip(path, starts[6] + 50)  # the next record's body too: one run of two records
    with open(path, "r+b") as f:  # and a record overwritten with zeros
        f.seek(starts[9])
        f.write(bytes(starts[10] - starts[9]))
    log = ReplicationLog(str(tmp_path), TOPIC)
    kept = [r for i, r in enumerate(recs) if i not in (1, 5, 6, 9)]
    assert list(log.records()) == kept
    assert log.corrupt_records == 3 and log.damaged
    (name,) = corrupt_files(tmp_path)
    assert (tmp_path / name).stat().st_size == (
        (starts[2] - starts[1]) + (starts[7] - starts[5]) + (starts[10] - starts[9])
    )
    log.close()


def test_a_torn_tail_is_cut_off_and_not_counted(tmp_path: Path) -> None:
    recs = records(0, 4)
    path, _ = write_log(tmp_path, recs)
    size = os.path.getsize(path)
    for tail in (
        encode_records(records(4, 1))[:-9],  # a record cut short
        encode_records(records(4, 1))[:7],  # less than its head
        bytes(300),  # zeros (a power cut: the size grew, the data did not reach the disk)
    ):
        with open(path, "ab") as f:
            f.write(tail)
        log = ReplicationLog(str(tmp_path), TOPIC)
        assert list(log.records()) == recs
        assert log.corrupt_records == 0 and not log.damaged
        assert log.torn_bytes == len(tail)
        assert os.path.getsize(path) == size and not corrupt_files(tmp_path)
        log.close()


def test_a_corrupt_last_record_is_not_taken_for_a_torn_one(tmp_path: Path) -> None:
    """A flipped length in the last record runs past the end like a torn record's, but does
    not agree with its frame's size: corrupt (counted, the log damaged), not torn."""
    recs = records(0, 4)
    path, starts = write_log(tmp_path, recs)
    flip(path, starts[3] + 2, 0x10)  # its length grows by 4 KiB: past the end
    log = ReplicationLog(str(tmp_path), TOPIC)
    assert list(log.records()) == recs[:3]
    assert log.corrupt_records == 1 and log.damaged and corrupt_files(tmp_path)
    log.close()


def test_a_flipped_bit_in_the_header_loses_nothing(tmp_path: Path) -> None:
    recs = records(0, 3)
    for bit in range(LOG_START * 8):
        directory = tmp_path / str(bit)
        directory.mkdir()
        path, _ = write_log(directory, recs)
        flip(path, bit // 8, 1 << (bit % 8))
        log = ReplicationLog(str(directory), TOPIC)
        assert list(log.records()) == recs, bit
        assert log.corrupt_records == 0
        with open(path, "rb") as f:
            assert f.read(LOG_START) == LOG_HEADER  # rewritten
        log.close()
    # The whole header overwritten, and the first record damaged too: still not taken for a
    # log of the older format (its records would be misread): the first record alone lost.
    both = tmp_path / "both"
    both.mkdir()
    path, starts = write_log(both, recs)
    with open(path, "r+b") as f:
        f.write(b"\x00" * LOG_START)
    flip(path, starts[0] + 40)
    log = ReplicationLog(str(both), TOPIC)
    assert list(log.records()) == recs[1:] and log.corrupt_records == 1
    log.close()
    # An empty log (the header alone) with a damaged header is an empty log.
    empty = tmp_path / "empty"
    empty.mkdir()
    ReplicationLog(str(empty), TOPIC).close()
    flip(str(empty / (TOPIC + ".replication.log")), 7, 4)
    log = ReplicationLog(str(empty), TOPIC)
    assert len(log) == 0 and log.bytes == LOG_START
    log.close()


def test_a_log_of_a_later_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / (TOPIC + ".replication.log")
    path.write_bytes(LOG_HEADER[:-1] + b"\x02" + b"\x00" * 100)
    with pytest.raises(ValueError, match="format version 2"):
        ReplicationLog(str(tmp_path), TOPIC)


def test_a_scan_skips_a_record_corrupted_after_load(tmp_path: Path) -> None:
    """Corruption met by a scan (a bit flipped on disk while the log is open): never
    returned by records, read, read_lacking, records_from, ids or a catch-up's chunk,
    counted once, the log damaged; the next load moves it aside."""
    recs = records(0, 8)
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(recs)
    starts = [LOG_START + i * len(encode_records(recs[:1])) for i in range(8)]
    flip(log.path, starts[4] + 50)  # its body
    kept = recs[:4] + recs[5:]
    assert list(log.records()) == kept
    assert log.ids() == ids_of(kept)
    assert log.read(ids_of(recs)) == kept
    assert log.read_lacking(ids_of(recs[:2])) == kept[2:]
    snapshot = log.snapshot()
    got, offset = [], 0
    while offset < snapshot.size:
        chunk, offset = snapshot.records_from(offset, 1)
        got += chunk
    assert got == kept
    data, after = snapshot.chunk(starts[4], snapshot.size, 10_000)
    assert data == b"" and after == starts[5]  # skipped, with where the next one starts
    held, first = snapshot.ids_and_first_lacking(ids_of(recs[:5]))
    assert held == ids_of(kept) and first == starts[5]
    snapshot.close()
    assert log.corrupt_records == 1 and log.damaged  # found by every scan, counted once
    log.append(records(8, 1))
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert list(again.records()) == kept + records(8, 1)
    assert again.corrupt_records == 1 and corrupt_files(tmp_path)
    again.close()


def test_a_compaction_leaves_a_corrupt_record_out(tmp_path: Path) -> None:
    count = log_module.COMPACT_MIN * 2 + 10
    recs = records(0, count)
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(recs)
    log.add_channel("c")
    log.finish("c", [framed_id(f) for _, f in recs[: log_module.COMPACT_MIN + 5]])
    bad = count - 3  # a live record
    flip(log.path, LOG_START + len(encode_records(recs[:bad])) + 50)
    assert log.compact_if_needed()
    live = [r for i, r in enumerate(recs) if i >= log_module.COMPACT_MIN + 5 and i != bad]
    assert list(log.records()) == live and len(log) == len(live)
    assert log.corrupt_records == 1 and log.damaged
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert list(again.records()) == live and again.corrupt_records == 0
    again.close()


def test_resynchronisation_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks smaller than a record: a corrupt length is skipped and the reader finds the
    next record in a later chunk."""
    monkeypatch.setattr(log_module, "SCAN_CHUNK", 40)
    recs = [(0, encode_new_frames([b"%016x" % i], 1, [b"x" * (i * 37)])[0]) for i in range(9)]
    path, starts = write_log(tmp_path, recs)
    flip(path, starts[2] + 1, 0x80)
    flip(path, starts[6] + 13)  # the frame's size
    log = ReplicationLog(str(tmp_path), TOPIC)
    assert list(log.records()) == [r for i, r in enumerate(recs) if i not in (2, 6)]
    assert log.corrupt_records == 2
    log.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bodies=st.lists(st.binary(min_size=0, max_size=80), min_size=1, max_size=12),
    flips=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
        min_size=1,
        max_size=6,
    ),
    at_load=st.booleans(),
)
def test_every_intact_record_is_read_and_no_corrupt_one(
    bodies: list[bytes], flips: list[tuple[int, int]], at_load: bool
) -> None:
    """Random bytes of the records changed: the records none of whose bytes changed are
    read (in order), no other, whether the load or a later scan meets them."""
    recs = [
        (i * 1000, encode_new_frames([b"%016x" % i], 1, [body])[0]) for i, body in enumerate(bodies)
    ]
    spans, pos = [], LOG_START
    for rec in recs:
        size = len(encode_records([rec]))
        spans.append((pos, pos + size))
        pos += size
    masks: dict[int, int] = {}
    for offset, mask in flips:
        at = LOG_START + offset % (pos - LOG_START)
        masks[at] = masks.get(at, 0) ^ mask
    hit = {at for at, mask in masks.items() if mask}  # a byte flipped back is intact
    corrupted = [any(start <= h < stop for h in hit) for start, stop in spans]
    intact = [rec for rec, bad in zip(recs, corrupted, strict=True) if not bad]
    with tempfile.TemporaryDirectory() as directory:
        log = ReplicationLog(directory, TOPIC)
        log.append(recs)
        if at_load:
            log.close()
        for at in hit:
            flip(log.path, at, masks[at])
        if at_load:
            log = ReplicationLog(directory, TOPIC)
        assert list(log.records()) == intact
        assert log.ids() == ids_of(intact)
        if any(corrupted[:-1]):
            assert log.damaged and log.corrupt_records >= 1
        assert log.corrupt_records <= sum(corrupted)
        log.close()
        again = ReplicationLog(directory, TOPIC)
        assert list(again.records()) == intact
        again.close()


# -- files written before the versions ---------------------------------------------------------


def old_records(recs: Records) -> bytes:
    """Records as main wrote them before the checksums: ``[length][due time][frame]``."""
    return b"".join(struct.pack(">IQ", len(frame) + 8, due) + frame for due, frame in recs)


def test_an_old_format_log_and_id_files_load_and_are_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_module, "SCAN_CHUNK", 300)  # records across chunks, one larger
    recs = sample_records() + records(5, 20)
    ids = [framed_id(f) for _, f in recs]
    log_path = tmp_path / (TOPIC + ".replication.log")
    log_path.write_bytes(old_records(recs) + old_records(records(99, 1))[:-5])  # a torn tail
    (tmp_path / f"{TOPIC}:a.replication.fin").write_bytes(b"".join(ids[:10]) + b"f" * 16)
    (tmp_path / f"{TOPIC}:b.replication.fin").write_bytes(b"".join(ids[5:12]) + ids[12][:7])
    (tmp_path / f"{TOPIC}:c.replication.fin").write_bytes(b"")
    (tmp_path / f"{TOPIC}.replication.emptied").write_bytes(b"".join(ids[20:22]))
    log = ReplicationLog(str(tmp_path), TOPIC)
    assert list(log.records()) == recs and len(log) == len(recs)
    assert log.finished["a"] == set(ids[:10])  # less the ID the log never held
    assert log.finished["b"] == set(ids[5:12])  # less the torn one
    assert log.finished["c"] == set()
    assert log.emptied == set(ids[20:22])
    assert log.corrupt_records == 0 and not log.damaged
    assert log_path.read_bytes() == LOG_HEADER + encode_records(recs)
    for name in ("a", "b"):
        assert (tmp_path / f"{TOPIC}:{name}.replication.fin").read_bytes()[:8] == ID_HEADER
    assert (tmp_path / f"{TOPIC}.replication.emptied").read_bytes()[:8] == ID_HEADER
    log.append(records(30, 2))
    log.finish("c", ids[:1])
    log.close()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert list(again.records()) == recs + records(30, 2)
    assert again.finished["c"] == set(ids[:1])
    assert again.finished["a"] == set(ids[:10]) and again.emptied == set(ids[20:22])
    again.close()


def test_a_conversion_cut_short_leaves_the_old_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = records(0, 5)
    log_path = tmp_path / (TOPIC + ".replication.log")
    log_path.write_bytes(old_records(recs))

    def crash(src: str, dst: str) -> None:
        raise OSError("crash before the rename")

    monkeypatch.setattr(log_module.os, "replace", crash)
    with pytest.raises(OSError):
        ReplicationLog(str(tmp_path), TOPIC)
    monkeypatch.undo()
    assert log_path.read_bytes() == old_records(recs)  # untouched
    log = ReplicationLog(str(tmp_path), TOPIC)
    assert list(log.records()) == recs
    log.close()


# -- FIN and emptied files ---------------------------------------------------------------------


def id_blocks(path: Path) -> list[tuple[int, int]]:
    """(start, stop) of each block of an ID file."""
    blob, out, pos = path.read_bytes(), [], len(ID_HEADER)
    while pos < len(blob):
        stop = pos + 8 + 16 * struct.unpack_from(">I", blob, pos)[0]
        out.append((pos, stop))
        pos = stop
    return out


@pytest.mark.parametrize("where", ["count", "crc", "id"])
def test_a_flipped_bit_in_a_fin_block_drops_that_block_alone(
    tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    recs = records(0, 9)
    ids = [framed_id(f) for _, f in recs]
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(recs)
    for batch in (ids[:3], ids[3:6], ids[6:8]):  # a block each
        log.finish("c", batch)
        log.write_fins()
    log.close()
    fin = tmp_path / f"{TOPIC}:c.replication.fin"
    blocks = id_blocks(fin)
    assert len(blocks) == 3
    offset = {"count": 2, "crc": 5, "id": 8 + 20}[where]
    flip(str(fin), blocks[1][0] + offset, 0x40)
    with caplog.at_level(logging.ERROR, "trionsq.nsqd"):
        again = ReplicationLog(str(tmp_path), TOPIC)
    assert again.finished["c"] == set(ids[:3] + ids[6:8])  # a lost FIN: a duplicate later
    assert again.corrupt_records == 1 and not again.damaged
    assert [r.getMessage() for r in caplog.records] == [
        f"REPLICATION: {blocks[1][1] - blocks[1][0]} corrupt bytes at offset {blocks[1][0]} "
        f"of {fin.name} skipped (the IDs in them are lost: duplicates after a failover, never "
        "a loss)"
    ]
    again.finish("c", ids[8:])
    again.close()
    final = ReplicationLog(str(tmp_path), TOPIC)  # rewritten without it: nothing to report
    assert final.finished["c"] == set(ids[:3] + ids[6:])
    assert final.corrupt_records == 0
    final.close()


def test_a_flipped_bit_in_the_emptied_file_and_a_torn_fin_block(tmp_path: Path) -> None:
    recs = records(0, 6)
    ids = [framed_id(f) for _, f in recs]
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(recs)
    log.add_channel("c")
    log.empty_topic(ids[:2])
    log.empty_topic(ids[2:4])
    log.finish("c", ids[4:5])
    log.write_fins()
    log.finish("c", ids[5:6])
    log.close()
    emptied = tmp_path / f"{TOPIC}.replication.emptied"
    flip(str(emptied), id_blocks(emptied)[0][0] + 30)
    fin = tmp_path / f"{TOPIC}:c.replication.fin"
    fin.write_bytes(fin.read_bytes()[:-3])  # the last write torn
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert again.emptied == set(ids[2:4])  # the first block lost: a new channel gets ids[:2]
    assert again.finished["c"] == set(ids[:5])  # (the emptied IDs are in its FIN file too)
    assert again.corrupt_records == 1  # the emptied block; a torn block is not counted
    again.finish("c", ids[5:6])
    again.close()
    final = ReplicationLog(str(tmp_path), TOPIC)
    assert final.finished["c"] == set(ids) and final.corrupt_records == 0
    final.close()


def test_id_files_blocks_header_and_repair(tmp_path: Path) -> None:
    path = tmp_path / "ids"
    many = [b"%016x" % i for i in range(ID_BLOCK_MAX + 5)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        write_id_block(fd, [])  # an empty file gets its header
        assert path.read_bytes() == ID_HEADER
        write_id_block(fd, many)  # two blocks in one write
        write_id_block(fd, [b"z" * 16])
        with pytest.raises(ValueError):
            write_id_block(fd, [b"short"])
    finally:
        os.close(fd)
    assert [stop - start for start, stop in id_blocks(path)] == [
        8 + 16 * ID_BLOCK_MAX,
        8 + 16 * 5,
        8 + 16,
    ]
    assert read_id_file(str(path)) == [*many, b"z" * 16]
    for bit in range(len(ID_HEADER) * 8):  # a damaged header loses nothing
        flip(str(path), bit // 8, 1 << (bit % 8))
        assert read_id_file(str(path)) == [*many, b"z" * 16], bit
        flip(str(path), bit // 8, 1 << (bit % 8))
    found: list[tuple[int, int]] = []
    flip(str(path), 8 + 8 + 16 * 1000)  # an ID of the large block
    header = path.read_bytes()[:8]
    with open(path, "r+b") as f:  # and the whole header: not taken for bare IDs
        f.write(b"0" * 8)
    assert read_id_file(str(path)) == [*many[-5:], b"z" * 16]
    with open(path, "r+b") as f:
        f.write(header)
    assert read_id_file(str(path), lambda a, b: found.append((a, b))) == [*many[-5:], b"z" * 16]
    assert found == [(8, 16 + 16 * ID_BLOCK_MAX)]
    read_id_file(str(path), repair=True)
    assert path.read_bytes() == ID_HEADER + struct.pack(">I", 6) + path.read_bytes()[12:]
    assert read_id_file(str(path)) == [*many[-5:], b"z" * 16]


# -- the wire --------------------------------------------------------------------------------------


def test_a_bad_msgs_blob_is_refused_and_nothing_written(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    blob = encode_records(records(0, 3))
    stub = SimpleNamespace(
        epoch=5, role=roles.REPLICA, log=log, name=TOPIC, heard=lambda sender: None, trace=None
    )
    header = {"topic": TOPIC, "epoch": 5, "total": 3}
    for byte in range(0, len(blob), 7):
        bad = bytearray(blob)
        bad[byte] ^= 0x08
        with pytest.raises(ValueError):
            log.append_encoded(bytes(bad))
        with pytest.raises(ValueError):
            decode_records(bytes(bad))  # BODIES, PUB_FORWARD
        with pytest.raises(wire.WireError, match="bad MSGS"):
            rt.TopicReplica.on_msgs(stub, 2, header, bytes(bad))  # type: ignore[arg-type]
    assert len(log) == 0 and os.path.getsize(log.path) == LOG_START
    assert rt.TopicReplica.on_msgs(stub, 2, header, blob)  # type: ignore[arg-type]
    assert count_records(blob) == 3 and list(log.records()) == records(0, 3)
    log.close()


def test_a_peer_of_another_replication_version_is_refused_with_one_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "_other_versions", set())
    secret = "s"
    key = wire.identify_key(secret, 7)
    old = {**key, "version": wire.VERSION - 1}
    with caplog.at_level(logging.ERROR, "trionsq.nsqd"):
        for _ in range(3):  # a peer retries: logged once
            with pytest.raises(wire.WireError, match="upgraded together"):
                wire.check_identify_key(secret, 1, old)
    assert [r.getMessage() for r in caplog.records] == [
        f"REPLICATION: refusing a peer - unsupported replication version {wire.VERSION - 1} "
        f"(node 7; this node speaks version {wire.VERSION}): the members of a replica set "
        "must be upgraded together"
    ]
    _, reply = wire.check_identify_key(secret, 1, key)
    with pytest.raises(wire.WireError, match="upgraded together"):
        wire.check_reply_key(secret, key, {**reply, "version": wire.VERSION + 1}, 7)
    # What an older member answers a newer one, as the newer one logs it:
    text = wire.refusal("E_IDENTIFY_FAILED IDENTIFY failed unsupported replication version")
    assert f"this node speaks version {wire.VERSION}" in text and "upgraded together" in text
