"""`DiskSyncer`: the one task that makes every disk queue durable, off the event loop.

A queue asks for a sync after --sync-every reads and writes, when it rolls to a new segment or
finishes reading one; every --sync-timeout, each queue with any activity since its last sync is
synced too (go-diskqueue's rules). The syncer gathers the queues due, captures what each must
persist (`DiskQueue.prepare_sync`, in the event loop) and runs all their fsyncs and metadata
writes in one worker thread, so many queues cost one thread hand-off and the loop never waits on
the disk.
"""

from __future__ import annotations

import logging
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
        self, sync_timeout: float, run_blocking: BlockingRunner = trio.to_thread.run_sync
    ) -> None:
        self.sync_timeout = sync_timeout
        self._run_blocking = run_blocking
        self._queues: set[DiskQueue] = set()
        self._due: set[DiskQueue] = set()
        self._wake = trio.Event()
        # One sync at a time: a job owns the file descriptors it was given until it ends.
        self._lock = trio.Lock()
        #: Completed sync rounds (tests wait on it).
        self.rounds = 0

    def add(self, queue: DiskQueue) -> None:
        self._queues.add(queue)

    def request(self, queue: DiskQueue) -> None:
        self._due.add(queue)
        self._wake.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Sync queues as they ask and on every --sync-timeout tick, until cancelled."""
        task_status.started()
        tick = trio.current_time() + self.sync_timeout
        while True:
            with trio.move_on_at(tick):
                await self._wake.wait()
            self._wake = trio.Event()
            now = trio.current_time()
            if now >= tick:
                self._due.update(q for q in self._queues if q.unsynced)
                tick = now + self.sync_timeout
            if self._due:
                due, self._due = self._due, set()
                await self.sync(due)

    async def sync(self, queues: set[DiskQueue] | None = None, *, final: bool = False) -> None:
        """Sync `queues` (default: all) now; `final` also closes their files (shutdown)."""
        async with self._lock:
            chosen = set(self._queues) if queues is None else queues
            jobs = [(queue, queue.prepare_sync(final)) for queue in chosen]
            for queue in chosen:
                if queue.deleted or final:
                    self._queues.discard(queue)
            errors = await self._run_blocking(_run_jobs, [job for _, job in jobs])
            for (queue, _), error in zip(jobs, errors, strict=True):
                if error is not None:
                    log.error("DISKQUEUE(%s) failed to sync - %s", queue.name, error)
                    queue.sync_failed()
            self.rounds += 1

    async def close(self) -> None:
        """Shutdown: the final sync of every queue, then their files are closed."""
        self._due.clear()
        await self.sync(final=True)


def _run_jobs(jobs: list[SyncJob]) -> list[Exception | None]:
    errors: list[Exception | None] = []
    for job in jobs:
        try:
            job()
        except Exception as err:  # one queue's failure must not stop the others' syncs
            errors.append(err)
        else:
            errors.append(None)
    return errors
