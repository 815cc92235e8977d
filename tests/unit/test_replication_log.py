"""The replicated topic's log on one member (trionsq/nsqd/replication_log.py): appends without
an in-memory index, what scans of the file return, the FIN files written in batches, a torn
record cut off at load, compaction. Every test runs with the log's per-message loops in
Python and compiled (_log_loops.c), and a property checks the two agree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.nsqd.replication import log as log_module
from trionsq.nsqd.replication.log import (
    COMPACT_MIN,
    ID_HEADER,
    LOG_START,
    ReplicationLog,
    count_records,
    decode_records,
    encode_frames,
    encode_records,
    read_records,
    scan_ids,
    without_ids,
)
from trionsq.protocol.message import encode_new_frames, framed_id

TOPIC = "rt"


def _require_compiled() -> None:
    if (
        log_module.COMPILED_ENCODE_FRAMES is None
        or log_module.COMPILED_COUNT_RECORDS is None
        or log_module.COMPILED_SCAN_IDS is None
    ):
        if os.environ.get("TRIONSQ_PURE_PYTHON"):
            pytest.skip("TRIONSQ_PURE_PYTHON is set: the compiled loops are not wanted")
        pytest.fail(
            "trionsq/nsqd/replication/_log_loops.c is not built: install a C compiler and run "
            "scripts/setup-venv (or set TRIONSQ_PURE_PYTHON=1 to test without it)"
        )


@pytest.fixture(autouse=True, params=["python", "compiled"])
def log_loops(request: pytest.FixtureRequest) -> Iterator[None]:
    compiled = request.param == "compiled"
    if compiled:
        _require_compiled()
    log_module.use_compiled_loops(compiled)
    try:
        yield
    finally:
        log_module.use_compiled_loops(not os.environ.get("TRIONSQ_PURE_PYTHON"))


@given(
    bodies=st.lists(st.binary(min_size=1, max_size=64), max_size=20),
    due=st.integers(min_value=0, max_value=2**64 - 1),
    cut=st.integers(min_value=0, max_value=4000),
)
def test_compiled_and_python_loops_agree(bodies: list[bytes], due: int, cut: int) -> None:
    _require_compiled()
    encoded = frames(0, len(bodies))
    encoded = [f[:34] + b for f, b in zip(encoded, bodies, strict=True)]
    blob = log_module._encode_frames(encoded, due)
    assert log_module.COMPILED_ENCODE_FRAMES is not None
    assert log_module.COMPILED_COUNT_RECORDS is not None
    assert log_module.COMPILED_ENCODE_FRAMES(encoded, due) == blob
    assert blob == encode_records([(due, f) for f in encoded])
    assert log_module.COMPILED_SCAN_IDS is not None
    flipped = bytearray(blob)
    if flipped:
        flipped[cut % len(flipped)] ^= 1 << (cut % 8)  # a record that fails its CRC
    for data in (blob, blob[: min(cut, len(blob))], blob[:cut] + b"\xff" * 12, bytes(flipped)):
        for minimum in (1, 46, 60):
            assert log_module.COMPILED_COUNT_RECORDS(
                data, minimum
            ) == log_module._count_log_records(data, minimum)
        for minimum in (46, 60):
            assert log_module.COMPILED_SCAN_IDS(data, minimum) == log_module._scan_log_ids(
                data, minimum
            )


def test_encode_frames_matches_encode_records() -> None:
    recs = records(0, 5, due=99)
    assert encode_frames([f for _, f in recs], 99) == encode_records(recs)


def frames(start: int, count: int) -> list[bytes]:
    ids = [b"%016x" % (start + i) for i in range(count)]
    return encode_new_frames(ids, 1_700_000_000_000_000_000, [b"body%d" % i for i in range(count)])


def records(start: int, count: int, due: int = 0) -> list[tuple[int, bytes]]:
    return [(due, f) for f in frames(start, count)]


def ids_of(recs: list[tuple[int, bytes]]) -> set[bytes]:
    return {framed_id(f) for _, f in recs}


def test_append_then_reopen_keeps_every_record(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    first, second = records(0, 5), records(5, 3, due=123)
    assert decode_records(log.append(first)) == first
    assert log.append_encoded(encode_records(second)) == 3
    assert len(log) == 8
    assert list(log.records()) == first + second
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert len(again) == 8 and again.ids() == ids_of(first + second)
    assert list(again.records()) == first + second
    again.close()


def test_append_with_known_ids_leaves_out_copies(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(records(0, 4))
    known = log.ids()
    written = log.append(records(2, 4) + records(5, 1), known=known)
    assert ids_of(decode_records(written)) == ids_of(records(4, 2))
    assert len(log) == 6 and known == log.ids()
    log.close()


def test_append_on_the_publish_path_keeps_a_repeated_id(tmp_path: Path) -> None:
    """A clock set back may repeat an ID: both messages are kept, neither is dropped."""
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(records(0, 2))
    log.append(records(1, 1))
    assert len(log) == 3
    log.close()


def test_read_and_read_lacking_scan_the_file(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    everything = records(0, 10)
    log.append(everything)
    wanted = {framed_id(everything[3][1]), framed_id(everything[7][1]), b"z" * 16}
    assert log.read(wanted) == [everything[3], everything[7]]
    theirs = ids_of(everything[:8])
    assert log.read_lacking(theirs) == everything[8:]
    log.close()


def test_malformed_stream_blob_is_refused_and_nothing_written(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    blob = encode_records(records(0, 3))
    with pytest.raises(ValueError):
        log.append_encoded(blob[:-1])
    with pytest.raises(ValueError):
        count_records(b"\x00\x00\x00\x01" + b"\x00" * 8)
    assert len(log) == 0 and os.path.getsize(log.path) == LOG_START  # the header
    log.close()


def test_a_torn_record_is_cut_off_at_load(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    whole = records(0, 4)
    log.append(whole)
    log.close()
    with open(log.path, "ab") as f:
        f.write(encode_records(records(4, 1))[:-7])
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert len(again) == 4 and list(again.records()) == whole
    assert os.path.getsize(again.path) == LOG_START + len(encode_records(whole))
    assert again.corrupt_records == 0 and not again.damaged  # torn: not corrupt
    again.close()


def test_a_log_larger_than_a_chunk_loads_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Load reads the log in SCAN_CHUNK pieces (memory grows with the FIN files, not the
    log): the count, the finished sets (less IDs the log never held), the emptied set and
    the torn tail come out as with one read."""
    log = ReplicationLog(str(tmp_path), TOPIC)
    recs = records(0, 300)
    big = [(0, encode_new_frames([b"%016x" % 999], 1, [b"y" * 5000])[0])]  # > a chunk
    log.append(recs[:150] + big + recs[150:])
    log.add_channel("a")
    log.add_channel("b")
    stray = b"f" * 16  # finished, never held
    log.finish("a", [framed_id(f) for _, f in recs[:200]] + [stray])
    log.finish("b", [framed_id(f) for _, f in recs[100:250]])
    log.empty_topic([framed_id(f) for _, f in recs[250:260]] + [b"e" * 16])
    log.close()
    with open(log.path, "ab") as f:
        f.write(encode_records(records(300, 1))[:-3])
    reads: list[int] = []
    real_read_records = log_module.read_records

    def counting_read_records(
        fd: int, offset: int, end: int, max_bytes: int, found: Any = None
    ) -> tuple[bytes, int]:
        data, after = real_read_records(fd, offset, end, max_bytes, found)
        reads.append(len(data))
        return data, after

    monkeypatch.setattr(log_module, "SCAN_CHUNK", 1024)
    monkeypatch.setattr(log_module, "read_records", counting_read_records)
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert len(reads) > 10 and max(reads) == len(encode_records(big))
    assert len(again) == 301
    emptied = ids_of(recs[250:260])  # finished for every channel
    assert again.finished["a"] == ids_of(recs[:200]) | emptied
    assert again.finished["b"] == ids_of(recs[100:250]) | emptied
    assert again.dead == 110  # finished by both
    assert again.emptied == emptied
    assert os.path.getsize(again.path) == LOG_START + len(
        encode_records(recs[:150] + big + recs[150:])
    )
    again.close()


def test_scan_ids_stops_at_the_first_incomplete_record() -> None:
    recs = records(0, 3)
    blob = encode_records(recs)
    ids, end = scan_ids(blob + b"\x00\x00")
    assert ids == [framed_id(f) for _, f in recs] and end == len(blob)


def test_a_new_channel_starts_with_what_every_channel_finished(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    recs = records(0, 4)
    log.append(recs)
    log.add_channel("a")
    log.finish("a", [framed_id(f) for _, f in recs[:2]])
    log.add_channel("b")
    assert log.finished["b"] == ids_of(recs[:2])
    log.close()


def test_fins_reach_the_file_when_written_and_survive_a_reopen(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    recs = records(0, 6)
    log.append(recs)
    log.add_channel("c")
    assert log.finish("c", [framed_id(f) for _, f in recs[:4]]) == 4
    assert log.finish("c", [framed_id(recs[0][1])]) == 0  # already finished
    fin_path = tmp_path / f"{TOPIC}:c.replication.fin"
    assert fin_path.stat().st_size == 0  # batched: not yet written
    log.write_fins()
    assert fin_path.stat().st_size == len(ID_HEADER) + 8 + 4 * 16  # header, one block
    assert log.unfinished("c") == 2
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert again.finished["c"] == ids_of(recs[:4])
    again.close()


def test_close_writes_the_fins_not_yet_written(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    recs = records(0, 2)
    log.append(recs)
    log.finish("c", [framed_id(recs[1][1])])
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert again.finished["c"] == {framed_id(recs[1][1])}
    again.close()


def test_compaction_drops_what_every_channel_finished(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    count = COMPACT_MIN * 2 + 10
    recs = records(0, count)
    log.append(recs)
    done = [framed_id(f) for _, f in recs[: COMPACT_MIN + 5]]
    log.add_channel("a")
    log.add_channel("b")
    log.finish("a", done)
    log.finish("b", done[:-3])
    stray = b"f" * 16  # a FIN for a message the log never held
    log.finish("a", [stray])
    assert not log.compact_if_needed()  # fewer finished everywhere than live
    log.finish("b", done[-3:])
    assert log.compact_if_needed()
    live = recs[COMPACT_MIN + 5 :]
    assert len(log) == len(live) and list(log.records()) == live
    assert log.finished["a"] == set() and log.finished["b"] == set()
    assert set(done) <= log.read_dropped()
    # Appending after a compaction goes on at the end of the rewritten file.
    log.append(records(count, 2))
    assert len(log) == len(live) + 2
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert list(again.records()) == live + records(count, 2)
    assert set(done) <= again.read_dropped()  # remembered across a restart
    again.close()


# -- scans and compaction off the event loop -----------------------------------------------


def compactable(tmp_path: Path) -> tuple[ReplicationLog, list[tuple[int, bytes]], int]:
    """A log whose first COMPACT_MIN + 5 records channel c finished (compaction is due)."""
    log = ReplicationLog(str(tmp_path), TOPIC)
    count = COMPACT_MIN * 2 + 10
    recs = records(0, count)
    log.append(recs)
    log.add_channel("c")
    log.finish("c", [framed_id(f) for _, f in recs[: COMPACT_MIN + 5]])
    log.write_fins()
    return log, recs[COMPACT_MIN + 5 :], count


def test_read_chunk_returns_whole_records_at_least_one(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    recs = records(0, 5)
    log.append(recs)
    size = len(encode_records(recs[:1]))
    snapshot = log.snapshot()
    at = LOG_START
    assert read_records(snapshot.fd, at, log.bytes, 2 * size + 3) == (
        encode_records(recs[:2]),
        at + 2 * size,
    )
    assert read_records(snapshot.fd, at + size, log.bytes, 1) == (
        encode_records(recs[1:2]),
        at + 2 * size,
    )
    assert read_records(snapshot.fd, at, at + 3 * size, 10 * size) == (
        encode_records(recs[:3]),
        at + 3 * size,
    )
    assert read_records(snapshot.fd, log.bytes, log.bytes, 100) == (b"", log.bytes)
    assert snapshot.chunk(0, log.bytes, 1) == (encode_records(recs[:1]), at + size)
    snapshot.close()
    blob = encode_records(recs)
    theirs = {framed_id(recs[1][1]), framed_id(recs[3][1])}
    assert without_ids(blob, theirs) == (encode_records([recs[0], recs[2], recs[4]]), 3)
    assert without_ids(blob, set()) == (blob, 5)
    log.close()


def test_a_snapshot_reads_the_log_as_it_was(tmp_path: Path) -> None:
    """Appends after it are not seen, and a compaction (which replaces the file) does not
    change what it reads."""
    log, live, count = compactable(tmp_path)
    everything = list(log.records())
    snapshot = log.snapshot()
    assert log.compact_if_needed()
    log.append(records(count, 3))
    assert snapshot.records() == everything
    assert snapshot.ids() == ids_of(everything)
    held, first = snapshot.ids_and_first_lacking(ids_of(everything[:7]))
    assert held == ids_of(everything)
    assert first == LOG_START + len(encode_records(everything[:7]))
    assert snapshot.ids_and_first_lacking(ids_of(everything))[1] == snapshot.size
    snapshot.close()
    assert list(log.records()) == live + records(count, 3)
    log.close()


def test_appends_and_fins_during_a_compaction_are_kept(tmp_path: Path) -> None:
    """The rewrite runs in a worker thread while the event loop appends and records FINs:
    what was appended meanwhile follows the rewritten records, what was finished meanwhile
    stays finished (in memory and in the FIN file)."""
    log, live, count = compactable(tmp_path)
    compaction = log.start_compaction()
    assert compaction is not None and log.compacting
    assert log.start_compaction() is None  # one at a time
    compaction.rewrite()
    during = records(count, 4)
    log.append(during[:2])
    compaction.copy_tail(log.bytes)  # a round of the tail in the worker
    log.append(during[2:])
    late_fins = [framed_id(live[0][1]), framed_id(during[0][1])]
    log.finish("c", late_fins)
    log.write_fins()
    assert log.finish_compaction(compaction)
    assert not log.compacting and log.generation == 1
    assert list(log.records()) == live + during
    assert len(log) == len(live) + 4
    assert log.finished["c"] == set(late_fins)
    log.append(records(count + 4, 1))  # appends go on in the new file
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert list(again.records()) == live + during + records(count + 4, 1)
    assert again.finished["c"] == set(late_fins)
    again.close()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_no_compaction_while_a_reader_follows_the_log(tmp_path: Path) -> None:
    log, _, _ = compactable(tmp_path)
    log.pins += 1
    assert not log.compaction_due() and log.start_compaction() is None
    log.pins -= 1
    assert log.compaction_due()
    log.close()


def test_a_compaction_is_abandoned_when_the_log_closes(tmp_path: Path) -> None:
    log, _, count = compactable(tmp_path)
    everything = list(log.records())
    compaction = log.start_compaction()
    assert compaction is not None
    compaction.rewrite()
    log.close()
    assert not log.finish_compaction(compaction)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert list(again.records()) == everything and len(again) == count
    again.close()


async def test_compact_runs_the_rewrite_in_the_runner_while_appends_go_on(
    tmp_path: Path,
) -> None:
    log, live, count = compactable(tmp_path)
    appended: list[tuple[int, bytes]] = []
    calls = []

    async def runner(fn: Any, *args: Any) -> Any:
        calls.append(fn.__name__)
        # Appends meanwhile: enough for a tail round in the runner, then a few more.
        batch = records(count + len(appended), 400 if len(calls) == 1 else 2)
        log.append(batch)
        appended.extend(batch)
        return fn(*args)

    log_module_tail = log_module.TAIL_IN_LOOP
    log_module.TAIL_IN_LOOP = 1000
    try:
        assert await log.compact(runner)
    finally:
        log_module.TAIL_IN_LOOP = log_module_tail
    assert calls[0] == "rewrite" and "copy_tail" in calls
    assert list(log.records()) == live + appended
    assert not await log.compact(runner)  # nothing more to drop
    log.close()


def test_a_channel_deleted_and_created_again_during_a_compaction_keeps_its_own_fins(
    tmp_path: Path,
) -> None:
    log, live, _ = compactable(tmp_path)
    log.add_channel("a")  # finished what c has: the records compaction drops
    log.finish("c", [framed_id(f) for _, f in live[:2]])  # and c beyond them
    compaction = log.start_compaction()
    assert compaction is not None
    compaction.rewrite()
    log.delete_channel("c")
    log.finished["c"] = set()  # created again, with nothing finished
    log.finish("c", [framed_id(live[5][1])])
    log.write_fins()
    assert log.finish_compaction(compaction)
    assert log.finished["c"] == {framed_id(live[5][1])}
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert again.finished["c"] == {framed_id(live[5][1])}
    again.close()


def test_the_directory_is_synced_after_files_are_created_or_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--sync-ack fsyncs the files; a file created or renamed is durable only once its
    directory is synced too (after a power failure, the old log would come back without
    what was appended to the compacted one)."""
    synced: list[dict[str, int]] = []  # the directory's files and sizes at each sync

    def recording_fsync_dir(path: str) -> None:
        assert path == str(tmp_path)
        synced.append({name: os.path.getsize(tmp_path / name) for name in os.listdir(path)})

    monkeypatch.setattr(log_module, "fsync_dir", recording_fsync_dir)
    log, live, _ = compactable(tmp_path)
    log_name, fin_name = TOPIC + log_module.LOG_SUFFIX, f"{TOPIC}:c{log_module.FIN_SUFFIX}"
    assert len(synced) == 2
    assert log_name in synced[0]  # the new log
    assert fin_name in synced[1]  # channel c's FIN file, at its first write
    log.write_fins()
    assert len(synced) == 2  # nothing new in the directory
    assert log.compact_if_needed()
    assert len(synced) == 3
    after = synced[2]
    assert after[log_name] == log.bytes == LOG_START + len(encode_records(live))  # compacted
    assert not [name for name in after if name.endswith(".tmp")]  # every rename made
    log.close()
    ReplicationLog(str(tmp_path), TOPIC).close()
    assert len(synced) == 3  # reopening an existing log changes nothing
