"""MemoryTrimmer on a mock clock with fake RSS readings: idle, it does nothing; after a burst
of closes it waits for the burst to settle, then collects garbage and trims, once, and only if
RSS grew enough since the last time."""

from __future__ import annotations

import platform
import sys
from typing import Any

import pytest
import trio

from trionsq.nsqd import memory_trim
from trionsq.nsqd.memory_trim import MIB, MemoryTrimmer


class FakeMemory:
    """RSS readings from a script, and a log of the trimmer's calls."""

    def __init__(self, rss: int) -> None:
        self.rss = rss
        self.calls: list[str] = []
        self.reads = 0
        #: RSS after a trim (None: unchanged).
        self.after_trim: int | None = None

    def read_rss(self) -> int:
        self.reads += 1
        return self.rss

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def trim(self) -> int:
        self.calls.append("trim")
        if self.after_trim is not None:
            self.rss = self.after_trim
        return 1


def trimmer(mem: FakeMemory, **kw: Any) -> MemoryTrimmer:
    return MemoryTrimmer(trim=mem.trim, rss=mem.read_rss, collect=mem.collect, **kw)


async def test_an_idle_trimmer_does_no_work(nursery, autojump_clock):
    mem = FakeMemory(100 * MIB)
    t = trimmer(mem)
    await nursery.start(t.run)
    await trio.sleep(24 * 3600)
    assert mem.reads == 1  # its baseline, at start
    assert mem.calls == [] and t.trims == 0


async def test_a_burst_of_closes_is_trimmed_once_after_it_settles(nursery, autojump_clock):
    mem = FakeMemory(100 * MIB)
    t = trimmer(mem, quiet=1.0, max_delay=5.0)
    await nursery.start(t.run)
    mem.rss = 300 * MIB
    mem.after_trim = 110 * MIB
    start = trio.current_time()
    for _ in range(10):
        t.connection_closed()
        await trio.sleep(0.1)
    await trio.sleep(0.5)  # 0.6 s after the last close: not settled yet
    assert mem.calls == []
    await trio.sleep(1.0)
    assert mem.calls == ["collect", "trim"]  # garbage first, so that its memory is trimmed
    assert t.trims == 1 and t.released == 190 * MIB
    assert trio.current_time() - start < 3.0
    await trio.sleep(3600)
    assert mem.calls == ["collect", "trim"]


async def test_steady_closes_are_trimmed_within_max_delay(nursery, autojump_clock):
    mem = FakeMemory(100 * MIB)
    t = trimmer(mem, quiet=1.0, max_delay=5.0)
    await nursery.start(t.run)
    mem.rss = 300 * MIB
    start = trio.current_time()
    while not t.trims:
        t.connection_closed()
        await trio.sleep(0.5)
        assert trio.current_time() - start < 6.0


async def test_small_growth_is_not_trimmed(nursery, autojump_clock):
    mem = FakeMemory(100 * MIB)
    t = trimmer(mem, min_growth=8 * MIB, growth_fraction=0.125)
    await nursery.start(t.run)
    mem.rss = 110 * MIB  # +10 MiB: under an eighth of 100 MiB
    t.connection_closed()
    await trio.sleep(10)
    assert mem.calls == [] and t.trims == 0
    mem.rss = 113 * MIB
    t.connection_closed()
    await trio.sleep(10)
    assert mem.calls == ["collect", "trim"]


async def test_growth_is_measured_from_the_lowest_rss_seen(nursery, autojump_clock):
    mem = FakeMemory(100 * MIB)
    t = trimmer(mem, min_growth=8 * MIB, growth_fraction=0.0)
    await nursery.start(t.run)
    mem.rss = 60 * MIB
    t.connection_closed()
    await trio.sleep(10)
    assert t.trims == 0
    mem.rss = 70 * MIB  # +10 MiB over 60, though under the 100 at start
    t.connection_closed()
    await trio.sleep(10)
    assert t.trims == 1


async def test_without_rss_the_task_ends_at_once(nursery, autojump_clock):
    t = MemoryTrimmer(rss=lambda: None, trim=lambda: pytest.fail("trimmed"))
    await nursery.start(t.run)
    t.connection_closed()
    await trio.sleep(10)
    assert t.trims == 0


def test_malloc_trim_is_found_where_glibc_has_it():
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        assert memory_trim.malloc_trim is None
        return
    assert memory_trim.malloc_trim is not None
    assert memory_trim.malloc_trim() in (0, 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm")
def test_rss_is_read_on_linux():
    rss = memory_trim.rss_bytes()
    assert rss is not None and rss > MIB
