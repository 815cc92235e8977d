"""The queue behind a topic's or channel's memory queue: the disk queue, or the discarding
backend of ephemeral topics and channels (as in NSQ).

A backend holds messages beyond ``--mem-queue-size`` as framed `bytes` (trionsq.protocol.message).
`DiskBackend` is trionsq.diskqueue's `DiskQueue` reporting write failures to the daemon's health
(`/ping`), as Go nsqd's SetHealth does.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..diskqueue import DiskQueue, DiskQueueError
from ..protocol.message import MESSAGE_HEADER_SIZE, framed_id

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")


class BackendError(Exception):
    """The backend could not store messages (PUB answers E_PUB_FAILED)."""


class Backend(Protocol):
    """What a topic or channel needs from the queue behind its memory queue."""

    #: Messages not yet taken.
    depth: int
    #: Message ID -> handed out by `take` and not yet released (for FIN's fast path).
    owed: dict[bytes, list[int]]
    #: Message ID -> due time (Unix ns) of messages written while deferred (at shutdown).
    deferred_due: dict[bytes, int]

    def put(self, frame: bytes) -> None:
        """Append one message; raises BackendError on failure."""

    def put_many(self, frames: list[bytes]) -> None: ...

    def take(self, max_count: int) -> list[bytes]:
        """Remove and return up to `max_count` messages, oldest first."""
        ...

    def put_records(self, pieces: list[bytes], count: int) -> None:
        """Append records taken undecoded from a topic's disk queue (`take_records`)."""

    def take_records(self, max_count: int) -> tuple[list[bytes], int]:
        """Up to `max_count` messages as undecoded disk-queue records, and their count."""
        ...

    def release(self, message_id: bytes) -> None:
        """A message `take` handed out is finished (it need not survive a crash any more)."""

    def empty(self) -> None:
        """Drop every message."""

    def close(self) -> None:
        """No more writes (shutdown); what is held is made durable."""

    def delete(self) -> None:
        """Release resources and remove whatever is stored (topic/channel deleted)."""


def queue_with_overflow(
    memory: deque[bytes], limit: int, backend: Backend, frames: list[bytes], spill: bool = False
) -> None:
    """Queue `frames` in `memory` up to `limit` messages, the rest in `backend`
    (--mem-queue-size semantics, for topics and channels alike). When the backend fails,
    raise BackendError with nothing queued, or with `spill` keep them all in memory instead
    (messages already accepted are never dropped)."""
    room = limit - len(memory)
    if room >= len(frames):
        memory.extend(frames)
        return
    overflow = frames[room:] if room > 0 else frames
    try:
        backend.put_many(overflow)
    except BackendError:
        if not spill:
            raise
        memory.extend(overflow)
    if room > 0:
        memory.extend(frames[:room])


def restore_deferred(
    backend: Backend, frames: list[bytes]
) -> tuple[list[bytes], list[tuple[bytes, float]]]:
    """Split frames read back from `backend` into those due now and (frame, seconds to wait)
    for messages that were deferred when nsqd last stopped (their due times were saved
    beside the queue): beyond NSQ, whose restart delivers them at once."""
    due_times = backend.deferred_due
    now = time.time_ns()
    due_now: list[bytes] = []
    later: list[tuple[bytes, float]] = []
    for frame in frames:
        due = due_times.pop(framed_id(frame), None)
        if due is None or due <= now:
            due_now.append(frame)
        else:
            later.append((frame, (due - now) / 1e9))
    return due_now, later


def save_at_exit(backend: Backend, frames: list[bytes], owner: str) -> None:
    """Shutdown: write the messages held in memory to the backend, and close it. If the disk
    refuses them they are lost, and the log says how many (as Go nsqd's does)."""
    try:
        backend.put_many(frames)
    except BackendError as err:
        log.error("%s: failed to save %d messages at exit - %s", owner, len(frames), err)
    backend.close()


class DiskBackend(DiskQueue):
    """A durable topic's or channel's disk queue, with nsqd's limits and health reporting."""

    def __init__(self, nsqd: NSQD, name: str, *, track_consumption: bool) -> None:
        options = nsqd.options
        super().__init__(
            name,
            options.data_path or os.getcwd(),
            max_bytes_per_file=options.max_bytes_per_file,
            min_msg_size=MESSAGE_HEADER_SIZE,
            max_msg_size=options.max_msg_size + MESSAGE_HEADER_SIZE,
            sync_every=options.sync_every,
            syncer=nsqd.disk_syncer,
            track_consumption=track_consumption,
        )
        self._nsqd = nsqd

    def put_many(self, frames: list[bytes]) -> None:
        try:
            super().put_many(frames)
        except (OSError, DiskQueueError) as err:
            raise self._failed(err) from err
        if self._nsqd.health != "OK":
            self._nsqd.health = "OK"

    def put_records(self, pieces: list[bytes], count: int) -> None:
        try:
            super().put_records(pieces, count)
        except (OSError, DiskQueueError) as err:
            raise self._failed(err) from err
        if self._nsqd.health != "OK":
            self._nsqd.health = "OK"

    def _failed(self, err: OSError | DiskQueueError) -> BackendError:
        if isinstance(err, DiskQueueError):
            return BackendError(str(err))
        reason = f"failed to write to disk - {err.strerror or err}"
        self._nsqd.health = f"NOK - {reason}"
        return BackendError(reason)

    def put(self, frame: bytes) -> None:
        self.put_many([frame])


class DiscardBackend:
    """Ephemeral topics and channels: overflow beyond the memory queue is dropped silently."""

    __slots__ = ()
    depth: ClassVar[int] = 0
    owed: ClassVar[dict[bytes, list[int]]] = {}
    deferred_due: ClassVar[dict[bytes, int]] = {}

    def put(self, frame: bytes) -> None:
        pass

    def put_many(self, frames: list[bytes]) -> None:
        pass

    def take(self, max_count: int) -> list[bytes]:
        return []

    def put_records(self, pieces: list[bytes], count: int) -> None:
        pass

    def take_records(self, max_count: int) -> tuple[list[bytes], int]:
        return [], 0

    def release(self, message_id: bytes) -> None:
        pass

    def empty(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        pass
