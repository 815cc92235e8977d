"""`MetadataWriter` (nsqd.dat): a rewrite encodes only the topics that changed and writes what
a whole encoding would; concurrent changes are coalesced into few writes, and each `flush`
returns only after a write that holds its change is done; a flush with nothing pending does
not write; a failed write fails its flushes and the next flush writes again."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from trionsq.nsqd import metadata
from trionsq.nsqd.metadata import ChannelMetadata, MetadataWriter, TopicMetadata


class Topology:
    """A stand-in for nsqd's topics: name -> (paused, {channel: paused})."""

    def __init__(self) -> None:
        self.topics: dict[str, tuple[bool, dict[str, bool]]] = {}
        self.described: list[str] = []  # describe_topic calls

    def describe(self) -> list[TopicMetadata]:
        return [self._entry(name) for name in self.topics]

    def describe_topic(self, name: str) -> TopicMetadata | None:
        self.described.append(name)
        return self._entry(name) if name in self.topics else None

    def _entry(self, name: str) -> TopicMetadata:
        paused, channels = self.topics[name]
        return TopicMetadata(name, paused, [ChannelMetadata(c, p) for c, p in channels.items()])


class Disk:
    """A `run_blocking` that keeps what each write wrote (and can hold or fail writes)."""

    def __init__(self) -> None:
        self.files: list[bytes] = []
        self.gate: trio.Event | None = None
        self.fail = False

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()
        if self.fail:
            raise OSError(28, "No space left on device")
        data = fn.args[2]  # type: ignore[attr-defined]  # write_file_atomically(fs, path, data)
        self.files.append(data)
        return None

    @property
    def last(self) -> dict[str, Any]:
        return json.loads(self.files[-1])


def _writer(topology: Topology, disk: Disk) -> MetadataWriter:
    return MetadataWriter("/nonexistent/nsqd.dat", topology.describe, topology.describe_topic, disk)


async def test_incremental_rewrites_write_what_a_whole_encoding_would() -> None:
    topology, disk = Topology(), Disk()
    writer = _writer(topology, disk)
    await writer.write()
    assert disk.files[-1] == b'{"topics":null,"version":"1.3.0"}'
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        await _random_changes(topology, disk, writer)
        nursery.cancel_scope.cancel()


async def _random_changes(topology: Topology, disk: Disk, writer: MetadataWriter) -> None:
    rng = random.Random(7)
    for step in range(400):
        name = f"t{rng.randrange(30)}"
        action = rng.randrange(6)
        if action == 0:
            topology.topics.pop(name, None)
        elif name not in topology.topics:
            topology.topics[name] = (False, {})
        elif action == 1:
            topology.topics[name] = (not topology.topics[name][0], topology.topics[name][1])
        elif action == 2:
            topology.topics[name][1].pop(f"c{rng.randrange(3)}", None)
        else:
            channels = topology.topics[name][1]
            channels[f"c{rng.randrange(3)}"] = rng.random() < 0.3
        writer.request(name)
        if step % 7 == 0:
            topology.described.clear()
            assert await writer.flush()
            # Only what changed was described again; the file is the whole encoding.
            assert len(topology.described) <= 7
            # (in the same order, but for topics deleted and created again between two
            # writes; the order means nothing: Go writes its map's)
            as_whole = metadata.encode(topology.describe())
            assert sorted(json.loads(disk.files[-1])["topics"] or [], key=str) == sorted(
                json.loads(as_whole)["topics"] or [], key=str
            )


async def test_the_encoding_is_gos() -> None:
    topology, disk = Topology(), Disk()
    writer = _writer(topology, disk)
    topology.topics["t"] = (False, {"c": True, "d": False})
    topology.topics["quiet"] = (True, {})
    writer.request("t")
    writer.request("quiet")
    await writer.write()
    assert disk.files[-1] == (
        b'{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":true},'
        b'{"name":"d","paused":false}]},{"name":"quiet","paused":true,"channels":null}],'
        b'"version":"1.3.0"}'
    )
    assert disk.files[-1] == metadata.encode(topology.describe())


async def test_a_change_naming_no_topic_encodes_everything_again() -> None:
    topology, disk = Topology(), Disk()
    writer = _writer(topology, disk)
    topology.topics["a"] = (False, {})
    writer.request("a")
    await writer.write()
    topology.topics["b"] = (False, {"c": False})  # changed without naming it
    writer.request()
    await writer.write()
    assert [t["name"] for t in disk.last["topics"]] == ["a", "b"]


async def test_concurrent_changes_are_coalesced_and_each_flush_follows_its_write() -> None:
    topology, disk = Topology(), Disk()
    writer = _writer(topology, disk)
    answered: dict[str, int] = {}  # topic -> how many files were written when its flush returned

    async def create(name: str) -> None:
        topology.topics[name] = (False, {})
        writer.request(name)
        assert await writer.flush()
        answered[name] = len(disk.files)

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        disk.gate = trio.Event()
        nursery.start_soon(create, "first")
        await trio.testing.wait_all_tasks_blocked()  # its write waits at the gate
        for i in range(200):
            nursery.start_soon(create, f"t{i}")
        await trio.testing.wait_all_tasks_blocked()
        assert answered == {}
        disk.gate.set()
        disk.gate = None
        while len(answered) < 201:
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0)
        # One write for the first, one for the 200 that came while it was under way.
        assert len(disk.files) == 2
        for name, files in answered.items():
            held = {t["name"] for t in json.loads(disk.files[files - 1])["topics"]}
            assert name in held
        nursery.cancel_scope.cancel()


async def test_a_flush_with_nothing_pending_does_not_write() -> None:
    topology, disk = Topology(), Disk()
    writer = _writer(topology, disk)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        topology.topics["t"] = (False, {})
        writer.request("t")
        assert await writer.flush()
        assert len(disk.files) == 1
        assert await writer.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert len(disk.files) == 1
        nursery.cancel_scope.cancel()


async def test_a_failed_write_fails_its_flushes_and_the_next_flush_writes_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    topology, disk = Topology(), Disk()
    writer = _writer(topology, disk)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        disk.fail = True
        topology.topics["t"] = (False, {})
        writer.request("t")
        assert await writer.flush() is False
        assert writer.pending
        assert "failed to persist metadata" in caplog.text
        disk.fail = False
        assert await writer.flush() is True
        assert not writer.pending
        assert [t["name"] for t in disk.last["topics"]] == ["t"]
        nursery.cancel_scope.cancel()
