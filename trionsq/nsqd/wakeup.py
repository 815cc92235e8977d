"""`Wakeup`: a reusable, level-triggered wake-up flag for one waiting task.

Cheaper than a `trio.Event` per cycle (which cannot be reset): setting it when nobody waits
just raises the flag; setting it again is a no-op. Used by every pump in the daemon.
"""

from __future__ import annotations

import trio


class Wakeup:
    __slots__ = ("_is_set", "_task")

    def __init__(self) -> None:
        self._task: trio.lowlevel.Task | None = None
        self._is_set = False

    @property
    def idle(self) -> bool:
        """Not set: the waiting task has nothing pending (or there is none)."""
        return not self._is_set

    def set(self) -> None:
        if self._is_set:
            return
        self._is_set = True
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Return once the flag is set (at once if it already is), clearing it."""
        if self._is_set:
            self._is_set = False
            await trio.lowlevel.checkpoint()
            return
        if self._task is not None:
            raise RuntimeError("Wakeup supports a single waiting task")
        self._task = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        self._is_set = False
