"""Dead-lettering and message TTL (beyond NSQ, opt-in): which limits apply to a channel, the
name of its dead-letter topic, and the screening of the messages it is about to deliver.

A channel's limits come from its own settings (HTTP ``/channel/config``, kept in nsqd.dat),
else its topic's (``/topic/config``), else the flags (``--max-attempts``, ``--message-ttl``);
0 turns a limit off. When a limit applies, the channel holds a `Screen` (else None: its
delivery path pays one attribute check per batch). `Channel._take` hands each batch it takes
for a subscriber to `Screen.split`: a message already delivered ``max_attempts`` times, or
older than the TTL (by its publish timestamp), is not delivered. One past its attempts is moved
to the dead-letter topic; one past its TTL is dropped, or moved when the channel dead-letters.

A topic whose name the ``--dead-letter-topic`` pattern could have made is a dead-letter topic:
its channels never dead-letter again (no ``x.dead.dead``) and the flags' TTL does not apply to
them (dead letters keep their publish timestamp, so a TTL would drop them at once); a TTL set
on it through HTTP does (expired dead letters are then dropped).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..protocol.names import EPHEMERAL_SUFFIX
from .dead_letter_names import MAX_ATTEMPTS_LIMIT, render

if TYPE_CHECKING:
    from .channel import Channel
    from .topic import Topic

log = logging.getLogger("trionsq.nsqd")


@dataclass(slots=True)
class Limits:
    """A topic's or channel's own settings (None: not set, the next level's apply)."""

    max_attempts: int | None = None
    #: Nanoseconds.
    message_ttl: int | None = None

    def is_empty(self) -> bool:
        return self.max_attempts is None and self.message_ttl is None

    def as_json(self) -> dict[str, int]:
        """The settings that are set, as nsqd.dat and the HTTP API write them."""
        out: dict[str, int] = {}
        if self.max_attempts is not None:
            out["max_attempts"] = self.max_attempts
        if self.message_ttl is not None:
            out["message_ttl"] = self.message_ttl
        return out


def limits_from_json(raw: object) -> Limits | None:
    """The settings of an nsqd.dat entry (None: it has none); raises ValueError/TypeError on
    values of the wrong kind."""
    if not isinstance(raw, dict):
        return None
    limits = Limits()
    if raw.get("max_attempts") is not None:
        limits.max_attempts = _bounded_int(raw["max_attempts"], MAX_ATTEMPTS_LIMIT)
    if raw.get("message_ttl") is not None:
        limits.message_ttl = _bounded_int(raw["message_ttl"], (1 << 63) - 1)
    return None if limits.is_empty() else limits


def _bounded_int(value: object, limit: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ValueError(f"invalid limit {value!r}")
    return value


class Screen:
    """The limits that apply to one channel. `dead_letter_topic` is None when the channel
    does not dead-letter (then `max_attempts` is 0)."""

    __slots__ = ("dead_letter_topic", "max_attempts", "refused", "ttl_ns")

    def __init__(self, max_attempts: int, ttl_ns: int, dead_letter_topic: str | None) -> None:
        self.max_attempts = max_attempts
        self.ttl_ns = ttl_ns
        self.dead_letter_topic = dead_letter_topic
        #: The dead-letter topic refused the last move (logged once, until one succeeds).
        self.refused = False

    def split(self, frames: list[bytes]) -> tuple[list[bytes], list[bytes], list[bytes]]:
        """(frames to deliver, frames past their attempts, frames past their TTL): the last
        are dead-lettered too when the channel dead-letters, else dropped."""
        # frame[16:18]: the deliveries so far; frame[8:16]: the publish time (Unix ns, big
        # endian), compared as bytes (a third cheaper than decoding it; a time before 1970
        # would compare as late and never expire).
        max_attempts = self.max_attempts
        kept: list[bytes] = []
        dead: list[bytes] = []
        expired: list[bytes] = []
        if not self.ttl_ns:
            for frame in frames:
                if (frame[16] << 8 | frame[17]) >= max_attempts:
                    dead.append(frame)
                else:
                    kept.append(frame)
            return kept, dead, expired
        cutoff = (time.time_ns() - self.ttl_ns).to_bytes(8, "big", signed=True)
        if not max_attempts:
            for frame in frames:
                if frame[8:16] < cutoff:
                    expired.append(frame)
                else:
                    kept.append(frame)
            return kept, dead, expired
        for frame in frames:
            if (frame[16] << 8 | frame[17]) >= max_attempts:
                dead.append(frame)
            elif frame[8:16] < cutoff:
                expired.append(frame)
            else:
                kept.append(frame)
        return kept, dead, expired


def describe_limits(topic: Topic, channel: Channel | None) -> dict[str, Any]:
    """A topic's or channel's settings as HTTP ``/topic/config`` and ``/channel/config``
    answer them: the limits that apply (for a topic: to a channel without settings of its
    own), its dead-letter topic, and its own settings."""
    if channel is None:
        nsqd = topic.nsqd
        is_dead_letter_topic = nsqd.dead_letter_names.is_dead_letter_topic(topic.name)
        max_attempts = 0 if is_dead_letter_topic else nsqd.options.max_attempts
        ttl_ns = 0 if is_dead_letter_topic else round(nsqd.options.message_ttl * 1e9)
        own = topic.delivery_limits
        if own is not None:
            max_attempts = max_attempts if own.max_attempts is None else own.max_attempts
            ttl_ns = ttl_ns if own.message_ttl is None else own.message_ttl
        # With {channel} in the pattern, each channel has its own: shown as the pattern.
        base = topic.name.removesuffix(EPHEMERAL_SUFFIX)
        target = render(nsqd.dead_letter_names.pattern, base, "{channel}") if max_attempts else ""
        if target and topic.ephemeral:
            target += EPHEMERAL_SUFFIX
        return {
            "max_attempts": max_attempts,
            "message_ttl": ttl_ns,
            "dead_letter_topic": target,
            "settings": {} if own is None else own.as_json(),
        }
    screen = channel.screen
    return {
        "max_attempts": 0 if screen is None else screen.max_attempts,
        "message_ttl": 0 if screen is None else screen.ttl_ns,
        "dead_letter_topic": (screen.dead_letter_topic if screen is not None else None) or "",
        "settings": {} if channel.delivery_limits is None else channel.delivery_limits.as_json(),
    }


def screen_for(topic: Topic, channel: Channel) -> Screen | None:
    """The limits that apply to `channel` now (None: none does)."""
    nsqd = topic.nsqd
    options = nsqd.options
    names = nsqd.dead_letter_names
    is_dead_letter_topic = names.is_dead_letter_topic(topic.name)
    max_attempts = 0 if is_dead_letter_topic else options.max_attempts
    ttl_ns = 0 if is_dead_letter_topic else round(options.message_ttl * 1e9)
    for limits in (
        topic.delivery_limits,
        channel.delivery_limits,
    ):  # the channel's own settings win
        if limits is not None:
            if limits.max_attempts is not None:
                max_attempts = limits.max_attempts
            if limits.message_ttl is not None:
                ttl_ns = limits.message_ttl
    target = None
    if max_attempts and not is_dead_letter_topic:
        target = names.topic_for(topic.name, channel.name)
        if target is None:
            log.warning(
                "CHANNEL(%s:%s): --dead-letter-topic %r makes an invalid topic name of it: "
                "its messages are not dead-lettered (delivered again, as NSQ does)",
                topic.name,
                channel.name,
                names.pattern,
            )
    if target is None:
        max_attempts = 0
    if not max_attempts and not ttl_ns:
        return None
    return Screen(max_attempts, ttl_ns, target)
