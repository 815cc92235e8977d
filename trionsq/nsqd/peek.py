"""Peek (beyond NSQ; NSQ #848, #1482): what a channel or topic holds queued and deferred, read
without changing any delivery state, for ``GET /channel/peek`` and ``GET /topic/peek``.

Queued messages come in the order they would be delivered: the memory queue, then the disk
queue from its reader's position on (read by a `QueuePeek` in a worker thread, so the event
loop never waits on the disk). Deferred messages (DPUB, REQ with a delay) come apart, soonest
due first, with their due time. In-flight messages are not queued and are not shown (their
number is in ``/stats``). Nothing here runs unless a peek is asked for.
"""

from __future__ import annotations

import base64
import heapq
import itertools
import time
from collections.abc import Iterable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..diskqueue import DiskQueue
from ..protocol.message import FRAMED_BODY_OFFSET, framed_id
from .backend import Backend, to_wall_ns

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

#: Messages per list when ``n`` is not given, and the most ``n`` may ask for.
DEFAULT_N = 10
MAX_N = 1000
#: Bodies per list stop once they add up to this (at least one message is always shown).
MAX_BYTES = 4 * 1024 * 1024

_TEXT_CONTROLS = frozenset("\t\n\r")

Json = dict[str, Any]


async def peek_channel(nsqd: NSQD, channel: Channel, n: int) -> Json:
    """The ``/channel/peek`` answer: up to `n` queued and up to `n` deferred messages."""
    queued = await _queued(nsqd, channel.memory, channel.backend, n)
    return {
        "topic_name": channel.topic.name,
        "channel_name": channel.name,
        "depth": channel.depth,
        "deferred_count": len(channel.deferred),
        "in_flight_count": channel.in_flight_count,
        "paused": channel.paused,
        "messages": queued,
        "deferred": _deferred_json(
            (due, frame) for due, _, frame in _heap_smallest(channel.deferred, n)
        ),
    }


async def peek_topic(nsqd: NSQD, topic: Topic, n: int) -> Json:
    """The ``/topic/peek`` answer: what waits in the topic itself (not yet copied to its
    channels: no channel yet, paused, or a disk backlog being moved)."""
    queued = await _queued(nsqd, topic.memory, topic.backend, n)
    return {
        "topic_name": topic.name,
        "depth": topic.depth,
        "deferred_count": len(topic.deferred),
        "paused": topic.paused,
        "messages": queued,
        "deferred": _deferred_json(
            (due, frame) for frame, due in heapq.nsmallest(n, topic.deferred, key=itemgetter(1))
        ),
    }


async def _queued(nsqd: NSQD, memory: Iterable[bytes], backend: Backend, n: int) -> list[Json]:
    frames = list(itertools.islice(memory, n))
    size = sum(len(f) for f in frames)
    out = [message_json(frame, "memory") for frame in _within(frames)]
    if len(out) < n and size < MAX_BYTES and isinstance(backend, DiskQueue) and backend.depth:
        view = backend.peek()
        on_disk = await nsqd.run_blocking(view.read, n - len(out), MAX_BYTES - size)
        # Messages that were deferred when nsqd last stopped are deferred again when read.
        due_times = backend.deferred_due
        now = time.time_ns()
        for frame in on_disk:
            due = due_times.get(framed_id(frame)) if due_times else None
            out.append(message_json(frame, "disk", due if due is not None and due > now else None))
    return out


def _within(frames: list[bytes]) -> list[bytes]:
    """The first frames whose sizes add up to MAX_BYTES (at least one)."""
    total = 0
    for i, frame in enumerate(frames):
        total += len(frame)
        if total >= MAX_BYTES:
            return frames[: i + 1]
    return frames


def _deferred_json(entries: Iterable[tuple[float, bytes]]) -> list[Json]:
    """(due time on the trio clock, frame) entries, soonest first, up to MAX_BYTES."""
    out = []
    total = 0
    for due, frame in entries:
        out.append(message_json(frame, "deferred", to_wall_ns(due)))
        total += len(frame)
        if total >= MAX_BYTES:
            break
    return out


def _heap_smallest(heap: list[tuple[float, int, bytes]], n: int) -> list[tuple[float, int, bytes]]:
    """The `n` smallest entries of a heap, in order, in O(n log n) whatever its size (a
    walk down from the root that only opens the children of what it took)."""
    out: list[tuple[float, int, bytes]] = []
    if not heap:
        return out
    frontier = [(heap[0], 0)]
    while frontier and len(out) < n:
        entry, i = heapq.heappop(frontier)
        out.append(entry)
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], child))
    return out


def message_json(frame: bytes, queue: str, deferred_until: int | None = None) -> Json:
    """A queued message frame as peek shows it. ``attempts`` is how many times it was
    delivered so far (the next delivery carries one more); ``body`` is text when it is
    printable UTF-8, else base64 (``body_encoding`` says which)."""
    timestamp = int.from_bytes(frame[8:16], "big", signed=True)
    attempts = frame[16] << 8 | frame[17]
    body = frame[FRAMED_BODY_OFFSET:]
    text = _printable_text(body)
    result: Json = {
        "id": framed_id(frame).decode("latin-1"),
        "timestamp": timestamp,
        "attempts": attempts,
        "body": text if text is not None else base64.b64encode(body).decode("ascii"),
        "body_encoding": "text" if text is not None else "base64",
        "body_size": len(body),
        "queue": queue,
    }
    if deferred_until is not None:
        result["deferred_until"] = deferred_until
    return result


def _printable_text(body: bytes) -> str | None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.isprintable() or all(c.isprintable() or c in _TEXT_CONTROLS for c in text):
        return text
    return None


def parse_n(raw: str | None) -> int | None:
    """The ``n`` parameter: DEFAULT_N when absent, None when it is not an integer in
    [1, MAX_N]."""
    if raw is None:
        return DEFAULT_N
    if not raw.isdigit() or not raw.isascii():
        return None
    n = int(raw)
    return n if 1 <= n <= MAX_N else None
