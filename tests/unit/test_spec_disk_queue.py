"""The disk-queue spec: every configuration holds, every seeded fault is caught by the property
it breaks, and single transitions do what go-diskqueue does (or what trionsq must do instead),
--sync-ack's group commit included."""

from __future__ import annotations

import pytest

from spec import Mutant, Spec, check, format_trace
from spec.disk_queue import (
    FAULTS,
    DiskQueue,
    Meta,
    acknowledged_survives,
    build,
    build_sync_ack,
    mutants,
    readable,
    records_of,
    specs,
    synced_survives,
)

REJECTED_BY = {
    "disk_queue.metadata_before_fsync": "metadata_within_durable_data",
    "disk_queue.ack_before_sync": "acknowledged_survives",
    "disk_queue.read_ahead_persisted": "acknowledged_survives",
    "disk_queue.skip_to_write_on_read_error": "acknowledged_survives",
    "disk_queue.depth_not_corrected": "depth_zero_at_tail",
    "disk_queue.restart_writes_into_stale_file": "write_file_ends_at_write_pos",
    "disk_queue.salvage_not_counted": "depth_counts_readable",
    "disk_queue.sync_ack_ack_before_fsync": "acknowledged_survives",
    "disk_queue.group_commit_write_file_only": "acknowledged_survives",
    "disk_queue.group_commit_acks_later_puts": "acknowledged_survives",
    "disk_queue.salvage_write_file_only": "depth_counts_readable",
}


@pytest.mark.parametrize("spec", specs(), ids=lambda s: s.name)
def test_spec_holds(spec: Spec) -> None:
    result = check(spec)
    assert result.ok, result.violation and format_trace(spec, result.violation)
    assert result.states > 1000


def test_the_configurations() -> None:
    assert [s.name for s in specs()] == [
        "disk_queue.sync_every_1",
        "disk_queue.sync_every_2",
        "disk_queue.sync_ack",
    ]


def test_every_fault_has_a_mutant() -> None:
    assert sorted(m.name for m in mutants()) == sorted(f"disk_queue.{f}" for f in FAULTS)
    assert sorted(REJECTED_BY) == sorted(m.name for m in mutants())


@pytest.mark.parametrize("mutant", mutants(), ids=lambda m: m.name)
def test_mutant_is_rejected_by_the_property_it_breaks(mutant: Mutant) -> None:
    result = check(mutant.spec)
    assert result.violation is not None
    assert result.violation.property == REJECTED_BY[mutant.name]
    assert result.seconds < 2


# -- single transitions ---------------------------------------------------------------------


def take(spec: Spec, state: DiskQueue, label: str) -> DiskQueue:
    """The state after the one enabled instance whose label is or starts with `label`."""
    found = [
        after
        for action in spec.actions
        for got, after in action.instances(state)
        if got == label or got.startswith(label + "(") or got.startswith(label + " ")
    ]
    assert len(found) == 1, f"{label}: {len(found)} instances"
    after: DiskQueue = found[0]
    return after


def run(spec: Spec, *labels: str) -> DiskQueue:
    state: DiskQueue = next(iter(spec.init()))
    for label in labels:
        state = take(spec, state, label)
    return state


def test_sync_every_1_acknowledges_only_after_the_sync() -> None:
    spec = build(1)
    state = run(spec, "Put(m0)")
    assert state.acked == frozenset() and state.need_sync
    assert not [a for a in spec.actions if a.name == "Put" for _ in a.instances(state)]
    state = take(spec, state, "Fsync")
    assert state.acked == frozenset()
    state = take(spec, state, "PersistMetaData")
    assert state.acked == {0} and state.meta == Meta(1, 0, 0, 0, 1)


def test_sync_every_1_an_acknowledged_message_survives_a_crash() -> None:
    spec = build(1)
    state = run(spec, "Put(m0)", "Fsync", "PersistMetaData", "Crash", "Restart")
    assert readable(state) == (0,)
    assert acknowledged_survives(state) is True


def test_sync_every_2_a_crash_may_lose_an_acknowledged_unsynced_put() -> None:
    spec = build(2)
    state = run(spec, "Put(m0)")
    assert state.acked == {0} and not state.need_sync
    state = run(spec, "Put(m0)", "Crash(f0:0)", "Restart")
    assert readable(state) == ()
    assert acknowledged_survives(state) is not True  # not an invariant of sync_every_2 ...
    assert synced_survives(state) is True  # ... only synced messages must survive
    assert check(spec).ok


def test_a_read_whose_position_was_not_synced_is_read_again() -> None:
    spec = build(1)
    state = run(spec, "Put(m0)", "Fsync", "PersistMetaData", "ReadOne(m0)", "Read(m0)")
    assert state.delivered == {0} and state.need_sync  # read_pos is not yet in the metadata
    state = take(spec, take(spec, state, "Crash"), "Restart")
    assert readable(state) == (0,) and state.epoch == ()
    state = take(spec, take(spec, state, "ReadOne(m0)"), "Read(m0)")
    assert state.epoch == (0,)


def test_a_corrupt_segment_becomes_bad_and_reading_goes_on() -> None:
    spec = build(1)
    puts = [step for m in range(3) for step in (f"Put(m{m})", "Fsync", "PersistMetaData")]
    state = run(spec, *puts)
    assert records_of(state, 0) == (0, 1) and records_of(state, 1) == (2,)
    state = take(spec, state, "Corrupt(f0[1])")
    for label in ("ReadOne(m0)", "Read(m0)", "Fsync", "PersistMetaData"):
        state = take(spec, state, label)
    state = take(spec, state, "ReadOne(f0[1] unreadable)")
    assert records_of(state, 0) is None  # renamed .bad
    assert (state.read_file_num, state.read_pos) == (1, 0)
    assert readable(state) == (2,) and state.lost == {1}
    assert state.depth == 2  # m1 is still counted until the reader reaches the tail
    for label in ("Fsync", "PersistMetaData", "ReadOne(m2)", "Read(m2)"):
        state = take(spec, state, label)
    assert state.depth == 0


def test_a_torn_tail_is_salvaged_then_skipped() -> None:
    spec = build(2)
    state = run(spec, "Put(m0)", "Put(m1)", "Crash(f0:1+torn)")
    assert records_of(state, 0) == (0, -1)
    state = take(spec, state, "Restart")
    assert (state.write_file_num, state.write_pos, state.depth) == (1, 0, 1)
    state = run(spec, "Put(m0)", "Put(m1)", "Crash(f0:1+torn)", "Restart", "Fsync")
    state = take(spec, state, "PersistMetaData")
    state = take(spec, take(spec, state, "ReadOne(m0)"), "Read(m0)")
    state = take(spec, state, "ReadOne(f0[1] unreadable)")
    assert state.lost == frozenset() and state.depth == 0
    assert (state.read_file_num, state.read_pos) == (state.write_file_num, state.write_pos)


# -- --sync-ack: group commit -----------------------------------------------------------------


def test_sync_ack_a_put_is_acknowledged_by_the_group_commit_without_metadata() -> None:
    spec = build_sync_ack()
    state = run(spec, "Put(m0)")
    assert state.acked == frozenset() and state.unacked == {0} and not state.need_sync
    state = take(spec, state, "PrepareGroupCommit(f0:1)")
    assert state.acked == frozenset()
    state = take(spec, state, "GroupCommit(m0)")
    assert state.acked == {0} and state.segments[0].synced == 1
    assert state.meta == Meta()  # data only: the metadata keeps its own schedule
    state = take(spec, take(spec, state, "Crash"), "Restart")
    assert readable(state) == (0,) and acknowledged_survives(state) is True


def test_sync_ack_a_rollover_retires_the_write_file_unsynced() -> None:
    spec = build_sync_ack()
    state = run(spec, "Put(m0)", "Put(m1)", "Put(m2)")
    assert records_of(state, 0) == (0, 1) and records_of(state, 1) == (2,)
    assert [g.synced for g in state.segments] == [0, 0] and state.need_sync
    assert state.meta == Meta()
    state = take(spec, state, "PrepareGroupCommit(f0:2 f1:1)")
    state = take(spec, state, "GroupCommit(m0 m1 m2)")  # one round acknowledges all three
    assert [g.synced for g in state.segments] == [2, 1] and state.meta == Meta()


def test_sync_ack_restart_salvages_acknowledged_records_the_metadata_does_not_know() -> None:
    spec = build_sync_ack()
    state = run(spec, "Put(m0)", "Put(m1)", "Put(m2)", "PrepareGroupCommit", "GroupCommit", "Crash")
    assert state.meta == Meta() and state.acked == {0, 1, 2}
    state = take(spec, state, "Restart")
    assert (state.write_file_num, state.write_pos, state.depth) == (2, 0, 3)
    assert readable(state) == (0, 1, 2) and acknowledged_survives(state) is True


def test_sync_ack_a_put_after_the_capture_waits_for_the_next_round() -> None:
    spec = build_sync_ack()
    state = run(spec, "Put(m0)", "PrepareGroupCommit(f0:1)", "Put(m1)", "GroupCommit(m0)")
    assert state.acked == {0} and state.unacked == {1}
    assert state.segments[0].synced == 1  # m1 may not be durable yet
    state = take(spec, take(spec, state, "PrepareGroupCommit(f0:2)"), "GroupCommit(m1)")
    assert state.acked == {0, 1} and state.segments[0].synced == 2


def test_salvage_write_file_only_loses_an_acknowledged_record_of_a_later_file() -> None:
    """Besides the depth it undercounts: when the write file is exactly write_pos long, the
    segment a rollover started after the last metadata sync is never read."""
    labels = (
        *("Put(m0)", "Put(m1)", "SyncTimeout", "Fsync", "PersistMetaData"),
        *("Put(m2)", "PrepareGroupCommit(f1:1)", "GroupCommit(m2)", "Crash", "Restart"),
    )
    state = run(build_sync_ack(), *labels)
    assert state.acked == {0, 1, 2} and readable(state) == (0, 1, 2)
    state = run(build_sync_ack(frozenset({"salvage_write_file_only"})), *labels)
    assert readable(state) == (0, 1)
    assert acknowledged_survives(state) is not True
