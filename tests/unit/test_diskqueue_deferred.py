"""The deferred log (deferred.py) through its disk queue: what a crash keeps (a kill keeps
everything written, a power cut what was synced), torn and corrupt records, delayed DROPs
(--sync-ack), compaction and its interruption, and the reader skipping a queue record whose
message the log holds."""

from __future__ import annotations

import os
import random

import pytest

from trionsq.diskqueue import DiskQueue
from trionsq.diskqueue import deferred as dqdeferred
from trionsq.diskqueue.deferred import DeferredLog, replay
from trionsq.diskqueue.simulated import SimulatedDisk
from trionsq.protocol.message import encode_message_frame

DATA = "/data"
NAME = "t:c"
LOG = f"{DATA}/{NAME}.diskqueue.deferred.log"


def _frame(n: int, size: int = 10) -> bytes:
    body = (b"%d-" % n * size)[:size]
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 2, body)


def _queue(disk: SimulatedDisk, **kwargs: object) -> DiskQueue:
    return DiskQueue(
        NAME,
        DATA,
        max_bytes_per_file=1 << 20,
        min_msg_size=26,
        max_msg_size=26 + 4096,
        sync_every=1 << 30,
        track_consumption=True,
        fs=disk,
        **kwargs,  # type: ignore[arg-type]
    )


def _held(q: DiskQueue) -> dict[int, tuple[int, bytes]]:
    return {int(i, 16): entry for i, entry in q.held_deferred.items()}


def test_held_messages_survive_a_kill_with_their_due_times() -> None:
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(1), 111), (_frame(2), 222), (_frame(3), 333)])
    q.drop_deferred([b"%016x" % 2])
    # a kill: the page cache survives, nothing was synced
    again = _queue(disk)
    assert _held(again) == {1: (111, _frame(1)), 3: (333, _frame(3))}


def test_a_power_cut_keeps_what_the_sync_made_durable() -> None:
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(1), 111)])
    q.sync_now()
    q.hold_deferred([(_frame(2), 222)])  # not synced
    survivor = disk.power_cut()
    assert _held(_queue(survivor)) == {1: (111, _frame(1))}


@pytest.mark.parametrize("seed", range(20))
def test_a_torn_tail_is_cut_and_what_precedes_it_kept(seed: int) -> None:
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(n), n) for n in range(5)])
    q.sync_now()
    q.hold_deferred([(_frame(n), n) for n in range(5, 9)])
    survivor = disk.power_cut(random.Random(seed), torn=True)
    held = _held(_queue(survivor))
    kept = sorted(held)
    assert kept == list(range(len(kept))) and len(kept) >= 5  # a prefix, synced ones first
    assert all(held[n] == (n, _frame(n)) for n in kept)
    # the torn bytes were cut off: a new record follows the last whole one
    q2 = _queue(survivor)
    q2.hold_deferred([(_frame(50), 50)])
    assert 50 in _held(_queue(survivor))


def test_a_corrupt_record_ends_the_replay() -> None:
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(n), n) for n in range(3)])
    data = bytearray(disk.files()[LOG])
    record = len(data) // 3
    data[record + 20] ^= 0xFF  # inside the second record: its CRC fails
    replayed = replay(bytes(data))
    assert sorted(int(i, 16) for i in replayed.held) == [0]
    assert replayed.valid == record and replayed.torn


def test_drops_are_delayed_until_the_second_sync_with_sync_ack() -> None:
    """A DROP may be written only once the copy that replaced the message is durable: the
    sync after the drop fsyncs that copy; the DROP goes out at the sync after that."""
    disk = SimulatedDisk()
    q = _queue(disk, delay_deferred_drops=True)
    q.hold_deferred([(_frame(1), 1)])
    q.sync_now()
    q.drop_deferred([b"%016x" % 1])
    assert q.held_deferred == {}  # gone at once in memory...
    q.sync_now()
    assert _held(_queue(disk.power_cut())) == {1: (1, _frame(1))}  # ...not yet on disk


def test_drop_is_durable_after_two_syncs_with_sync_ack() -> None:
    disk = SimulatedDisk()
    q = _queue(disk, delay_deferred_drops=True)
    q.hold_deferred([(_frame(1), 1)])
    q.drop_deferred([b"%016x" % 1])
    q.sync_now()
    q.sync_now()
    assert _held(_queue(disk.power_cut())) == {}


def test_compaction_keeps_the_file_near_what_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dqdeferred, "COMPACT_MIN_BYTES", 4096)
    disk = SimulatedDisk()
    q = _queue(disk)
    for n in range(200):
        q.hold_deferred([(_frame(n, 100), n)])
        if n >= 5:
            q.drop_deferred([b"%016x" % (n - 5)])
        if n % 20 == 0:
            q.sync_now()
    q.sync_now()
    size = len(disk.files()[LOG])
    assert size < 4 * 4096, size
    assert not any(path.endswith(".new") for path in disk.files())
    assert sorted(_held(_queue(disk.power_cut()))) == list(range(195, 200))


def test_a_compaction_cut_short_is_finished_or_discarded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dqdeferred, "COMPACT_MIN_BYTES", 1024)
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(n, 100), n) for n in range(30)])
    q.drop_deferred([b"%016x" % n for n in range(25)])
    job = q.prepare_sync()  # compacts into .new; the rename is this job's to do
    files = disk.files()
    assert LOG + ".new" in files
    q.hold_deferred([(_frame(99), 99)])  # appended to .new
    # killed before the job ran: .new has its MARK, so it is the log
    assert sorted(_held(_queue(disk))) == [25, 26, 27, 28, 29, 99]
    assert LOG + ".new" not in disk.files()
    del job


def test_a_snapshot_without_its_mark_is_discarded() -> None:
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(1), 1)])
    fd = disk.open(LOG + ".new", os.O_WRONLY | os.O_CREAT)
    disk.pwrite(fd, dqdeferred._hold_record(b"%016x" % 7, 7, _frame(7)), 0)  # no MARK
    assert _held(_queue(disk)) == {1: (1, _frame(1))}
    assert LOG + ".new" not in disk.files()


def test_a_queue_record_of_a_held_message_is_skipped() -> None:
    """REQ with a delay then a crash before the metadata moved: the message is both in the
    queue (behind the committed read position) and in the log, which stands for it."""
    disk = SimulatedDisk()
    q = _queue(disk)
    q.put_many([_frame(1), _frame(2)])
    q.sync_now()
    assert q.take(2) == [_frame(1), _frame(2)]
    q.hold_deferred([(_frame(1), 5)])  # REQ'd with a delay: held...
    q.release(b"%016x" % 1)  # ...and released from the queue
    again = _queue(disk)  # killed: the metadata still reads from the start
    assert again.take(5) == [_frame(2)]
    assert _held(again) == {1: (5, _frame(1))}


def test_empty_cuts_the_log_at_once() -> None:
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(1), 1)])
    q.empty()
    assert _held(_queue(disk)) == {}
    q.hold_deferred([(_frame(2), 2)])
    assert _held(_queue(disk)) == {2: (2, _frame(2))}


def test_at_shutdown_the_log_goes_once_the_queue_holds_its_messages() -> None:
    disk = SimulatedDisk()
    q = _queue(disk)
    q.hold_deferred([(_frame(1), 1)])
    q.sync_now()
    # shutdown: the deferred message is written to the queue, the log let go
    q.clear_deferred()
    q.put(_frame(1))
    assert _held(_queue(disk)) == {1: (1, _frame(1))}  # a crash now: the log still stands
    q.close()
    assert LOG not in disk.files()
    assert _queue(disk).take(5) == [_frame(1)]


def test_the_log_alone_replays_what_it_holds() -> None:
    disk = SimulatedDisk()
    log = DeferredLog(disk, LOG)
    log.hold([(_frame(1), 10), (_frame(2), 20)])
    log.hold([(_frame(1), 30)])  # a later HOLD replaces the earlier
    log.drop([b"%016x" % 2, b"%016x" % 3])
    replayed = replay(disk.files()[LOG])
    assert replayed.held == {b"%016x" % 1: (30, _frame(1))}
    assert not replayed.torn and len(log) == 1
