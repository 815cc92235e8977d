"""Publishers waiting for a quorum (docs/replication.md section 6, "Publishing"): a replicated
topic's `AckQueue` of waiters (trionsq/nsqd/acks.py: a connection's held answers, a waiting
task), each released once a quorum has written the stream up to its target, or failed (the
primary stepped down, or --replication-ack-timeout passed: `Replication`'s expiry task).
"""

from __future__ import annotations

import heapq
import itertools

from ..acks import Waiter


class AckQueue:
    """One replicated topic's waiters, by target (a stream position: messages accepted)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, float, Waiter]] = []
        self._seq = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, target: int, deadline: float, waiter: Waiter) -> None:
        heapq.heappush(self._heap, (target, next(self._seq), deadline, waiter))

    def release(self, total: int) -> None:
        """Every waiter whose target is within `total` (what a quorum has written)."""
        heap = self._heap
        while heap and heap[0][0] <= total:
            heapq.heappop(heap)[3].done(True)

    def fail_all(self) -> None:
        heap, self._heap = self._heap, []
        for entry in heap:
            entry[3].done(False)

    def expire(self, now: float) -> None:
        """Fail the waiters whose deadline has passed."""
        heap = self._heap
        if not heap:
            return
        late = [entry for entry in heap if entry[2] <= now]
        if not late:
            return
        self._heap = [entry for entry in heap if entry[2] > now]
        heapq.heapify(self._heap)
        for entry in late:
            entry[3].done(False)
