"""`MemoryTrimmer`: gives memory back to the system after client connections close.

Memory freed by a closed connection (a partial PUB body, its reads) mostly stays with the
process: glibc's malloc keeps freed heap memory fragmented between live chunks, and a
connection that ended by an exception (a reset, say) keeps its buffers in reference cycles
until the cyclic GC happens to run. Measured with `trionsq bench hostile`: 300 connections
each holding half a 1 MiB PUB body took RSS from 50 to ~210 MiB, and 3 s after they closed it
was still 107 MiB (215 MiB when they reset); a full `gc.collect()` then glibc's
``malloc_trim(0)`` (5-10 ms) brought it back to 54 MiB. A fixed ``mallopt(M_MMAP_THRESHOLD)``
alone did not: the reads are 64 KiB, under the threshold, so they live in the heap anyway.

The trimmer is a task in the daemon's root nursery that sleeps until a connection closes
(`connection_closed`), waits for the burst of closes to settle (`quiet` seconds without one,
at most `max_delay` after the first), then, only if RSS grew by `min_growth` (8 MiB) or an
eighth since the last trim, runs the GC and ``malloc_trim(0)`` (the latter in `run_blocking`,
a worker thread). An idle daemon does no work; a churn of connections costs one RSS read
per burst.

Not given back: what Python's small-object allocator holds. Its 1 MiB arenas are released
only when empty, and a few long-lived objects allocated while many connections were open
(2000 idle ones: ~12 KiB of small objects each) pin them.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import platform
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("trionsq.nsqd")

MIB = 1024 * 1024
#: RSS growth since the last trim below which a burst of closes triggers nothing: the larger
#: of this and `GROWTH_FRACTION` of the RSS then.
MIN_GROWTH = 8 * MIB
GROWTH_FRACTION = 0.125

BlockingRunner = Callable[[Callable[[], Any]], Awaitable[Any]]


def _find_malloc_trim() -> Callable[[], Any] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return lambda: fn(0)


#: ``malloc_trim(0)`` where glibc has it, else None.
malloc_trim = _find_malloc_trim()

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """This process's resident set size (``/proc/self/statm``), None where there is none."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


async def _call_inline(fn: Callable[[], Any]) -> Any:
    return fn()


class MemoryTrimmer:
    """See the module docstring. `trim` and `rss` are replaceable (tests)."""

    def __init__(
        self,
        run_blocking: BlockingRunner | None = None,
        *,
        trim: Callable[[], Any] | None = malloc_trim,
        rss: Callable[[], int | None] = rss_bytes,
        collect: Callable[[], Any] = gc.collect,
        min_growth: int = MIN_GROWTH,
        growth_fraction: float = GROWTH_FRACTION,
        quiet: float = 1.0,
        max_delay: float = 5.0,
    ) -> None:
        self._run_blocking = run_blocking or _call_inline
        self._trim = trim
        self._rss = rss
        self._collect = collect
        self.min_growth = min_growth
        self.growth_fraction = growth_fraction
        self.quiet = quiet
        self.max_delay = max_delay
        self._closed = trio.Event()
        self._closed_at = 0.0
        #: RSS after the last trim (or at start), lowered when RSS is seen lower.
        self._reference: int | None = None
        #: Trims made, and RSS they gave back in all (for stats and tests).
        self.trims = 0
        self.released = 0

    def connection_closed(self) -> None:
        """A client connection ended (whatever the way): wake the task if it sleeps."""
        self._closed_at = trio.current_time()
        self._closed.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The task: wake on closes, settle, maybe trim. Returns at once where RSS cannot be
        read (it would have nothing to decide on)."""
        self._reference = self._rss()
        task_status.started()
        if self._reference is None:
            return
        while True:
            await self._closed.wait()
            first = trio.current_time()
            while True:
                settled = min(self._closed_at + self.quiet, first + self.max_delay)
                if trio.current_time() >= settled:
                    break
                await trio.sleep_until(settled)
            self._closed = trio.Event()
            await self.maybe_trim()

    async def maybe_trim(self) -> bool:
        """Collect garbage and trim malloc's heap if RSS grew enough since the last trim;
        whether it did."""
        rss = self._rss()
        reference = self._reference
        if rss is None or reference is None:
            return False
        if rss - reference < max(self.min_growth, reference * self.growth_fraction):
            self._reference = min(reference, rss)
            return False
        # A connection that ended by an exception holds its buffers in a cycle until the
        # GC runs: collect first, so that what it frees can be trimmed.
        self._collect()
        if self._trim is not None:
            await self._run_blocking(self._trim)
        after = self._rss() or rss
        self._reference = after
        self.trims += 1
        self.released += max(0, rss - after)
        log.debug(
            "NSQ: connections closed: RSS %.1f MiB -> %.1f MiB after gc and malloc_trim",
            rss / MIB,
            after / MIB,
        )
        return True
