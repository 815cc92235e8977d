"""What an idle nsqd costs in CPU with many topics and channels and no traffic.

Creates `topics` topics with `channels` channels each through nsqd's HTTP API
(``POST /topic/create``, ``POST /channel/create``) over a pool of keep-alive connections, waits
`settle` seconds, then reads the daemon's CPU time (``/proc/<pid>/stat``) over `window`
seconds: the percentage of one core it used while nothing happened. Also reports its RSS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from .common import BenchError, cpu_seconds, rss_bytes


@dataclass
class IdleResult:
    topics: int
    channels: int
    #: Seconds the HTTP requests creating them took.
    create_seconds: float
    #: Wall seconds and daemon CPU seconds over the measuring window.
    window: float
    cpu: float
    rss: int

    @property
    def cpu_percent(self) -> float:
        """Percent of one core used over the window."""
        return 100.0 * self.cpu / self.window if self.window > 0 else 0.0

    def line(self) -> str:
        requests = self.topics * (1 + self.channels)
        return (
            f"idle: {self.topics:,} topics x {self.channels} channels ({requests:,} requests in"
            f" {self.create_seconds:.1f}s): {self.cpu_percent:.2f}% of a core over"
            f" {self.window:.1f}s, RSS {self.rss / 2**20:,.1f} MiB"
        )


async def _create_worker(
    client: httpx.AsyncClient, base: str, names: Any, channels: int, prefix: str
) -> None:
    for index in names:
        topic = f"{prefix}{index}"
        await _post(client, f"{base}/topic/create", {"topic": topic})
        for c in range(channels):
            await _post(client, f"{base}/channel/create", {"topic": topic, "channel": f"ch{c}"})


async def _post(client: httpx.AsyncClient, url: str, params: dict[str, str]) -> None:
    resp = await client.post(url, params=params)
    if resp.status_code != 200:
        raise BenchError(f"POST {url} {params}: {resp.status_code} {resp.text[:200]!r}")


async def _create_all(
    http_address: tuple[str, int], topics: int, channels: int, concurrency: int, prefix: str
) -> None:
    host, port = http_address
    base = f"http://{host}:{port}"
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    names = iter(range(topics))  # shared: each worker takes the next topic
    async with (
        httpx.AsyncClient(limits=limits, timeout=60.0) as client,
        trio.open_nursery() as nursery,
    ):
        for _ in range(concurrency):
            nursery.start_soon(_create_worker, client, base, names, channels, prefix)


def create(
    http_address: tuple[str, int],
    topics: int,
    channels: int,
    *,
    concurrency: int = 16,
    prefix: str = "idle",
) -> float:
    """Create the topics and channels; returns the seconds it took."""
    start = time.perf_counter()
    try:
        trio.run(_create_all, http_address, topics, channels, concurrency, prefix)
    except* httpx.HTTPError as group:
        raise BenchError(f"creating topics: {group.exceptions[0]!r}") from None
    except* BenchError as group:
        raise group.exceptions[0] from None
    return time.perf_counter() - start


def cpu_over(pid: int, window: float) -> tuple[float, float]:
    """(wall seconds, CPU seconds) that process `pid` used over about `window` seconds."""
    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
    time.sleep(window)
    cpu1, wall1 = cpu_seconds(pid), time.perf_counter()
    return wall1 - wall0, cpu1 - cpu0


def run(
    pid: int,
    http_address: tuple[str, int],
    *,
    topics: int = 10_000,
    channels: int = 2,
    settle: float = 5.0,
    window: float = 10.0,
    concurrency: int = 16,
) -> IdleResult:
    """Create the topics and channels, let the daemon settle, measure its idle CPU."""
    took = create(http_address, topics, channels, concurrency=concurrency)
    time.sleep(settle)
    wall, cpu = cpu_over(pid, window)
    return IdleResult(topics, channels, took, wall, cpu, rss_bytes(pid))
