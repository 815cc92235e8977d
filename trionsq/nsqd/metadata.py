"""``nsqd.dat``: which topics and channels exist and which are paused (docs/protocol.md §2.7).

Beyond Go's file, a topic's or channel's own queue limits (bounds.py) are kept under a
``queue_limits`` key, written only for those that have some: Go's loader ignores it, and a
daemon that sets none writes Go's file byte for byte.

A replicated topic (replication/topic.py) has ``"replication": {"epoch": E}``, written only
for replicated topics.

Beyond NSQ, a topic's or channel's own dead-lettering and TTL settings (dead_letter.py) are
written in its entry as ``max_attempts`` and ``message_ttl`` (ns) after ``paused``, only when
set: a file written without them is Go's, byte for byte, and Go's loader ignores the keys.

The file is Go nsqd's JSON, written atomically (temp file, fsync, rename). `MetadataWriter` is
the nursery task that rewrites it after topics or channels are created, deleted, paused or
unpaused, in a worker thread; HTTP handlers that Go persists synchronously await `flush`.

Every change names its topic (`request`), and the writer keeps each topic's JSON ready: a
rewrite encodes only the topics that changed since the last one and joins the rest (10,000
topics: ~0.1 ms, against ~35 ms to build and encode the whole topology, which made creating
many topics over HTTP quadratic in the event loop's time). Rewrites are coalesced: every
change made while one is under way is written by the next, which serves all their `flush`es.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from .. import NSQ_VERSION
from ..diskqueue.files import write_file_atomically
from ..diskqueue.fs import LOCAL, FileSystem
from ..diskqueue.syncer import BlockingRunner
from ..goerrors import os_error_text
from ..protocol.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name
from .dead_letter import Limits, limits_from_json

if TYPE_CHECKING:
    from .nsqd import NSQD
    from .topic import Topic

log = logging.getLogger("trionsq.nsqd")

FILE_NAME = "nsqd.dat"


class MetadataError(Exception):
    """nsqd.dat exists but cannot be read (nsqd does not start, as Go's does not)."""


@dataclass
class ChannelMetadata:
    name: str
    paused: bool = False
    #: The channel's own queue limits (`LimitOverride.to_json`), if it has some.
    limits: dict[str, Any] | None = None
    delivery_limits: Limits | None = None


@dataclass
class TopicMetadata:
    name: str
    paused: bool = False
    channels: list[ChannelMetadata] = field(default_factory=list)
    limits: dict[str, Any] | None = None
    delivery_limits: Limits | None = None
    #: A replicated topic's epoch (replication/topic.py), None for any other topic.
    replication: int | None = None


def metadata_path(data_path: str) -> str:
    return os.path.join(data_path, FILE_NAME)


def load(fs: FileSystem, path: str) -> list[TopicMetadata]:
    """The topics in `path` (none if it does not exist); invalid names are skipped with a
    warning, as Go nsqd does."""
    try:
        data = fs.read_file(path)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise MetadataError(f"failed to read metadata from {path} - {os_error_text(err)}") from err
    try:
        raw = json.loads(data)
        topics = [_topic(t) for t in (raw.get("topics") or [])]
    except (ValueError, TypeError, AttributeError, KeyError) as err:
        raise MetadataError(f"failed to parse metadata in {path} - {err}") from err
    valid = []
    for topic in topics:
        if not is_valid_topic_name(topic.name):
            log.warning("skipping creation of invalid topic %s", topic.name)
            continue
        for channel in topic.channels:
            if not is_valid_channel_name(channel.name):
                log.warning("skipping creation of invalid channel %s", channel.name)
        topic.channels = [c for c in topic.channels if is_valid_channel_name(c.name)]
        valid.append(topic)
    return valid


def queue_names(topics: list[TopicMetadata]) -> list[str]:
    """The disk queue names of the topics and channels (``topic``, ``topic:channel``) that
    have one: the ephemeral ones never touch disk."""
    names = []
    for topic in topics:
        if is_ephemeral(topic.name):
            continue
        names.append(topic.name)
        names += [f"{topic.name}:{c.name}" for c in topic.channels if not is_ephemeral(c.name)]
    return names


def _topic(raw: dict[str, Any]) -> TopicMetadata:
    channels = [
        ChannelMetadata(
            str(c["name"]),
            bool(c.get("paused", False)),
            limits=_queue_limits(c),
            delivery_limits=_delivery_limits(c),
        )
        for c in (raw.get("channels") or [])
    ]
    return TopicMetadata(
        str(raw["name"]),
        bool(raw.get("paused", False)),
        channels,
        limits=_queue_limits(raw),
        delivery_limits=_delivery_limits(raw),
        replication=_replication(raw),
    )


def _replication(raw: dict[str, Any]) -> int | None:
    value = raw.get(REPLICATION_KEY)
    if isinstance(value, dict) and isinstance(value.get("epoch"), int):
        return int(value["epoch"])
    return None


def _queue_limits(raw: dict[str, Any]) -> dict[str, Any] | None:
    limits = raw.get(LIMITS_KEY)
    return limits if isinstance(limits, dict) and limits else None


def _delivery_limits(raw: dict[str, Any]) -> Limits | None:
    """An entry's dead-lettering and TTL settings; a bad value is skipped with a warning."""
    try:
        return limits_from_json(raw)
    except ValueError as err:
        log.warning("skipping the settings of %s - %s", raw.get("name"), err)
        return None


def encode(topics: list[TopicMetadata]) -> bytes:
    """Go's json.Marshal of its Metadata struct (empty lists are ``null``)."""
    return _document([_encode_topic(t) for t in topics])


def _encode_topic(topic: TopicMetadata) -> bytes:
    """One topic's object in the file, as `encode` writes it."""
    entry: dict[str, Any] = {"name": topic.name, "paused": topic.paused}
    if topic.delivery_limits is not None:
        entry.update(topic.delivery_limits.as_json())
    entry["channels"] = [_encode_channel(c) for c in topic.channels] or None
    if topic.limits:
        entry[LIMITS_KEY] = topic.limits
    if topic.replication is not None:
        entry[REPLICATION_KEY] = {"epoch": topic.replication}
    return json.dumps(entry, separators=_SEPARATORS).encode()


def _encode_channel(channel: ChannelMetadata) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": channel.name, "paused": channel.paused}
    if channel.delivery_limits is not None:
        entry.update(channel.delivery_limits.as_json())
    if channel.limits:
        entry[LIMITS_KEY] = channel.limits
    return entry


def _document(encoded_topics: Iterable[bytes]) -> bytes:
    joined = b",".join(encoded_topics)
    if not joined:
        return b'{"topics":null,"version":' + _VERSION + b"}"
    return b"".join((b'{"topics":[', joined, b'],"version":', _VERSION, b"}"))


_SEPARATORS = (",", ":")
#: The key of a topic's or channel's own queue limits (beyond Go's file).
LIMITS_KEY = "queue_limits"
#: A replicated topic's ``{"epoch": E}`` (beyond Go's file; only replicated topics have it).
REPLICATION_KEY = "replication"
_VERSION = json.dumps(NSQ_VERSION).encode()


def current(nsqd: NSQD) -> list[TopicMetadata]:
    """The daemon's durable topics and channels (ephemeral ones are never written)."""
    return [_describe(topic) for topic in nsqd.topics.values() if not topic.ephemeral]


def current_topic(nsqd: NSQD, name: str) -> TopicMetadata | None:
    """What nsqd.dat says of topic `name` now (None: it has no entry)."""
    topic = nsqd.topics.get(name)
    if topic is None or topic.ephemeral:
        return None
    return _describe(topic)


def _describe(topic: Topic) -> TopicMetadata:
    channels = [
        ChannelMetadata(
            channel.name,
            channel.paused,
            limits=channel.limit_override.to_json() if channel.limit_override else None,
            delivery_limits=channel.delivery_limits,
        )
        for channel in topic.channels.values()
        if not channel.ephemeral
    ]
    return TopicMetadata(
        topic.name,
        topic.paused,
        channels,
        limits=topic.limit_override.to_json() if topic.limit_override else None,
        delivery_limits=topic.delivery_limits,
        replication=topic.replication_epoch(),
    )


class MetadataWriter:
    """Rewrites nsqd.dat whenever asked, coalescing requests, in a worker thread.

    `describe` gives the whole topology (at start, and after a change that names no topic);
    `describe_topic` one topic's entry (None: it has none, being deleted or ephemeral)."""

    def __init__(
        self,
        path: str,
        describe: Callable[[], list[TopicMetadata]],
        describe_topic: Callable[[str], TopicMetadata | None] | None = None,
        run_blocking: BlockingRunner = trio.to_thread.run_sync,
        *,
        fs: FileSystem = LOCAL,
    ) -> None:
        self.path = path
        self._fs = fs
        self._run_blocking = run_blocking
        self._describe = describe
        self._describe_topic = describe_topic
        # Each topic's encoded entry, in file order, and what changed since it was encoded:
        # the names of the topics (in the order of the changes), or everything.
        self._encoded: dict[str, bytes] = {}
        self._stale: dict[str, None] = {}
        self._all_stale = True
        self._changes = 0  # changes requested
        self._written = 0  # changes the last successful write included
        self._begun = 0  # writes begun
        self._wake = trio.Event()
        self._progress = trio.Event()
        self._lock = trio.Lock()
        #: Writes of the file made (each serves every change requested before it began).
        self.writes = 0
        #: The last write's failure, if it failed.
        self.error: OSError | None = None

    @property
    def pending(self) -> bool:
        """A change was asked for that is not in the file yet."""
        return self._written < self._changes

    def request(self, topic: str | None = None) -> None:
        """Topic `topic` (None: any) changed: rewrite the file soon."""
        if topic is None or self._describe_topic is None:
            self._all_stale = True
        else:
            self._stale[topic] = None
        self._changes += 1
        self._wake.set()

    async def flush(self) -> bool:
        """Wait until the file holds every change requested so far (at once if it does);
        False if writing it failed."""
        target = self._changes
        if self._written >= target:
            return True
        # Wait for a write that holds the changes, or for one begun after this call (which
        # does) to fail.
        begun = self._begun
        self._wake.set()
        while self._written < target and self.writes <= begun:
            await self._progress.wait()
        return self._written >= target

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self.pending:
                await self.write()

    def _encode(self) -> bytes:
        """The file as the topology is now: only what changed is encoded again."""
        encoded = self._encoded
        if self._all_stale:
            self._all_stale = False
            self._stale.clear()
            encoded.clear()
            for topic in self._describe():
                encoded[topic.name] = _encode_topic(topic)
        elif self._stale:
            assert self._describe_topic is not None
            stale, self._stale = self._stale, {}
            for name in stale:
                entry = self._describe_topic(name)
                if entry is None:
                    encoded.pop(name, None)
                else:
                    encoded[name] = _encode_topic(entry)  # a new one goes last
        return _document(encoded.values())

    async def write(self) -> None:
        """Write the current topology now (also at startup and at exit)."""
        async with self._lock:
            self._begun += 1
            target = self._changes
            data = self._encode()
            log.info("NSQ: persisting topic/channel metadata to %s", self.path)
            try:
                await self._run_blocking(
                    functools.partial(
                        write_file_atomically, self._fs, self.path, data, sync_dir=True
                    )
                )
            except OSError as err:
                log.error("failed to persist metadata - %s", os_error_text(err))
                self.error = err
            else:
                self.error = None
                self._written = max(self._written, target)
            self.writes += 1
            self._progress.set()
            self._progress = trio.Event()
