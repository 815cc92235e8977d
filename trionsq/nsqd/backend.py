"""The queue behind a topic's or channel's memory queue: the disk queue, or the discarding
backend of ephemeral topics and channels (as in NSQ).

A backend holds messages beyond ``--mem-queue-size`` as framed `bytes` (trionsq.protocol.message).
`DiskBackend` is trionsq.diskqueue's `DiskQueue` reporting write and read failures to the
daemon's health (`/ping`), as Go nsqd's SetHealth does for writes.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, Protocol

import trio

from ..diskqueue import DiskQueue, DiskQueueError
from ..diskqueue.recovery import Recovered, recover
from ..protocol.message import MESSAGE_HEADER_SIZE, framed_id

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")


#: Seconds between retries of a disk queue whose last read failed (see `Backend.read_error`).
READ_RETRY_INTERVAL = 1.0


#: nsqd's health text when all is well (`/ping`), and the failures a disk queue reports.
HEALTHY = "OK"
_WRITE_FAILED = "failed to write to disk"
_READ_FAILED = "failed to read from disk"


class BackendError(Exception):
    """The backend could not store messages (PUB answers E_PUB_FAILED)."""


class Backend(Protocol):
    """What a topic or channel needs from the queue behind its memory queue."""

    # Read-only here: each backend keeps them as it likes (the discarding one as constants).

    @property
    def depth(self) -> int:
        """Messages not yet taken."""
        ...

    @property
    def depth_bytes(self) -> int:
        """Bytes of the records not yet taken (0 for the discarding backend)."""
        ...

    @property
    def owed(self) -> dict[bytes, int]:
        """Message ID -> handed out by `take` and not yet released (for FIN's fast path)."""
        ...

    @property
    def deferred_due(self) -> dict[bytes, int]:
        """Message ID -> due time (Unix ns) of messages written while deferred (at shutdown)."""
        ...

    @property
    def held_deferred(self) -> dict[bytes, tuple[int, bytes]]:
        """Message ID -> (due time in Unix ns, frame) of the deferred messages held durably."""
        ...

    @property
    def read_error(self) -> OSError | None:
        """Why the last read from the disk failed, until one works again (`take` then hands
        out what it read before the failure; the caller retries after READ_RETRY_INTERVAL)."""
        ...

    def put(self, frame: bytes) -> None:
        """Append one message; raises BackendError on failure."""

    def put_many(self, frames: list[bytes]) -> None: ...

    def take(self, max_count: int) -> list[bytes]:
        """Remove and return up to `max_count` messages, oldest first."""
        ...

    def drop(self, max_count: int) -> int:
        """Drop up to `max_count` messages from the head (drop-oldest); returns how many."""
        ...

    def put_records(self, pieces: list[bytes], count: int) -> None:
        """Append records taken undecoded from a topic's disk queue (`take_records`)."""

    def take_records(self, max_count: int) -> tuple[list[bytes], int]:
        """Up to `max_count` messages as undecoded disk-queue records, and their count."""
        ...

    def release(self, message_id: bytes) -> None:
        """A message `take` handed out is finished (it need not survive a crash any more)."""

    def hold_deferred(self, entries: list[tuple[bytes, int]]) -> None:
        """Keep deferred (frame, due time in Unix ns) entries durably until
        `drop_deferred`; raises BackendError when the disk refuses."""

    def drop_deferred(self, message_ids: list[bytes]) -> None:
        """Deferred messages left (they came due and were written elsewhere first)."""

    def clear_deferred(self) -> None:
        """Hold no deferred messages durably any more: shutdown writes them to the queue
        (the log goes once that is durable)."""

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


def to_wall_ns(due: float) -> int:
    """A due time on the trio clock as Unix ns (as due times are written to disk)."""
    return time.time_ns() + int((due - trio.current_time()) * 1e9)


def from_wall_ns(due_ns: int) -> float:
    """A due time written to disk (Unix ns) on the trio clock."""
    return trio.current_time() + (due_ns - time.time_ns()) / 1e9


def save_at_exit(backend: Backend, frames: list[bytes], owner: str) -> int:
    """Shutdown: write the messages held in memory to the backend, stop holding deferred
    messages apart once they are written, and close it. Returns how many messages were lost:
    if the disk refuses them, those whose only copy was in memory (a message taken from the
    disk and still owed, or held by the deferred log, is read from there again at restart);
    the log says how many."""
    try:
        backend.put_many(frames)
    except BackendError as err:
        kept = backend.owed.keys() | backend.held_deferred.keys()
        lost = sum(1 for frame in frames if framed_id(frame) not in kept)
        if lost:
            log.error("%s: failed to save %d messages at exit - %s", owner, lost, err)
        backend.close()
        return lost
    backend.clear_deferred()
    backend.close()
    return 0


def recover_queues(nsqd: NSQD, names: list[str]) -> dict[str, Recovered]:
    """Recover the disk queues named (blocking: start-up runs it in a worker thread)."""
    options = nsqd.options
    min_size, max_size = message_size_limits(options.max_msg_size)
    data_path = options.data_path or os.getcwd()
    return {
        name: recover(nsqd.fs, name, data_path, min_msg_size=min_size, max_msg_size=max_size)
        for name in names
    }


def message_size_limits(max_msg_size: int) -> tuple[int, int]:
    """The disk queue's record size limits for nsqd's --max-msg-size (a record is a message:
    its 26-byte header and its body)."""
    return MESSAGE_HEADER_SIZE, max_msg_size + MESSAGE_HEADER_SIZE


class DiskBackend(DiskQueue):
    """A durable topic's or channel's disk queue, with nsqd's limits and health reporting."""

    def __init__(
        self,
        nsqd: NSQD,
        name: str,
        *,
        track_consumption: bool,
        recovered: Recovered | None = None,
    ) -> None:
        options = nsqd.options
        min_size, max_size = message_size_limits(options.max_msg_size)
        super().__init__(
            name,
            options.data_path or os.getcwd(),
            max_bytes_per_file=options.max_bytes_per_file,
            min_msg_size=min_size,
            max_msg_size=max_size,
            sync_every=options.sync_every,
            syncer=nsqd.disk_syncer,
            track_consumption=track_consumption,
            fs=nsqd.fs,
            recovered=recovered,
            delay_deferred_drops=options.sync_ack,
            logger=log,  # go-diskqueue's lines are nsqd's, as Go passes nsqd's logf
        )
        self._nsqd = nsqd

    def put_many(self, frames: list[bytes]) -> None:
        if not frames:
            return  # not a write that worked: the health stays as it is
        try:
            super().put_many(frames)
        except (OSError, DiskQueueError) as err:
            raise self._failed(err) from err
        if self._nsqd.health != HEALTHY:
            self._healthy_again(_WRITE_FAILED)

    def put_records(self, pieces: list[bytes], count: int) -> None:
        try:
            super().put_records(pieces, count)
        except (OSError, DiskQueueError) as err:
            raise self._failed(err) from err
        if self._nsqd.health != HEALTHY:
            self._healthy_again(_WRITE_FAILED)

    def hold_deferred(self, entries: Iterable[tuple[bytes, int]]) -> None:
        try:
            super().hold_deferred(entries)
        except (OSError, DiskQueueError) as err:
            raise self._failed(err) from err

    def _read_failed(self, err: OSError) -> None:
        super()._read_failed(err)
        self._nsqd.health = f"NOK - {_READ_FAILED} - {err.strerror or err}"

    def _read_recovered(self) -> None:
        super()._read_recovered()
        self._healthy_again(_READ_FAILED)

    def _healthy_again(self, what_worked: str) -> None:
        """A write or read worked: clear the health failure of that kind (a disk that takes
        writes but refuses reads stays unhealthy, and the other way round)."""
        if self._nsqd.health.startswith(f"NOK - {what_worked}"):
            self._nsqd.health = HEALTHY

    def _failed(self, err: OSError | DiskQueueError) -> BackendError:
        if isinstance(err, DiskQueueError):
            return BackendError(str(err))
        reason = f"{_WRITE_FAILED} - {err.strerror or err}"
        self._nsqd.health = f"NOK - {reason}"
        return BackendError(reason)

    def put(self, frame: bytes) -> None:
        self.put_many([frame])


class DiscardBackend:
    """Ephemeral topics and channels: overflow beyond the memory queue is dropped silently."""

    __slots__ = ()
    depth: ClassVar[int] = 0
    depth_bytes: ClassVar[int] = 0
    owed: ClassVar[dict[bytes, int]] = {}
    deferred_due: ClassVar[dict[bytes, int]] = {}
    held_deferred: ClassVar[dict[bytes, tuple[int, bytes]]] = {}
    read_error: ClassVar[OSError | None] = None

    def put(self, frame: bytes) -> None:
        pass

    def put_many(self, frames: list[bytes]) -> None:
        pass

    def take(self, max_count: int) -> list[bytes]:
        return []

    def drop(self, max_count: int) -> int:
        return 0

    def put_records(self, pieces: list[bytes], count: int) -> None:
        pass

    def take_records(self, max_count: int) -> tuple[list[bytes], int]:
        return [], 0

    def release(self, message_id: bytes) -> None:
        pass

    def hold_deferred(self, entries: list[tuple[bytes, int]]) -> None:
        raise BackendError("ephemeral: nothing is kept on disk")

    def drop_deferred(self, message_ids: list[bytes]) -> None:
        pass

    def clear_deferred(self) -> None:
        pass

    def empty(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        pass
