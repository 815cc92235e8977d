"""Picking an upstream for to_http and nsq_to_nsq: round-robin, and go-hostpool's standard
pool (round-robin over live hosts; a failed host sits out a doubling retry delay; when all are
dead, all are revived)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

__all__ = ["HostPool", "RoundRobin"]


class RoundRobin:
    """Go's ``counter % len(addresses)`` with the counter incremented first."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.hosts = list(hosts)
        self.counter = 0

    def get(self) -> str:
        self.counter += 1
        return self.hosts[self.counter % len(self.hosts)]

    def mark(self, host: str, ok: bool) -> None:
        """Round-robin ignores outcomes."""


class HostPool:
    """go-hostpool's standard pool (also used for ``epsilon-greedy`` here)."""

    def __init__(
        self,
        hosts: Sequence[str],
        initial_retry_delay: float = 30.0,
        max_retry_delay: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hosts = list(hosts)
        self.initial_retry_delay = initial_retry_delay
        self.max_retry_delay = max_retry_delay
        self.clock = clock
        self._next = 0
        self._dead: dict[str, tuple[float, float]] = {}  # host -> (retry_at, retry_delay)

    def get(self) -> str:
        now = self.clock()
        n = len(self.hosts)
        for i in range(n):
            host = self.hosts[(self._next + i) % n]
            dead = self._dead.get(host)
            if dead is None or dead[0] <= now:
                self._next = (self._next + i + 1) % n
                return host
        self._dead.clear()  # all dead: go-hostpool resets them all
        return self.get()

    def mark(self, host: str, ok: bool) -> None:
        if ok:
            self._dead.pop(host, None)
            return
        previous = self._dead.get(host)
        delay = (
            self.initial_retry_delay
            if previous is None
            else min(previous[1] * 2, self.max_retry_delay)
        )
        self._dead[host] = (self.clock() + delay, delay)

    def is_dead(self, host: str) -> bool:
        dead = self._dead.get(host)
        return dead is not None and dead[0] > self.clock()
