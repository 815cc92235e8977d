"""`DiskSyncer`: syncs after --sync-every reads and writes, on a roll or a finished segment, on
the --sync-timeout tick for queues with activity; the final sync at close; failing jobs are
logged and retried at the next tick. Virtual clock and inline blocking work, except one test
that runs jobs in a real worker thread."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trionsq.diskqueue import DiskQueue, DiskSyncer
from trionsq.diskqueue import queue as dqqueue
from trionsq.diskqueue.files import write_file_atomically
from trionsq.diskqueue.fs import FileSystem
from trionsq.protocol.message import encode_message_frame, framed_id

TIMEOUT = 2.0
REC = 40  # bytes on disk per _frame: 4 + 26 + 10


def _frame(n: int) -> bytes:
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 1, b"%010d" % n)


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _queue(path: Path, syncer: DiskSyncer, name: str = "t", **kwargs: Any) -> DiskQueue:
    options: dict[str, Any] = {
        "max_bytes_per_file": 1 << 20,
        "min_msg_size": 26,
        "max_msg_size": 26 + 1024,
        "sync_every": 1000,
        "syncer": syncer,
    }
    options.update(kwargs)
    return DiskQueue(name, str(path), **options)


def _meta(path: Path, name: str = "t") -> str | None:
    try:
        return (path / f"{name}.diskqueue.meta.dat").read_text()
    except FileNotFoundError:
        return None


def _seg(path: Path, num: int, name: str = "t") -> Path:
    return path / f"{name}.diskqueue.{num:06d}.dat"


async def _settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_sync_every_syncs_without_waiting_for_the_tick(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, sync_every=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put_many([_frame(0), _frame(1)])
        await _settle()
        assert syncer.rounds == 0
        assert _meta(tmp_path) is None
        q.put(_frame(2))
        await _settle()
        assert syncer.rounds == 1
        assert _meta(tmp_path) == f"3\n0,0\n0,{3 * REC}\n"
        # reads count as well
        assert q.take(2) == [_frame(0), _frame(1)]
        await _settle()
        assert syncer.rounds == 1
        assert q.take(1) == [_frame(2)]
        await _settle()
        assert syncer.rounds == 2
        assert _meta(tmp_path) == f"0\n0,{3 * REC}\n0,{3 * REC}\n"
        assert trio.current_time() == 0
        nursery.cancel_scope.cancel()


async def test_tick_syncs_only_queues_with_activity(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    busy = _queue(tmp_path, syncer, "busy")
    idle = _queue(tmp_path, syncer, "idle")
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        busy.put(_frame(0))
        await _settle()
        mock_clock.jump(TIMEOUT - 0.01)
        await _settle()
        assert syncer.rounds == 0
        assert _meta(tmp_path, "busy") is None
        mock_clock.jump(0.01)
        await _settle()
        assert syncer.rounds == 1
        assert _meta(tmp_path, "busy") == f"1\n0,0\n0,{REC}\n"
        assert _meta(tmp_path, "idle") is None
        assert not idle.unsynced
        # no activity: the next tick syncs nothing
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert syncer.rounds == 1
        # a read is activity
        assert busy.take(1) == [_frame(0)]
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert syncer.rounds == 2
        assert _meta(tmp_path, "busy") == f"0\n0,{REC}\n0,{REC}\n"
        assert _meta(tmp_path, "idle") is None
        nursery.cancel_scope.cancel()


async def test_release_is_activity_for_the_tick(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Finishing handed-out messages moves the committed read position: the next tick must
    persist it (else an idle queue redelivers them after any later crash, however old)."""
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, track_consumption=True, max_bytes_per_file=2 * REC)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put_many([_frame(n) for n in range(3)])  # files 0 and 1
        assert q.take(3) == [_frame(n) for n in range(3)]
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert _meta(tmp_path) == f"3\n0,0\n1,{REC}\n"
        rounds = syncer.rounds
        q.release(framed_id(_frame(1)))  # the oldest is still owed: nothing to persist
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert syncer.rounds == rounds
        q.release(framed_id(_frame(0)))
        q.release(framed_id(_frame(2)))
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert syncer.rounds == rounds + 1
        assert _meta(tmp_path) == f"0\n1,{REC}\n1,{REC}\n"
        assert not _seg(tmp_path, 0).exists()
        nursery.cancel_scope.cancel()


async def test_roll_and_finished_segment_request_a_sync(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, max_bytes_per_file=2 * REC)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put_many([_frame(0), _frame(1)])
        await _settle()
        assert syncer.rounds == 0
        q.put(_frame(2))  # rolls to file 1
        await _settle()
        assert syncer.rounds == 1
        assert _meta(tmp_path) == f"3\n0,0\n1,{REC}\n"
        assert q.take(1) == [_frame(0)]
        await _settle()
        assert syncer.rounds == 1
        assert q.take(1) == [_frame(1)]  # file 0's last record: file 0 is finished
        await _settle()
        assert syncer.rounds == 2
        assert _meta(tmp_path) == f"1\n1,0\n1,{REC}\n"
        assert not _seg(tmp_path, 0).exists()
        assert _seg(tmp_path, 1).exists()
        assert q.take(1) == [_frame(2)]
        await _settle()
        assert syncer.rounds == 2
        assert trio.current_time() == 0
        nursery.cancel_scope.cancel()


async def test_close_does_the_final_sync_and_closes_files(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, track_consumption=True)
    other = _queue(tmp_path, syncer, "other")
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put_many([_frame(n) for n in range(4)])
        other.put(_frame(9))
        assert q.take(2) == [_frame(0), _frame(1)]
        q.release(framed_id(_frame(1)))
        q.deferred_due[b"%016x" % 3] = 123
        wfd = q._wfd
        rfd = q._rfd
        assert wfd is not None and rfd is not None
        q.close()
        other.close()
        await _settle()
        assert syncer.rounds == 0
        await syncer.close()
        assert syncer.rounds == 1
        assert _meta(tmp_path) == f"4\n0,0\n0,{4 * REC}\n"  # frame 0 still owed
        assert _meta(tmp_path, "other") == f"1\n0,0\n0,{REC}\n"
        assert (tmp_path / "t.diskqueue.deferred.dat").exists()
        assert q._wfd is None and q._rfd is None
        for fd in (wfd, rfd):
            with pytest.raises(OSError) as info:
                os.fstat(fd)
            assert info.value.errno == errno.EBADF
        nursery.cancel_scope.cancel()
    restarted = _queue(tmp_path, DiskSyncer(TIMEOUT, _inline), track_consumption=True)
    assert restarted.depth == 4
    assert restarted.deferred_due == {b"%016x" % 3: 123}
    assert restarted.take(10) == [_frame(n) for n in range(4)]


async def test_deleted_queue_is_closed_and_forgotten(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, "gone")
    other = _queue(tmp_path, syncer, "other")
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put(_frame(0))
        wfd = q._wfd
        assert wfd is not None
        q.delete()
        await _settle()
        assert syncer.rounds == 1
        with pytest.raises(OSError):
            os.fstat(wfd)
        assert sorted(os.listdir(tmp_path)) == []
        other.put(_frame(1))
        mock_clock.jump(TIMEOUT)
        await _settle()
        await syncer.close()
        assert sorted(os.listdir(tmp_path)) == [
            "other.diskqueue.000000.crc",
            "other.diskqueue.000000.dat",
            "other.diskqueue.meta.dat",
        ]
        nursery.cancel_scope.cancel()


def _fail_metadata_of(monkeypatch: pytest.MonkeyPatch, name: str, times: int) -> Callable[[], int]:
    """write_file_atomically fails with ENOSPC for queue `name`'s metadata `times` times."""
    failures = 0

    def write(fs: FileSystem, path: str, data: bytes, **kwargs: bool) -> None:
        nonlocal failures
        if os.path.basename(path) == f"{name}.diskqueue.meta.dat" and failures < times:
            failures += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        write_file_atomically(fs, path, data, **kwargs)

    monkeypatch.setattr(dqqueue, "write_file_atomically", write)
    return lambda: failures


async def test_failing_job_is_logged_and_retried_at_the_next_tick(
    tmp_path: Path,
    mock_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = _fail_metadata_of(monkeypatch, "bad", 2)
    syncer = DiskSyncer(TIMEOUT, _inline)
    bad = _queue(tmp_path, syncer, "bad", sync_every=1)
    good = _queue(tmp_path, syncer, "good", sync_every=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        with caplog.at_level(logging.ERROR, "trionsq.diskqueue"):
            bad.put(_frame(0))
            good.put(_frame(1))
            await _settle()
        assert failures() == 1
        assert syncer.rounds == 1
        assert "DISKQUEUE(bad) failed to sync - [Errno 28] No space left on device" in caplog.text
        assert "DISKQUEUE(good)" not in caplog.text
        assert _meta(tmp_path, "good") == f"1\n0,0\n0,{REC}\n"
        assert _meta(tmp_path, "bad") is None
        # not retried at once...
        assert bad.unsynced
        assert not good.unsynced
        # ...but at the tick (which fails once more), and the one after
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert failures() == 2
        assert syncer.rounds == 2
        assert _meta(tmp_path, "bad") is None
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert syncer.rounds == 3
        assert _meta(tmp_path, "bad") == f"1\n0,0\n0,{REC}\n"
        assert not bad.unsynced
        # the loop is alive and well
        good.put(_frame(2))
        await _settle()
        assert syncer.rounds == 4
        assert _meta(tmp_path, "good") == f"2\n0,0\n0,{2 * REC}\n"
        nursery.cancel_scope.cancel()


async def test_finished_segments_are_deleted_after_a_failed_sync_is_retried(
    tmp_path: Path, mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk makes the metadata write fail: the consumed segments, whose deletion would
    free space, must still be deleted by the sync that succeeds later."""
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, max_bytes_per_file=2 * REC)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put_many([_frame(n) for n in range(5)])  # files 0, 1, 2
        await _settle()
        assert syncer.rounds == 1
        failures = _fail_metadata_of(monkeypatch, "t", 1)
        assert q.take(4) == [_frame(n) for n in range(4)]
        assert q.take(1) == [_frame(4)]  # into file 2: files 0 and 1 are finished
        await _settle()
        assert failures() == 1
        assert syncer.rounds == 2
        assert _seg(tmp_path, 0).exists() and _seg(tmp_path, 1).exists()
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert syncer.rounds == 3
        assert _meta(tmp_path) == f"0\n2,{REC}\n2,{REC}\n"
        assert sorted(os.listdir(tmp_path)) == [
            "t.diskqueue.000002.crc",
            "t.diskqueue.000002.dat",
            "t.diskqueue.meta.dat",
        ]
        nursery.cancel_scope.cancel()


async def test_delete_during_an_in_flight_sync_leaves_no_metadata(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """The job captured before delete() runs (in its thread) after delete() removed the files:
    the metadata it writes must not outlive the deletion (a topic re-created with the same name
    would read it)."""
    gate = trio.Event()

    async def slow(fn: Callable[..., Any], *args: Any) -> Any:
        await gate.wait()
        return fn(*args)

    syncer = DiskSyncer(TIMEOUT, slow)
    q = _queue(tmp_path, syncer, "gone", sync_every=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put(_frame(0))
        await _settle()  # the sync job is prepared and "running"
        q.delete()
        assert os.listdir(tmp_path) == []
        gate.set()
        await _settle()
        assert syncer.rounds == 2
        assert os.listdir(tmp_path) == []
        nursery.cancel_scope.cancel()


async def test_queue_recreated_after_delete_keeps_its_files(tmp_path: Path) -> None:
    """A topic deleted and created again at once: the new queue (same name, same files) must not
    lose its metadata to the deleted queue's last job, whichever runs first."""
    syncer = DiskSyncer(TIMEOUT, _inline)
    old = _queue(tmp_path, syncer)
    old.put(_frame(0))
    await syncer.sync()
    old.delete()
    new = _queue(tmp_path, syncer)
    assert new.depth == 0
    new.put(_frame(1))
    await syncer.sync()
    assert _meta(tmp_path) == f"1\n0,0\n0,{REC}\n"
    assert _seg(tmp_path, 0).read_bytes()[4:] == _frame(1)[8:]
    assert new.take(5) == [_frame(1)]
    await syncer.close()


async def test_explicit_sync_of_all_queues(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    queues = [_queue(tmp_path, syncer, f"q{n}") for n in range(3)]
    for n, q in enumerate(queues):
        q.put_many([_frame(i) for i in range(n)])
    await syncer.sync()
    assert syncer.rounds == 1
    assert [_meta(tmp_path, f"q{n}") for n in range(3)] == [
        "0\n0,0\n0,0\n",
        f"1\n0,0\n0,{REC}\n",
        f"2\n0,0\n0,{2 * REC}\n",
    ]
    await syncer.close()


async def test_jobs_run_in_a_worker_thread(tmp_path: Path) -> None:
    threads: list[str] = []
    real_write = dqqueue.write_file_atomically

    def write(fs: FileSystem, path: str, data: bytes, **kwargs: bool) -> None:
        import threading

        threads.append(threading.current_thread().name)
        real_write(fs, path, data, **kwargs)

    syncer = DiskSyncer(60.0)
    q = _queue(tmp_path, syncer, sync_every=2)
    try:
        dqqueue.write_file_atomically = write  # type: ignore[assignment]
        async with trio.open_nursery() as nursery:
            await nursery.start(syncer.run)
            q.put_many([_frame(0), _frame(1)])
            with trio.fail_after(5):
                while syncer.rounds < 1:
                    await trio.sleep(0.001)
            assert _meta(tmp_path) == f"2\n0,0\n0,{2 * REC}\n"
            q.close()
            await syncer.close()
            assert syncer.rounds == 2
            nursery.cancel_scope.cancel()
    finally:
        dqqueue.write_file_atomically = real_write  # type: ignore[assignment]
    import threading

    assert len(threads) == 2
    assert threading.main_thread().name not in threads
