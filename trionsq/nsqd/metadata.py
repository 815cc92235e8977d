"""``nsqd.dat``: which topics and channels exist and which are paused (reference §2.7).

The file is Go nsqd's JSON, written atomically (temp file, fsync, rename). `MetadataWriter` is
the nursery task that rewrites it after topics or channels are created, deleted, paused or
unpaused, in a worker thread; HTTP handlers that Go persists synchronously await `flush`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from .. import NSQ_VERSION
from ..diskqueue.files import write_file_atomically
from ..diskqueue.fs import LOCAL, FileSystem
from ..diskqueue.syncer import BlockingRunner
from ..protocol.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")

FILE_NAME = "nsqd.dat"


class MetadataError(Exception):
    """nsqd.dat exists but cannot be read (nsqd does not start, as Go's does not)."""


@dataclass
class ChannelMetadata:
    name: str
    paused: bool = False


@dataclass
class TopicMetadata:
    name: str
    paused: bool = False
    channels: list[ChannelMetadata] = field(default_factory=list)


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
        raise MetadataError(f"failed to read metadata in {path} - {err}") from err
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
        ChannelMetadata(str(c["name"]), bool(c.get("paused", False)))
        for c in (raw.get("channels") or [])
    ]
    return TopicMetadata(str(raw["name"]), bool(raw.get("paused", False)), channels)


def encode(topics: list[TopicMetadata]) -> bytes:
    """Go's json.Marshal of its Metadata struct (empty lists are ``null``)."""
    document = {
        "topics": [
            {
                "name": t.name,
                "paused": t.paused,
                "channels": [{"name": c.name, "paused": c.paused} for c in t.channels] or None,
            }
            for t in topics
        ]
        or None,
        "version": NSQ_VERSION,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def current(nsqd: NSQD) -> list[TopicMetadata]:
    """The daemon's durable topics and channels (ephemeral ones are never written)."""
    return [
        TopicMetadata(
            topic.name,
            topic.paused,
            [
                ChannelMetadata(channel.name, channel.paused)
                for channel in topic.channels.values()
                if not channel.ephemeral
            ],
        )
        for topic in nsqd.topics.values()
        if not topic.ephemeral
    ]


class MetadataWriter:
    """Rewrites nsqd.dat whenever asked, coalescing requests, in a worker thread."""

    def __init__(
        self,
        path: str,
        describe: Callable[[], list[TopicMetadata]],
        run_blocking: BlockingRunner = trio.to_thread.run_sync,
        *,
        fs: FileSystem = LOCAL,
    ) -> None:
        self.path = path
        self._fs = fs
        self._run_blocking = run_blocking
        self._describe = describe
        self._wanted = 0
        self._written = 0
        self._wake = trio.Event()
        self._progress = trio.Event()
        self._lock = trio.Lock()
        #: The last write's failure, if it failed.
        self.error: OSError | None = None

    @property
    def pending(self) -> bool:
        """A rewrite was asked for that has not been written yet."""
        return self._written < self._wanted

    def request(self) -> None:
        """The topology changed: rewrite the file soon."""
        self._wanted += 1
        self._wake.set()

    async def flush(self) -> bool:
        """Request a rewrite and wait until the file holds the current topology; False if
        writing it failed."""
        self.request()
        target = self._wanted
        while self._written < target:
            await self._progress.wait()
        return self.error is None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self.write()

    async def write(self) -> None:
        """Write the current topology now (also at startup and at exit)."""
        async with self._lock:
            target = self._wanted
            data = encode(self._describe())
            log.info("NSQ: persisting topic/channel metadata to %s", self.path)
            try:
                await self._run_blocking(
                    functools.partial(
                        write_file_atomically, self._fs, self.path, data, sync_dir=True
                    )
                )
            except OSError as err:
                log.error("failed to persist metadata - %s", err)
                self.error = err
            else:
                self.error = None
            self._written = max(self._written, target)
            self._progress.set()
            self._progress = trio.Event()
