"""`DiskSyncer`'s rounds on a simulated disk: every queue's data is fsynced before any
metadata is written, and --sync-ack's group commit (`wait_durable`): once it returns, a power
cut keeps every write made before it, new segment names included; one round serves every
waiter; a failed fsync is reported, never acknowledged."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from trionsq.diskqueue import DiskQueue, DiskSyncer
from trionsq.diskqueue.simulated import SimulatedDisk
from trionsq.protocol.message import encode_message_frame

DATA = "/data"


def _frame(n: int) -> bytes:
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 1, b"%010d" % n)


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _queue(disk: SimulatedDisk, name: str, syncer: DiskSyncer | None, **kwargs: Any) -> DiskQueue:
    options: dict[str, Any] = {
        "max_bytes_per_file": 1 << 20,
        "min_msg_size": 26,
        "max_msg_size": 26 + 1024,
        "sync_every": 1 << 30,
        "syncer": syncer,
        "fs": disk,
    }
    options.update(kwargs)
    return DiskQueue(name, DATA, **options)


class RecordingDisk(SimulatedDisk):
    """A simulated disk that records fsyncs of data files and renames, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self._paths: dict[int, str] = {}

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self._paths[fd] = path
        return fd

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self.events.append("fsync " + self._paths[fd].rsplit("/", 1)[-1])

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        self.events.append("rename " + dst.rsplit("/", 1)[-1])


async def test_a_round_fsyncs_every_queue_before_any_metadata() -> None:
    disk = RecordingDisk()
    syncer = DiskSyncer(60.0, _inline)
    topic = _queue(disk, "t", syncer)
    channel = _queue(disk, "t:c", syncer)
    topic.put_many([_frame(0), _frame(1)])
    # the topic pump moves them on: the topic's read position advances past them
    channel.put_many(topic.take(2))
    await syncer.sync()
    data = [i for i, e in enumerate(disk.events) if e.startswith("fsync") and ".tmp" not in e]
    meta = [i for i, e in enumerate(disk.events) if e.startswith("rename")]
    assert len(data) == 2 and meta
    assert max(data) < min(meta), disk.events


async def test_a_failed_fsync_writes_no_metadata_in_its_round() -> None:
    disk = SimulatedDisk()
    syncer = DiskSyncer(60.0, _inline)
    good = _queue(disk, "good", syncer)
    bad = _queue(disk, "bad", syncer)
    good.put(_frame(0))
    bad.put(_frame(1))
    real_fsync = disk.fsync
    bad_fd = bad._wfd

    def fsync(fd: int) -> None:
        if fd == bad_fd:
            raise OSError(errno.EIO, "I/O error")
        real_fsync(fd)

    disk.fsync = fsync  # type: ignore[method-assign]
    await syncer.sync()
    assert f"{DATA}/good.diskqueue.meta.dat" not in disk.files()
    assert good.unsynced and bad.unsynced
    disk.fsync = real_fsync  # type: ignore[method-assign]
    await syncer.sync()
    assert f"{DATA}/good.diskqueue.meta.dat" in disk.files()


async def test_wait_durable_survives_a_power_cut(nursery: trio.Nursery) -> None:
    disk = SimulatedDisk()
    syncer = DiskSyncer(60.0, _inline, sync_ack=True)
    q = _queue(disk, "t", syncer, max_bytes_per_file=3 * 40)
    await nursery.start(syncer.run)
    frames = [_frame(n) for n in range(7)]  # three segments: two new names
    q.put_many(frames)
    assert await syncer.wait_durable()
    survivor = disk.power_cut()
    again = _queue(survivor, "t", None)
    assert again.take(10) == frames


async def test_before_wait_durable_a_power_cut_may_lose_the_write() -> None:
    disk = SimulatedDisk()
    syncer = DiskSyncer(60.0, _inline, sync_ack=True)
    q = _queue(disk, "t", syncer)
    q.put(_frame(0))
    assert disk.unsynced_bytes() > 0
    assert _queue(disk.power_cut(), "t", None).take(10) == []


async def test_one_round_serves_every_waiter(nursery: trio.Nursery) -> None:
    disk = SimulatedDisk()
    syncer = DiskSyncer(60.0, trio.to_thread.run_sync, sync_ack=True)
    queues = [_queue(disk, f"t{n}", syncer) for n in range(4)]
    await nursery.start(syncer.run)
    results: list[bool] = []

    async def publish(n: int) -> None:
        queues[n % 4].put(_frame(n))
        results.append(await syncer.wait_durable())

    async with trio.open_nursery() as publishers:
        for n in range(50):
            publishers.start_soon(publish, n)
    assert results == [True] * 50
    assert syncer.rounds <= 3  # 50 publishers, 4 queues: a round or two, not 50
    survivor = disk.power_cut()
    kept = sorted(f for n in range(4) for f in _queue(survivor, f"t{n}", None).take(100))
    assert kept == sorted(_frame(n) for n in range(50))


async def test_a_failed_fsync_is_not_acknowledged(nursery: trio.Nursery) -> None:
    disk = SimulatedDisk()
    syncer = DiskSyncer(60.0, _inline, sync_ack=True)
    q = _queue(disk, "t", syncer)
    await nursery.start(syncer.run)
    q.put(_frame(0))

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    disk.fsync = fsync  # type: ignore[method-assign]
    assert not await syncer.wait_durable()
    del disk.fsync
    q.put(_frame(1))
    assert await syncer.wait_durable()


async def test_sync_ack_rounds_fsync_queues_whose_metadata_is_not_due(
    nursery: trio.Nursery, mock_clock: trio.testing.MockClock
) -> None:
    disk = SimulatedDisk()
    syncer = DiskSyncer(60.0, _inline, sync_ack=True)
    quiet = _queue(disk, "quiet", syncer)
    busy = _queue(disk, "busy", syncer, sync_every=1)
    await nursery.start(syncer.run)
    quiet.put(_frame(0))  # no sync asked for
    busy.put(_frame(1))  # asks for one
    await trio.testing.wait_all_tasks_blocked()
    assert syncer.rounds == 1
    assert _queue(disk.power_cut(), "quiet", None).take(5) == [_frame(0)]
