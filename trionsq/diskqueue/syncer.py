"""`DiskSyncer`: the one task that makes every disk queue durable, off the event loop.

A queue asks for a sync after --sync-every reads and writes, when it rolls to a new segment or
finishes reading one; every --sync-timeout, each queue with any activity since its last sync is
synced too (go-diskqueue's rules). The syncer gathers the queues due, captures what each must
persist (`DiskQueue.prepare_sync`, in the event loop) and runs the round's blocking work in one
worker thread, so many queues cost one thread hand-off and the loop never waits on the disk.

The --sync-timeout tick runs only while there is activity: a queue reports its first read,
write or release after a sync (`mark_active`, `mark_dirty`), which arms the tick for
--sync-timeout later if it is not armed; the tick syncs the queues reported since the last one
and disarms. So activity is synced within --sync-timeout, as go-diskqueue's per-queue ticker
does, while an idle daemon's syncer never wakes, whatever the number of queues (a tick that
looked at each of 30,000 idle queues cost ~25 ms every 2 s, most of an idle daemon's CPU).

A round has two steps: first every queue's data is fsynced, then (only if all of that
succeeded) each queue writes its metadata and deletes what it no longer needs. A message moved
from one queue to another (topic to channel, a deferred message back to its queue) is thus
never recorded as gone from the first before the second's copy is durable.

Group commit (--sync-ack): `wait_durable` returns once every write made before it was called
has been fsynced. Such a round also fsyncs every queue written to since its last sync (not
only those whose metadata is due), and the publishers that wait meanwhile are all served by the
next round: one fsync per queue covers every one of them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .queue import DiskQueue, SyncJob

log = logging.getLogger("trionsq.diskqueue")

#: How blocking work is run: `trio.to_thread.run_sync`, or inline where a test's MockClock
#: must not jump while a thread works.
BlockingRunner = Callable[..., Awaitable[Any]]


class DiskSyncer:
    def __init__(
        self,
        sync_timeout: float,
        run_blocking: BlockingRunner = trio.to_thread.run_sync,
        *,
        sync_ack: bool = False,
    ) -> None:
        """`sync_ack`: every round fsyncs every queue written to (see the module docstring)."""
        self.sync_timeout = sync_timeout
        self.sync_ack = sync_ack
        self._run_blocking = run_blocking
        self._queues: set[DiskQueue] = set()
        self._due: set[DiskQueue] = set()
        self._dirty: set[DiskQueue] = set()
        # Queues with activity since the tick last looked at them, and when the tick is due
        # (inf: disarmed, nothing happened since it last ran).
        self._active: set[DiskQueue] = set()
        self._tick = math.inf
        # The scope the task sleeps in while waiting for the tick (arming moves its deadline).
        self._sleep: trio.CancelScope | None = None
        self._wake = trio.Event()
        # One sync at a time: a job owns the file descriptors it was given until it ends.
        self._lock = trio.Lock()
        #: Completed sync rounds (tests wait on it).
        self.rounds = 0
        self._started = 0
        self._wanted = 0  # the highest round a `wait_durable` waits for
        self._failed_rounds: list[int] = []
        self._progress = trio.Event()

    def add(self, queue: DiskQueue) -> None:
        self._queues.add(queue)

    def request(self, queue: DiskQueue) -> None:
        """`queue`'s metadata is due: sync it soon."""
        self._due.add(queue)
        self._wake.set()

    def mark_dirty(self, queue: DiskQueue) -> None:
        """`queue` was written to since its last sync (an acknowledgement may wait for it)."""
        self._dirty.add(queue)
        self.mark_active(queue)

    def mark_active(self, queue: DiskQueue) -> None:
        """`queue` had its first activity since its last sync: the next tick looks at it."""
        self._active.add(queue)
        if self._tick == math.inf:
            # Armed from when the activity happened, without waking the task: its sleep's
            # deadline moves.
            self._tick = trio.current_time() + self.sync_timeout
            if self._sleep is not None:
                self._sleep.deadline = self._tick

    @property
    def tick_armed(self) -> bool:
        """The --sync-timeout tick is due (some queue had activity since the last one)."""
        return self._tick != math.inf

    async def wait_durable(self) -> bool:
        """Wait until every write made so far is fsynced (group commit); False if the round
        that should have made them durable failed."""
        target = self._started + 1
        self._wanted = max(self._wanted, target)
        self._wake.set()
        while self.rounds < target:
            await self._progress.wait()
        return target not in self._failed_rounds

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Sync queues as they ask and on the --sync-timeout tick (armed by activity), until
        cancelled."""
        task_status.started()
        while True:
            if self._wanted <= self._started:
                with trio.CancelScope(deadline=self._tick) as self._sleep:
                    await self._wake.wait()
                self._sleep = None
            self._wake = trio.Event()
            if trio.current_time() >= self._tick:
                # Disarmed: the next activity (on these queues too, once this round has
                # captured them) arms it again.
                self._tick = math.inf
                active, self._active = self._active, set()
                self._due.update(q for q in active if q.unsynced and q in self._queues)
            if self._due or self._wanted > self._started:
                due, self._due = self._due, set()
                await self.sync(due)

    async def sync(self, queues: set[DiskQueue] | None = None, *, final: bool = False) -> None:
        """Sync `queues` (default: all) now; `final` also closes their files (shutdown)."""
        async with self._lock:
            self._started += 1
            round_number = self._started
            due = set(self._queues) if queues is None else set(queues)
            # Queues written to whose metadata is not due: their data only (--sync-ack, or a
            # round someone waits on).
            data_only = set()
            if self.sync_ack or self._wanted >= round_number:
                data_only = {q for q in self._dirty if q not in due and not q.deleted}
                # Only now: a queue stays marked until a round fsyncs it (it is marked once
                # per sync, when its first write after one happens).
                self._dirty.clear()
            else:
                self._dirty -= due
            jobs: list[tuple[DiskQueue, SyncJob]] = [
                (queue, queue.prepare_sync(final)) for queue in due
            ]
            jobs += [(queue, queue.prepare_sync(metadata=False)) for queue in data_only]
            for queue in due:
                if queue.deleted or final:
                    self._queues.discard(queue)
            errors = await self._run_blocking(_run_round, [job for _, job in jobs])
            failed = False
            for (queue, _), error in zip(jobs, errors, strict=True):
                if error is not None:
                    failed = True
                    queue.logger.error("DISKQUEUE(%s) failed to sync - %s", queue.name, error)
                    queue.sync_failed()
                else:
                    queue.sync_succeeded()
            if failed:
                self._failed_rounds = [*self._failed_rounds[-63:], round_number]
            self.rounds = round_number
            self._progress.set()
            self._progress = trio.Event()

    async def close(self) -> bool:
        """Shutdown: the final sync of every queue, then their files are closed; False if
        some queue failed to sync."""
        self._due.clear()
        await self.sync(final=True)
        return self.rounds not in self._failed_rounds


def _run_round(jobs: list[SyncJob]) -> list[Exception | None]:
    """Every job's fsync, then, if all of them succeeded, every job's persist step. One
    queue's failure does not stop the others' fsyncs; it stops every persist step (each queue
    is marked failed and tries again next round)."""
    errors: list[Exception | None] = []
    for job in jobs:
        try:
            job.fsync()
        except Exception as err:
            errors.append(err)
        else:
            errors.append(None)
    first = next((err for err in errors if err is not None), None)
    if first is not None:
        return [
            err or OSError(f"not persisted: another queue failed to fsync ({first})")
            for err in errors
        ]
    for i, job in enumerate(jobs):
        try:
            job.persist()
        except Exception as err:
            errors[i] = err
    return errors
