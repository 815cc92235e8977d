"""The replicated topic's log on one member (trionsq/nsqd/replication_log.py): appends without
an in-memory index, what scans of the file return, the FIN files written in batches, a torn
record cut off at load, compaction. Every test runs with the log's per-message loops in
Python and compiled (_speedups.c), and a property checks the two agree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.nsqd import replication_log as log_module
from trionsq.nsqd.replication_log import (
    COMPACT_MIN,
    ReplicationLog,
    count_records,
    decode_records,
    encode_frames,
    encode_records,
    scan_ids,
)
from trionsq.protocol.message import encode_new_frames, framed_id

TOPIC = "rt"


def _require_compiled() -> None:
    if log_module.COMPILED_ENCODE_FRAMES is None or log_module.COMPILED_COUNT_RECORDS is None:
        if os.environ.get("TRIONSQ_PURE_PYTHON"):
            pytest.skip("TRIONSQ_PURE_PYTHON is set: the compiled loops are not wanted")
        pytest.fail(
            "trionsq/protocol/_speedups.c is not built: install a C compiler and run "
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
    for data in (blob, blob[: min(cut, len(blob))], blob[:cut] + b"\xff" * 12):
        for minimum in (1, 42, 60):
            assert log_module.COMPILED_COUNT_RECORDS(
                data, minimum
            ) == log_module._count_log_records(data, minimum)


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
    assert len(log) == 0 and os.path.getsize(log.path) == 0
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
    assert os.path.getsize(again.path) == len(encode_records(whole))
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
    assert fin_path.stat().st_size == 4 * 16
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
    assert set(done) <= log.dropped.keys()
    # Appending after a compaction goes on at the end of the rewritten file.
    log.append(records(count, 2))
    assert len(log) == len(live) + 2
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert list(again.records()) == live + records(count, 2)
    again.close()
