"""`bench memory`: what a queued message costs nsqd in resident memory.

Reads VmRSS of the nsqd process, publishes `count` (1,000,000) messages of `size` bytes to a
topic with no channel (so they all stay queued), waits for the last OK, lets the daemon settle,
and reads VmRSS again: the delta over `count` is the cost per queued message. The daemon must
keep them all in memory (``--mem-queue-size >= count``); `bench` starts its own daemon so.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass

from . import writer
from .common import rss_bytes


@dataclass
class MemoryResult:
    count: int
    size: int
    rss_before: int
    rss_after: int
    depth: int | None

    @property
    def delta(self) -> int:
        return self.rss_after - self.rss_before

    @property
    def per_message(self) -> float:
        return self.delta / self.count if self.count else 0.0

    def line(self) -> str:
        depth = "" if self.depth is None else f", topic depth {self.depth:,}"
        return (
            f"memory: {self.count:,} x {self.size} B queued: RSS {self.rss_before / 2**20:,.1f} MiB"
            f" -> {self.rss_after / 2**20:,.1f} MiB, +{self.delta / 2**20:,.1f} MiB,"
            f" {self.per_message:,.0f} B/msg{depth}"
        )


def topic_depth(http_address: tuple[str, int], topic: str) -> int | None:
    """The topic's depth from nsqd's ``/stats?format=json``, or None if it cannot be read."""
    host, port = http_address
    url = f"http://{host}:{port}/stats?format=json&topic={topic}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            stats = json.load(resp)
    except (OSError, ValueError):
        return None
    stats = stats.get("data", stats)  # nsqd < 1.0 wrapped the reply in "data"
    for t in stats.get("topics") or []:
        if t.get("topic_name") == topic:
            depth = t.get("depth")
            return int(depth) if depth is not None else None
    return None


def run(
    address: tuple[str, int],
    pid: int,
    topic: str,
    *,
    size: int = 100,
    batch_size: int = 200,
    count: int = 1_000_000,
    procs: int = 1,
    settle: float = 1.0,
    http_address: tuple[str, int] | None = None,
) -> MemoryResult:
    """Publish `count` messages to `topic` and measure nsqd's RSS growth."""
    before = rss_bytes(pid)
    writer.run(address, topic, size=size, batch_size=batch_size, procs=procs, count=count)
    time.sleep(settle)
    after = rss_bytes(pid)
    depth = topic_depth(http_address, topic) if http_address else None
    published = -(-count // batch_size) * batch_size
    return MemoryResult(published, size, before, after, depth)
