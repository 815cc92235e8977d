"""The queue behind a topic's or channel's memory queue, and the interim implementations.

A backend holds messages beyond ``--mem-queue-size``, in the framed form the daemon keeps
(see trionsq.protocol.message). The disk queue (go-diskqueue's format) is its own issue; until
it lands, `MemoryBackend` holds overflow in memory: nothing survives a restart. Ephemeral
topics and channels use `DiscardBackend`, as in NSQ.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Protocol


class Backend(Protocol):
    """What a topic or channel needs from the queue behind its memory queue."""

    def put(self, frame: bytes) -> None:
        """Append one message; raises OSError-like errors on failure (PUB answers E_PUB_FAILED)."""

    def put_many(self, frames: Iterable[bytes]) -> None: ...

    def take(self, max_count: int) -> list[bytes]:
        """Remove and return up to `max_count` messages, oldest first."""
        ...

    @property
    def depth(self) -> int: ...

    def empty(self) -> None:
        """Drop every message."""

    def close(self) -> None:
        """Persist what is held and release resources (shutdown)."""

    def delete(self) -> None:
        """Release resources and remove whatever is stored (topic/channel deleted)."""


def queue_with_overflow(
    memory: deque[bytes], limit: int, backend: Backend, frames: list[bytes]
) -> None:
    """Queue `frames` in `memory` up to `limit` messages, the rest in `backend`
    (--mem-queue-size semantics, for topics and channels alike)."""
    room = limit - len(memory)
    if room >= len(frames):
        memory.extend(frames)
    elif room > 0:
        memory.extend(frames[:room])
        backend.put_many(frames[room:])
    else:
        backend.put_many(frames)


class MemoryBackend:
    """Interim stand-in for the disk queue: an unbounded FIFO in memory (not durable)."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[bytes] = deque()

    def put(self, frame: bytes) -> None:
        self._queue.append(frame)

    def put_many(self, frames: Iterable[bytes]) -> None:
        self._queue.extend(frames)

    def take(self, max_count: int) -> list[bytes]:
        q = self._queue
        if max_count >= len(q):
            out = list(q)
            q.clear()
            return out
        popleft = q.popleft
        return [popleft() for _ in range(max_count)]

    @property
    def depth(self) -> int:
        return len(self._queue)

    def empty(self) -> None:
        self._queue.clear()

    def close(self) -> None:
        pass

    def delete(self) -> None:
        self._queue.clear()


class DiscardBackend:
    """Ephemeral topics and channels: overflow beyond the memory queue is dropped silently."""

    __slots__ = ()

    def put(self, frame: bytes) -> None:
        pass

    def put_many(self, frames: Iterable[bytes]) -> None:
        pass

    def take(self, max_count: int) -> list[bytes]:
        return []

    @property
    def depth(self) -> int:
        return 0

    def empty(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        pass
