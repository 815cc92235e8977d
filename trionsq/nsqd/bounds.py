"""Bounded queues (beyond NSQ, opt-in): limits on a topic's or channel's queue and what
happens when a publish would pass them.

A queue's limits are --max-queue-depth (messages queued: memory and disk, NSQ's ``depth``)
and --max-queue-bytes (bytes of its disk queue's unread records), with --queue-full-policy:

- ``reject``: a publish that does not fit is refused whole (PUB/MPUB/DPUB answer a non-fatal
  E_PUB_FAILED / E_MPUB_FAILED / E_DPUB_FAILED, HTTP 503 QUEUE_FULL). A channel with this
  policy refuses its topic's publishes too: its backlog counts what still waits in the topic.
  Nothing accepted is ever dropped, so a queue can pass its limit by messages coming back to
  it (requeues, timeouts, deferred messages coming due, a limit lowered).
- ``drop-oldest``: everything is accepted, and the queue then drops from its head (memory,
  then disk: a bounded queue keeps its messages in order, see `queue_in_order`) until it is
  within its limits. Only that queue loses messages; messages in flight or deferred are not
  queued and never dropped. Drops are counted (``dropped_count`` in /stats).

The flags are defaults; `LimitOverride` (HTTP /topic/config, /channel/config, kept in
nsqd.dat) replaces any of them for one topic or channel. A queue with no limit has
``limits = None`` and its topic's publish path checks one attribute (`Topic.bounded`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .backend import Backend, queue_with_overflow

if TYPE_CHECKING:
    from .options import NSQDOptions
    from .topic import Topic

REJECT = "reject"
DROP_OLDEST = "drop-oldest"
POLICIES = (REJECT, DROP_OLDEST)
#: A frame is 8 bytes of frame header and the message; its disk record 4 bytes and the message.
_RECORD_LESS_FRAME = 4


class QueueFull(Exception):
    """A publish refused by a full queue whose policy is ``reject``."""


class BoundsError(ValueError):
    """A limit or policy value that is not valid (its text is the HTTP error's message)."""


@dataclass(slots=True, frozen=True)
class Limits:
    """A queue's limits in force (0: no limit of that kind)."""

    max_depth: int
    max_bytes: int
    drop_oldest: bool

    @property
    def policy(self) -> str:
        return DROP_OLDEST if self.drop_oldest else REJECT


@dataclass(slots=True)
class LimitOverride:
    """One topic's or channel's own settings (None: the daemon's flag applies)."""

    max_depth: int | None = None
    max_bytes: int | None = None
    policy: str | None = None

    def __bool__(self) -> bool:
        return not (self.max_depth is None and self.max_bytes is None and self.policy is None)

    def to_json(self) -> dict[str, Any]:
        """The settings made, as nsqd.dat keeps them (only those set)."""
        out: dict[str, Any] = {}
        if self.max_depth is not None:
            out["max_depth"] = self.max_depth
        if self.max_bytes is not None:
            out["max_bytes"] = self.max_bytes
        if self.policy is not None:
            out["policy"] = self.policy
        return out

    @classmethod
    def from_json(cls, raw: Any) -> LimitOverride | None:
        """What nsqd.dat kept (None for nothing, or a value that is not an object); a bad
        value is ignored, as Go ignores what it does not know."""
        if not isinstance(raw, dict):
            return None
        override = cls()
        for key in ("max_depth", "max_bytes"):
            value = raw.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(override, key, value)
        if raw.get("policy") in POLICIES:
            override.policy = raw["policy"]
        return override or None

    def update(self, params: dict[str, str]) -> None:
        """Apply HTTP parameters (``max_depth``, ``max_bytes``, ``policy``): a value sets the
        setting, an empty one removes it (the flag applies again). Raises BoundsError with
        nothing changed."""
        changes: dict[str, Any] = {}
        for key, error in (("max_depth", "INVALID_MAX_DEPTH"), ("max_bytes", "INVALID_MAX_BYTES")):
            if key in params:
                text = params[key]
                if text == "":
                    changes[key] = None
                elif text.isascii() and text.isdigit() and int(text) < 1 << 63:
                    changes[key] = int(text)
                else:
                    raise BoundsError(error)
        if "policy" in params:
            policy = params["policy"]
            if policy not in (*POLICIES, ""):
                raise BoundsError("INVALID_POLICY")
            changes["policy"] = policy or None
        for key, value in changes.items():
            setattr(self, key, value)


def effective(options: NSQDOptions, override: LimitOverride | None) -> Limits | None:
    """The limits in force for a queue: its override over the flags; None if it has none."""
    max_depth = options.max_queue_depth
    max_bytes = options.max_queue_bytes
    policy = options.queue_full_policy
    if override is not None:
        if override.max_depth is not None:
            max_depth = override.max_depth
        if override.max_bytes is not None:
            max_bytes = override.max_bytes
        if override.policy is not None:
            policy = override.policy
    if not max_depth and not max_bytes:
        return None
    return Limits(max_depth, max_bytes, policy == DROP_OLDEST)


class Queue(Protocol):
    """What a topic and a channel have in common here."""

    name: str
    memory: deque[bytes]
    mem_limit: int
    backend: Backend
    limits: Limits | None
    dropped_count: int
    rejected_count: int

    @property
    def depth(self) -> int: ...


# -- reporting ----------------------------------------------------------------------------


class Owner(Queue, Protocol):
    limit_override: LimitOverride | None


def limits_json(queue: Owner) -> dict[str, Any]:
    """HTTP /topic/config and /channel/config's answer: the limits in force (0: none) and
    the queue's own settings (``{}``: the flags apply)."""
    limits = queue.limits
    override = queue.limit_override
    if limits is None:
        policy = override.policy if override and override.policy else _default_policy(queue)
        return {"max_depth": 0, "max_bytes": 0, "policy": policy, "own": _own(override)}
    return {
        "max_depth": limits.max_depth,
        "max_bytes": limits.max_bytes,
        "policy": limits.policy,
        "own": _own(override),
    }


def _own(override: LimitOverride | None) -> dict[str, Any]:
    return override.to_json() if override else {}


def _default_policy(queue: Any) -> str:
    return str(queue.nsqd.options.queue_full_policy)


def stats_fields(queue: Owner) -> dict[str, Any]:
    """The keys /stats adds to a topic's or channel's object once it has limits (or had:
    what it dropped or refused): none otherwise, so that NSQ's shape is unchanged."""
    limits = queue.limits
    if limits is None and not (queue.dropped_count or queue.rejected_count):
        return {}
    return {
        "max_depth": limits.max_depth if limits else 0,
        "max_bytes": limits.max_bytes if limits else 0,
        "queue_full_policy": limits.policy if limits else _default_policy(queue),
        "backend_bytes": queue.backend.depth_bytes,
        "dropped_count": queue.dropped_count,
        "rejected_count": queue.rejected_count,
    }


# -- reject -------------------------------------------------------------------------------


def admit(topic: Topic, frames: list[bytes]) -> None:
    """Raise QueueFull, counting the refusal, if the topic or one of its channels whose
    policy is ``reject`` has no room for all of `frames`; a channel's backlog counts the
    messages still queued in the topic."""
    # The usual case, room by depth alone, is decided here without a call (`_check` decides
    # the rest and words the refusal).
    count = len(frames)
    limits = topic.limits
    if (
        limits is not None
        and not limits.drop_oldest
        and (
            limits.max_bytes
            or len(topic.memory) + topic.backend.depth + count > limits.max_depth > 0
        )
    ):
        _check(topic, limits, frames, 0, None)
    pending = -1
    for channel in topic.channels.values():
        limits = channel.limits
        if limits is not None and not limits.drop_oldest:
            if pending < 0:
                pending = len(topic.memory) + topic.backend.depth
            if (
                limits.max_bytes
                or len(channel.memory) + channel.backend.depth + pending + count
                > limits.max_depth
                > 0
            ):
                _check(channel, limits, frames, pending, topic)


def _check(
    queue: Queue, limits: Limits, frames: list[bytes], pending: int, topic: Topic | None
) -> None:
    """Raise QueueFull if `queue` (a channel of `topic`, or the topic when None) has no room
    for `frames` with `pending` more messages on their way to it."""
    count = len(frames)
    if limits.max_depth:
        queued = len(queue.memory) + queue.backend.depth + pending
        if queued + count > limits.max_depth:
            queue.rejected_count += count
            raise QueueFull(
                f"{_full(queue, topic)} ({queued} queued, max depth {limits.max_depth})"
            )
    if limits.max_bytes:
        disk = queue.backend.depth_bytes
        if disk + _bytes_to_disk(queue, frames) > limits.max_bytes:
            queue.rejected_count += count
            raise QueueFull(
                f"{_full(queue, topic)} ({disk} bytes on disk, max bytes {limits.max_bytes})"
            )


def _full(queue: Queue, topic: Topic | None) -> str:
    if topic is None:
        return f"topic {queue.name} is full"
    return f"channel {topic.name}:{queue.name} is full"


def _bytes_to_disk(queue: Queue, frames: list[bytes]) -> int:
    """The disk record bytes of the messages of `frames` that `queue_in_order` would write
    to the disk queue."""
    room = max(_memory_limit(queue) - len(queue.memory), 0)
    if room >= len(frames):
        return 0
    overflow = frames[room:]
    return sum(map(len, overflow)) - _RECORD_LESS_FRAME * len(overflow)


# -- queueing in order, and drop-oldest ---------------------------------------------------


def _memory_limit(queue: Queue) -> int:
    """Messages the memory queue may hold now: none more while the disk queue holds some."""
    return len(queue.memory) if queue.backend.depth else queue.mem_limit


def queue_in_order(queue: Queue, frames: list[bytes], spill: bool = False) -> None:
    """`queue_with_overflow`, but behind whatever waits on disk: a bounded queue's memory
    queue then always holds its oldest messages and its disk queue the newest, so that its
    head, where drop-oldest drops, is its oldest message."""
    queue_with_overflow(queue.memory, _memory_limit(queue), queue.backend, frames, spill)


def trim(queue: Queue) -> int:
    """Drop-oldest: drop messages from the head of `queue` until it is within its limits;
    returns how many of them were on disk (the others were in memory). Counted in
    `dropped_count`."""
    limits = queue.limits
    assert limits is not None
    backend = queue.backend
    from_disk = 0
    if limits.max_depth:
        excess = queue.depth - limits.max_depth
        if excess > 0:
            memory = queue.memory
            from_memory = min(excess, len(memory))
            if from_memory == len(memory):
                memory.clear()
            else:
                popleft = memory.popleft
                for _ in range(from_memory):
                    popleft()
            queue.dropped_count += from_memory
            excess -= from_memory
            while excess > 0 and backend.depth:
                before = backend.depth
                dropped = backend.drop(excess)
                excess -= dropped
                from_disk += dropped
                if not dropped and backend.depth >= before:
                    break  # the disk queue read nothing (a read error): drop no more now
    if limits.max_bytes:
        while backend.depth_bytes > limits.max_bytes and backend.depth:
            over = backend.depth_bytes - limits.max_bytes
            before = backend.depth
            average = max(backend.depth_bytes // before, 1)
            # At least half of what is over, by the average record: within a record of exact.
            dropped = backend.drop(max(over // average // 2, 1))
            from_disk += dropped
            if not dropped and backend.depth >= before:
                break
    queue.dropped_count += from_disk
    return from_disk
