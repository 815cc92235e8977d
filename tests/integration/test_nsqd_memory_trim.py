"""nsqd gives memory back after connections close: a connection holding a large partial PUB
body, closed or reset, wakes the memory trimmer, whose GC and trim run after the body's
buffers are garbage. In process, over real loopback TCP; the trim itself is a fake that looks
at what is still alive when it is called."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import socket
import struct

import pytest
import trio

from tests.nsqd_harness import run_inline
from trionsq.nsqd.memory_trim import MemoryTrimmer
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.options import NSQDOptions
from trionsq.protocol import MAGIC_V2, CommandParser

PARTIAL = 256 * 1024


def _holds(parser: CommandParser, marker: bytes) -> bool:
    """Whether a bytes-like object reachable from `parser` contains `marker`."""
    stack = list(gc.get_referents(parser))
    while stack:
        obj = stack.pop()
        if isinstance(obj, bytes | bytearray) and marker in obj:
            return True
        if isinstance(obj, list | tuple):
            stack.extend(obj)
    return False


def _parsers_holding(marker: bytes) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is CommandParser and _holds(o, marker))


class Trims:
    """The fake trim: counts calls, and how many parsers holding the test's body were still
    alive at each."""

    def __init__(self, marker: bytes = b"") -> None:
        self.marker = marker
        self.alive_at_trim: list[int] = []
        self.called = trio.Event()

    def __call__(self) -> int:
        self.alive_at_trim.append(_parsers_holding(self.marker) if self.marker else 0)
        self.called.set()
        return 1


async def _start(nursery: trio.Nursery, data_path: str, trims: Trims) -> NSQD:
    options = dataclasses.replace(
        NSQDOptions(), tcp_address="127.0.0.1:0", http_address="", data_path=data_path
    )
    nsqd = NSQD(options, run_blocking=run_inline)
    # Any growth counts, so that the test does not depend on this process's RSS.
    nsqd.memory_trimmer = MemoryTrimmer(
        run_inline, trim=trims, min_growth=0, growth_fraction=0.0, quiet=0.05, max_delay=0.5
    )
    await nursery.start(nsqd.run)
    return nsqd


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_a_closed_partial_body_is_collected_then_trimmed(nursery, tmp_path, caplog, reset):
    # No INFO records: pytest keeps them, and a record's exception would keep the body alive.
    caplog.set_level(logging.WARNING, logger="trionsq.nsqd")
    marker = os.urandom(16)
    trims = Trims(marker)
    nsqd = await _start(nursery, str(tmp_path), trims)
    host, port = nsqd.tcp_address
    stream = await trio.open_tcp_stream(host, port)
    await stream.send_all(MAGIC_V2 + b"PUB t\n" + struct.pack(">i", 1024 * 1024))
    await stream.send_all(marker * (PARTIAL // len(marker)))
    with trio.fail_after(10):
        while not _parsers_holding(marker):
            await trio.sleep(0.01)
    assert trims.alive_at_trim == []  # nothing closed yet: no trim
    if reset:
        # SO_LINGER 0: the close is a reset, and nsqd's read fails with an exception
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()
    with trio.fail_after(10):
        await trims.called.wait()
    assert trims.alive_at_trim == [0]  # the body was garbage (collected) before the trim
    assert nsqd.memory_trimmer.trims == 1


async def test_the_daemon_starts_a_trimmer_that_sleeps_until_a_close(nursery, tmp_path):
    trims = Trims()
    nsqd = await _start(nursery, str(tmp_path), trims)
    await trio.sleep(0.3)
    assert trims.alive_at_trim == []
    host, port = nsqd.tcp_address
    stream = await trio.open_tcp_stream(host, port)
    await stream.send_all(MAGIC_V2)
    await stream.aclose()
    with trio.fail_after(10):
        await trims.called.wait()
