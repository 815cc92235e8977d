"""`DiskSyncer`'s --sync-timeout tick runs only while queues have activity: an idle syncer
never wakes and never looks at its queues, however many; activity arms the tick for
--sync-timeout after it happened, and the tick looks only at the queues that had some.
Virtual clock, inline blocking work."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trionsq.diskqueue import DiskQueue, DiskSyncer
from trionsq.protocol.message import encode_message_frame, framed_id

TIMEOUT = 2.0
REC = 40  # bytes on disk per _frame: 4 + 26 + 10


def _frame(n: int) -> bytes:
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 1, b"%010d" % n)


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _queue(path: Path, syncer: DiskSyncer, name: str, **kwargs: Any) -> DiskQueue:
    options: dict[str, Any] = {
        "max_bytes_per_file": 1 << 20,
        "min_msg_size": 26,
        "max_msg_size": 26 + 1024,
        "sync_every": 1000,
        "syncer": syncer,
    }
    options.update(kwargs)
    return DiskQueue(name, str(path), **options)


def _meta(path: Path, name: str) -> str | None:
    try:
        return (path / f"{name}.diskqueue.meta.dat").read_text()
    except FileNotFoundError:
        return None


class _Steps(trio.abc.Instrument):
    """Counts the steps of tasks whose name contains `name`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.name in task.name:
            self.steps += 1


@pytest.fixture
def looked_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the queues whose `unsynced` was read (the tick's test), in order."""
    names: list[str] = []
    original = DiskQueue.unsynced

    def unsynced(self: DiskQueue) -> bool:
        names.append(self.name)
        return bool(original.fget(self))  # type: ignore[attr-defined]

    monkeypatch.setattr(DiskQueue, "unsynced", property(unsynced))
    yield names


async def _settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_an_idle_syncer_never_wakes_and_looks_at_no_queue(
    tmp_path: Path, mock_clock: trio.testing.MockClock, looked_at: list[str]
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    queues = [_queue(tmp_path, syncer, f"q{i}") for i in range(300)]
    steps = _Steps("syncer-task")
    trio.lowlevel.add_instrument(steps)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run, name="syncer-task")
        await _settle()
        steps.steps = 0
        for _ in range(100):
            mock_clock.jump(TIMEOUT)
            await _settle()
        assert steps.steps == 0
        assert looked_at == []
        assert syncer.rounds == 0
        assert not syncer.tick_armed
        assert not any(q.unsynced for q in queues)
        nursery.cancel_scope.cancel()
    trio.lowlevel.remove_instrument(steps)


async def test_activity_after_a_long_idle_time_is_synced_one_timeout_later(
    tmp_path: Path, mock_clock: trio.testing.MockClock, looked_at: list[str]
) -> None:
    """The tick is armed from the moment of the activity (not from when the task notices),
    and it looks only at the queue that had activity."""
    syncer = DiskSyncer(TIMEOUT, _inline)
    queues = [_queue(tmp_path, syncer, f"q{i}") for i in range(50)]
    busy = queues[17]
    steps = _Steps("syncer-task")
    trio.lowlevel.add_instrument(steps)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run, name="syncer-task")
        mock_clock.jump(12.3)
        await _settle()
        steps.steps = 0
        busy.put(_frame(0))
        assert syncer.tick_armed
        # Arming moved the sleeping task's deadline: it was not woken for that.
        mock_clock.jump(TIMEOUT - 0.01)
        await _settle()
        assert steps.steps == 0
        assert _meta(tmp_path, "q17") is None
        mock_clock.jump(0.01)
        await _settle()
        assert syncer.rounds == 1
        assert _meta(tmp_path, "q17") == f"1\n0,0\n0,{REC}\n"
        assert looked_at == ["q17"]
        assert not syncer.tick_armed
        # Quiet again: nothing more.
        steps.steps = 0
        for _ in range(20):
            mock_clock.jump(TIMEOUT)
            await _settle()
        assert steps.steps == 0
        assert syncer.rounds == 1
        nursery.cancel_scope.cancel()
    trio.lowlevel.remove_instrument(steps)


async def test_steady_activity_is_synced_every_timeout(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, "q")
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        for n in range(5):
            q.put(_frame(n))
            mock_clock.jump(TIMEOUT)
            await _settle()
            assert syncer.rounds == n + 1
            assert _meta(tmp_path, "q") == f"{n + 1}\n0,0\n0,{(n + 1) * REC}\n"
        nursery.cancel_scope.cancel()


async def test_activity_during_a_round_arms_the_next_tick(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """A write while the tick's round runs (its blocking work in a worker thread) is synced
    by the next tick: the queue reports it, as it was captured before."""
    gate = trio.Event()
    syncer_ref: list[DiskSyncer] = []

    async def slow(fn: Callable[..., Any], *args: Any) -> Any:
        await gate.wait()
        return fn(*args)

    syncer = DiskSyncer(TIMEOUT, slow)
    syncer_ref.append(syncer)
    q = _queue(tmp_path, syncer, "q")
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put(_frame(0))
        mock_clock.jump(TIMEOUT)
        await _settle()  # the round waits on the gate
        q.put(_frame(1))
        assert syncer.tick_armed
        gate.set()
        await _settle()
        assert syncer.rounds == 1
        assert _meta(tmp_path, "q") == f"1\n0,0\n0,{REC}\n"
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert syncer.rounds == 2
        assert _meta(tmp_path, "q") == f"2\n0,0\n0,{2 * REC}\n"
        nursery.cancel_scope.cancel()


async def test_a_release_after_a_quiet_tick_arms_the_tick(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    syncer = DiskSyncer(TIMEOUT, _inline)
    q = _queue(tmp_path, syncer, "q", track_consumption=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        q.put_many([_frame(0), _frame(1)])
        assert q.take(2) == [_frame(0), _frame(1)]
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert _meta(tmp_path, "q") == f"2\n0,0\n0,{2 * REC}\n"
        mock_clock.jump(10 * TIMEOUT)
        await _settle()
        assert not syncer.tick_armed
        q.release(framed_id(_frame(0)))
        assert syncer.tick_armed
        mock_clock.jump(TIMEOUT)
        await _settle()
        assert _meta(tmp_path, "q") == f"1\n0,{REC}\n0,{2 * REC}\n"
        nursery.cancel_scope.cancel()
