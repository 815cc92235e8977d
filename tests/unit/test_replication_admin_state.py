"""What admin actions leave on a replicated topic's member (replication_admin_state.py, and the
log's emptied set in replication_log.py): versioned entries merged by keeping the newer, kept
across a restart; tombstones of deleted topics; IDs /topic/empty dropped, finished for every
channel, present and future, across a restart and a compaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from trionsq.nsqd.replication.admin_state import AdminState, Tombstones, parse_version
from trionsq.nsqd.replication.log import COMPACT_MIN, ReplicationLog
from trionsq.protocol.message import encode_new_frames, framed_id

TOPIC = "rt"


def records(start: int, count: int) -> list[tuple[int, bytes]]:
    ids = [b"%016x" % (start + i) for i in range(count)]
    frames = encode_new_frames(ids, 1_700_000_000_000_000_000, [b"b"] * count)
    return [(0, frame) for frame in frames]


def test_versions_grow_within_an_epoch_and_a_new_epoch_starts_again(tmp_path: Path) -> None:
    state = AdminState(str(tmp_path), TOPIC)
    assert state.next_version(1025) == (1025, 1)
    state.set_channel("c", (1025, 1), exists=True, paused=True)
    state.set_topic(True, (1025, 2))
    assert state.next_version(1025) == (1025, 3)
    assert state.next_version(2050) == (2050, 1)  # above every entry of 1025


def test_the_newer_entry_wins_whichever_way_states_merge(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = AdminState(str(tmp_path / "a"), TOPIC)
    b = AdminState(str(tmp_path / "b"), TOPIC)
    a.set_channel("c", (1025, 1), exists=True, paused=True)
    a.set_channel("gone", (1025, 2), exists=False, paused=False)
    b.set_channel("c", (2049, 1), exists=True, paused=False)  # unpaused in a later epoch
    b.set_topic(True, (2049, 2))
    assert a.merge(b.to_json()) and b.merge(a.to_json())
    assert a.to_json() == b.to_json()
    assert a.channels["c"].paused is False and a.deleted("gone") and a.topic is not None
    assert not a.merge(b.to_json())  # nothing newer: no change
    # An older entry never replaces a newer one.
    assert not a.set_channel("c", (1025, 9), exists=False, paused=False)
    assert not a.deleted("c")


def test_a_malformed_state_is_refused_whole(tmp_path: Path) -> None:
    state = AdminState(str(tmp_path), TOPIC)
    with pytest.raises(ValueError):
        state.merge({"channels": {"c": {"v": [1, 1]}, "d": {"v": "x"}}})
    with pytest.raises(ValueError):
        state.merge({"channels": {"c": {"v": [1, 1], "paused": "yes"}}})
    assert state.channels == {}
    assert parse_version([3, 4]) == (3, 4) and parse_version("3") is None


def test_the_state_survives_a_restart_and_goes_with_the_topic(tmp_path: Path) -> None:
    state = AdminState(str(tmp_path), TOPIC)
    state.set_channel("c", (1025, 1), exists=False, paused=False)
    state.set_topic(True, (1025, 2))
    state.save()
    again = AdminState(str(tmp_path), TOPIC)
    assert again.to_json() == state.to_json() and again.deleted("c")
    again.delete()
    assert not list(tmp_path.iterdir())
    (tmp_path / f"{TOPIC}.replication.admin").write_bytes(b"not json")
    assert AdminState(str(tmp_path), TOPIC).channels == {}  # unreadable: logged, ignored


def test_tombstones_keep_the_highest_floor_across_a_restart(tmp_path: Path) -> None:
    tombstones = Tombstones(str(tmp_path))
    assert tombstones.floor(TOPIC) == 0
    tombstones.add(TOPIC, 3072)
    tombstones.add(TOPIC, 2048)  # lower: ignored
    assert Tombstones(str(tmp_path)).floor(TOPIC) == 3072


def test_emptied_ids_are_finished_for_every_channel_present_and_future(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(records(0, 10))
    log.add_channel("c")
    ids = [framed_id(frame) for _, frame in records(0, 4)]
    assert log.empty_topic(ids) == 4
    assert log.empty_topic(ids) == 0  # known already
    assert set(ids) <= log.finished["c"]
    log.add_channel("d")  # created later: not owed them either
    assert log.finished["d"] == set(ids)
    log.close()
    again = ReplicationLog(str(tmp_path), TOPIC)
    assert again.emptied == set(ids) and set(ids) <= again.finished["c"]
    again.delete()
    assert not list(tmp_path.iterdir())


def test_emptied_records_are_compacted_away_without_a_channel(tmp_path: Path) -> None:
    log = ReplicationLog(str(tmp_path), TOPIC)
    log.append(records(0, COMPACT_MIN + 10))
    ids = [framed_id(frame) for _, frame in records(0, COMPACT_MIN)]
    log.empty_topic(ids)
    assert log.dead == COMPACT_MIN
    assert log.compact_if_needed()
    assert len(log) == 10 and log.emptied == set() and set(ids) <= log.read_dropped()
    log.close()
    assert ReplicationLog(str(tmp_path), TOPIC).emptied == set()
