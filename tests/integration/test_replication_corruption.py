"""A member whose replication log was corrupted while it was down (issue 30: a flipped bit in
one node's data file lost half of NATS JetStream's acknowledged writes in Jepsen's test), in
process as test_replication.py: the corrupt record is never delivered, the member merges every
other member's state before it may vote (`TopicReplica._repair`), and no acknowledged message
is lost or delivered corrupted whoever leads."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.integration.test_replication import Cluster, publish, settled_primary
from tests.integration.test_replication_compaction import collect, replica_log, start_topic
from trionsq.nsqd.replication.topic import ReplicatedTopic

BODIES = [b"message-%03d" % i for i in range(40)]


def flip_a_bit_in(path: Path, body: bytes) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(body)
    data[at + len(body) - 1] ^= 0x01
    path.write_bytes(bytes(data))


def held_bodies(cluster: Cluster, index: int) -> set[bytes]:
    node = cluster.nodes[index]
    assert node is not None
    return {frame[34:] for _, frame in replica_log(node, "rt").records()}


async def test_a_corrupted_replica_repairs_before_it_may_vote(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = await start_topic(cluster, "rt")
        assert n1 is cluster.nodes[0]
        assert await publish(n1, "rt", BODIES) == BODIES
        await cluster.until(lambda: held_bodies(cluster, 2) >= set(BODIES))
        cluster.crash(2)
        flip_a_bit_in(tmp_path / "n3" / "rt.replication.log", BODIES[17])
        n3 = await cluster.start(2)
        await cluster.until(lambda: "rt" in n3.topics)
        topic = n3.topics["rt"]
        assert isinstance(topic, ReplicatedTopic)
        log = topic.replica.log
        assert log.corrupt_records == 1
        # It merges the others' state: the lost message comes back, intact, and it may vote.
        await cluster.until(lambda: not log.damaged)
        assert held_bodies(cluster, 2) >= set(BODIES)
        # While damaged, it promises nothing: a pre-vote or PREPARE in any epoch is refused.
        higher = topic.replica.epoch + 1024
        topic.replica.primary = None  # as if it had heard from no primary: it would promise
        assert topic.replica._may_promise(higher)
        log.damaged = True
        assert not topic.replica._may_promise(higher)
        log.damaged = False
        assert topic.replica.stats()["corrupt_records"] == 1
        assert list((tmp_path / "n3").glob("rt.replication.log.corrupt*"))  # kept aside
        cluster.stop()


async def test_after_a_crash_of_all_a_corrupted_record_is_neither_lost_nor_delivered(
    tmp_path: Path,
) -> None:
    """All three killed, a bit flipped in one member's log (in a body), all three started:
    every acknowledged message is delivered once, intact, whichever member leads."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        primary = await start_topic(cluster, "rt")
        assert await publish(primary, "rt", BODIES) == BODIES
        for i in range(3):
            await cluster.until(lambda i=i: held_bodies(cluster, i) >= set(BODIES))  # type: ignore[misc]
        await trio.sleep(0.3)  # the FIN of "first" in every FIN file (appended at a tick)
        for i in range(3):
            cluster.crash(i)
        for damaged in (1, 2):
            flip_a_bit_in(tmp_path / f"n{damaged + 1}" / "rt.replication.log", BODIES[damaged])
        for i in range(3):
            await cluster.start(i)
        leader = await settled_primary(cluster, "rt", timeout=20)
        assert await publish(leader, "rt", [b"last"]) == [b"last"]
        got = await collect(leader, "rt", b"last")
        assert sorted(got) == sorted([*BODIES, b"last"])
        cluster.stop()
