"""Compaction of replicated topics' logs across members (docs/replication.md, sections 6 and
13; issue 30's duplicate storms and replicas that never compacted), in process as
test_replication.py (three or two nsqds in one Trio run over real TCP).

- Every member compacts its own log, the replicas too: their logs and FIN files stay bounded
  by what is live plus the compaction threshold, not by the topic's history.
- What a member compacted away is remembered on disk (`<topic>.replication.dropped`), so that
  after its restart a member still holding those messages (it missed their FINs) does not get
  them delivered again, whichever of the two then leads: the one that forgot (the peer's
  copies are `obsolete`, not fetched) or the one that missed the FINs (it asks the other which
  of its messages it dropped: ASK_DROPPED).
- A peer's FINs are merged before the messages fetched from it are served.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from tests.integration.test_replication import Cluster, consume, publish, settled_primary
from tests.nsqd_harness import Conn
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.replication import log as replication_log
from trionsq.nsqd.replication.topic import ReplicatedTopic
from trionsq.protocol import fin, rdy, sub

THRESHOLD = 20


@pytest.fixture(autouse=True)
def small_compaction_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replication_log, "COMPACT_MIN", THRESHOLD)


def replica_log(nsqd: NSQD, topic: str) -> replication_log.ReplicationLog:
    replicated = nsqd.topics[topic]
    assert isinstance(replicated, ReplicatedTopic)
    return replicated.replica.log


async def collect(
    nsqd: NSQD, topic: str, last: bytes, then: float = 1.0, timeout: float = 20.0
) -> list[bytes]:
    """Every body delivered on channel c (each FINished) until `last` came and `then`
    seconds more (at most `timeout` in all: a loaded machine may be slow to deliver)."""
    got: list[bytes] = []
    conn = await Conn.open(nsqd)
    await conn.send(sub(topic, "c"))
    assert await conn.response() == b"OK"
    await conn.send(rdy(1000))
    with trio.move_on_after(timeout) as scope:
        while True:
            message = await conn.message()
            got.append(bytes(message.body))
            await conn.send(fin(message.id))
            if got[-1] == last:
                scope.deadline = min(scope.deadline, trio.current_time() + then)
    await conn.aclose()
    return got


async def start_topic(cluster: Cluster, topic: str) -> NSQD:
    """Create the topic on node 1 (it stands at once) and return its primary once every
    member is in its epoch. The first PUB is published until answered OK (on a loaded machine
    it may wait out the election and fail) and consumed."""
    n1 = cluster.nodes[0]
    assert n1 is not None
    with trio.fail_after(30):
        while await publish(n1, topic, [b"first"]) != [b"first"]:
            pass
    primary = await settled_primary(cluster, topic)
    assert await consume(primary, topic, 1) == [b"first"]
    return primary


async def test_every_member_compacts_its_log(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        primary = await start_topic(cluster, "rt")
        for round_ in range(3):
            bodies = [b"r%d-%d" % (round_, i) for i in range(100)]
            assert await publish(primary, "rt", bodies) == bodies
            assert sorted(await consume(primary, "rt", 100)) == sorted(bodies)

        def bounded() -> bool:
            return all(
                len(replica_log(node, "rt")) <= THRESHOLD
                and len(replica_log(node, "rt").finished["c"]) <= THRESHOLD
                for node in cluster.live()
            )

        # Each member's log and FIN set shrink to what is live (nothing) plus at most the
        # threshold, and so do the files.
        await cluster.until(bounded)
        record_size = 4 + 8 + 34 + len(b"r0-00")
        for i in range(3):
            data = tmp_path / f"n{i + 1}"
            assert os.path.getsize(data / "rt.replication.log") <= THRESHOLD * (record_size + 8)
            # (a FIN file is appended a block per tick: 8 bytes a block besides the IDs)
            assert os.path.getsize(data / "rt:c.replication.fin") <= 2 * THRESHOLD * 24 + 8
            assert os.path.getsize(data / "rt.replication.dropped") >= 200 * 16
        cluster.stop()


@pytest.mark.parametrize("first", [0, 1])
async def test_what_a_restarted_member_compacted_is_not_delivered_again(
    tmp_path: Path, first: int
) -> None:
    """Two members (degraded=accept so that one alone serves): both hold 100 messages; n2 is
    killed; n1 delivers and finishes them all and compacts them away; n1 is killed too. Both
    start again (in either order, so either may lead): none of the 100 is delivered again,
    and a new message is."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, size=2, replication_degraded="accept")
        await cluster.start_all()
        n1 = await start_topic(cluster, "rt")
        assert n1 is cluster.nodes[0]
        bodies = [b"m%d" % i for i in range(100)]
        assert await publish(n1, "rt", bodies) == bodies
        n2 = cluster.nodes[1]
        assert n2 is not None
        await cluster.until(lambda: len(replica_log(n2, "rt")) == 101)  # and "first"
        cluster.crash(1)  # holds all 100; never gets their FINs
        assert sorted(await consume(n1, "rt", 100)) == sorted(bodies)
        # Compacted away (the last few finished ones may stay, below the threshold).
        n1_log = replica_log(n1, "rt")
        await cluster.until(lambda: len(n1_log) <= THRESHOLD and not n1_log.unfinished("c"))
        await trio.sleep(0.3)  # the FIN file is appended at the topic's next tick (50 ms)
        cluster.crash(0)
        await cluster.start(first)
        await trio.sleep(1.0)  # the first one alone stands, fails, retries
        await cluster.start(1 - first)
        leader = await settled_primary(cluster, "rt")
        assert await publish(leader, "rt", [b"after"]) == [b"after"]
        assert await collect(leader, "rt", b"after") == [b"after"]
        cluster.stop()
