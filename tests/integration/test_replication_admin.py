"""HTTP admin actions on replicated topics (docs/replication.md sections 5, 6, 8 and 13): done
by the primary with its members, so that they hold after a failover; forwarded to the primary
from a replica; ``POST /topic/takeover``. In process, on the `Cluster` of test_replication.py
with each member's HTTP API on 127.0.0.1 port 0.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.integration.test_replication import Cluster, consume, publish
from tests.integration.test_replication_trace import check, traced
from tests.nsqd_harness import Conn
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.replication.topic import ReplicatedTopic
from trionsq.protocol import CLOSE_WAIT, cls, fin, rdy, sub


def http_cluster(nursery: trio.Nursery, root: Path, **extra: Any) -> Cluster:
    """A `Cluster` whose members serve HTTP too."""
    cluster = Cluster(nursery, root, **extra)
    cluster.options = [
        dataclasses.replace(options, http_address="127.0.0.1:0") for options in cluster.options
    ]
    return cluster


async def post(node: NSQD, path: str) -> httpx.Response:
    assert node.http_address is not None
    host, port = node.http_address
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        return await client.post(path)


def answer(response: httpx.Response) -> tuple[int, Any]:
    """Status and body as Go nsqd gives them: empty on success, else ``{"message": ...}``."""
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
    return response.status_code, response.json() if response.content else None


def node(cluster: Cluster, index: int | None) -> NSQD:
    assert index is not None
    found = cluster.nodes[index]
    assert found is not None
    return found


def replicated(nsqd: NSQD, topic: str) -> ReplicatedTopic:
    found = nsqd.topics[topic]
    assert isinstance(found, ReplicatedTopic)
    return found


async def subscribe(nsqd: NSQD, topic: str, channel: str, ready: int) -> Conn:
    conn = await Conn.open(nsqd)
    await conn.send(sub(topic, channel))
    assert await conn.response() == b"OK"
    await conn.send(rdy(ready))
    return conn


async def receive_all(conn: Conn, quiet: float = 1.0) -> list[bytes]:
    """Bodies delivered (and FINished) until none comes for `quiet` seconds."""
    got = []
    while True:
        with trio.move_on_after(quiet):
            message = await conn.message()
            got.append(bytes(message.body))
            await conn.send(fin(message.id))
            continue
        return got


async def consume_and_close(nsqd: NSQD, topic: str, count: int) -> list[bytes]:
    """Receive and FIN `count` messages on channel c, then close cleanly (CLS: every FIN
    sent before is handled by the time CLOSE_WAIT comes back)."""
    conn = await subscribe(nsqd, topic, "c", count)
    got = []
    for message in await conn.messages(count):
        got.append(bytes(message.body))
        await conn.send(fin(message.id))
    await conn.send(rdy(0) + cls())
    while (frame := await conn.frame()) != (0, CLOSE_WAIT):
        assert frame[0] == 2  # a message sent before RDY 0: not finished
    await conn.aclose()
    return got


async def fail_over(cluster: Cluster, topic: str) -> NSQD:
    """Kill the primary; the new one, once elected."""
    old = cluster.primary(topic)
    assert old is not None
    cluster.crash(old)
    await cluster.until(lambda: cluster.primary(topic) not in (None, old))
    return node(cluster, cluster.primary(topic))


_RETRY = ("NO_PRIMARY", "REPLICATION_TIMEOUT")


async def pause_on_the_primary(cluster: Cluster, topic: str, channel: str) -> None:
    """Pause the channel through the topic's primary; again while it answers 503 (an
    election, or no quorum within the ack timeout: the one event loop stalled on a loaded
    machine). Pausing twice is pausing once."""
    with trio.fail_after(10):
        while True:
            leader = cluster.primary(topic)
            if leader is not None:
                status, body = answer(
                    await post(
                        node(cluster, leader), f"/channel/pause?topic={topic}&channel={channel}"
                    )
                )
                if status == 200:
                    return
                assert status == 503 and body["message"] in _RETRY, (status, body)
            await trio.sleep(0.05)


async def test_a_paused_channel_stays_paused_after_a_failover(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        bodies = [b"m%d" % i for i in range(10)]
        assert await publish(n1, "rt", bodies) == bodies
        assert answer(await post(n1, "/channel/create?topic=rt&channel=c")) == (200, None)
        assert answer(await post(n1, "/channel/pause?topic=rt&channel=c")) == (200, None)
        # Answered once a quorum recorded it: on at least one replica already.
        paused = [replicated(n, "rt").channels["c"].paused for n in cluster.live()[1:]]
        assert any(paused)
        leader = await fail_over(cluster, "rt")
        assert replicated(leader, "rt").channels["c"].paused
        conn = await subscribe(leader, "rt", "c", 100)
        await conn.no_frame_for(1.0)  # paused: nothing delivered
        assert answer(await post(leader, "/channel/unpause?topic=rt&channel=c")) == (200, None)
        assert sorted(await receive_all(conn)) == sorted(bodies)
        await conn.aclose()
        cluster.stop()


async def test_a_pause_reaches_a_new_primary_that_missed_it_through_the_promises(
    tmp_path: Path,
) -> None:
    """A member is away when the channel is paused (the other two record it); they die, the
    away one returns and is elected with a promise from the one that recorded it: it adopts
    the pause from that member's state."""
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        assert await publish(n1, "rt", [b"a"]) == [b"a"]
        assert answer(await post(n1, "/channel/create?topic=rt&channel=c")) == (200, None)
        await cluster.until(lambda: all("rt" in n.topics for n in cluster.live()))
        # n1 leads the topic it created, unless the members' one event loop stalled past the
        # 0.3 s lease on a loaded machine and another was elected: take the roles as they are.
        await cluster.until(lambda: cluster.primary("rt") is not None)
        first = cluster.primary("rt")
        assert first is not None
        away, keeper = [i for i in range(3) if i != first]
        cluster.crash(away)
        await pause_on_the_primary(cluster, "rt", "c")
        cluster.crash(keeper)
        cluster.crash(first)
        # `away` starts first and stands as soon as `keeper` answers (which waits its failover
        # timeout).
        returned = await cluster.start(away)
        assert not replicated(returned, "rt").channels["c"].paused
        await cluster.start(keeper)
        await cluster.until(lambda: cluster.primary("rt") is not None)
        leader = node(cluster, cluster.primary("rt"))
        assert replicated(leader, "rt").channels["c"].paused
        conn = await subscribe(leader, "rt", "c", 10)
        await conn.no_frame_for(1.0)
        await conn.aclose()
        cluster.stop()


async def test_a_paused_topic_stays_paused_after_a_failover(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        assert await publish(n1, "rt", [b"before"]) == [b"before"]
        assert answer(await post(n1, "/topic/pause?topic=rt")) == (200, None)
        leader = await fail_over(cluster, "rt")
        assert replicated(leader, "rt").paused
        assert await publish(leader, "rt", [b"while paused"]) == [b"while paused"]
        conn = await subscribe(leader, "rt", "c", 100)
        # Paused: what the topic holds stays there (it had no channel: the new primary's
        # topic holds every message, docs/replication.md section 13).
        await conn.no_frame_for(1.0)
        assert answer(await post(leader, "/topic/unpause?topic=rt")) == (200, None)
        assert sorted(await receive_all(conn)) == [b"before", b"while paused"]
        await conn.aclose()
        cluster.stop()


async def test_an_emptied_channel_stays_empty_after_a_failover(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        assert answer(await post(n1, "/topic/create?topic=rt")) == (200, None)
        await cluster.until(lambda: cluster.primary("rt") == 0)
        # Both members in the primary's stream first: an admin action's barrier asks only the
        # members already in it (before they join, it answers 503 REPLICATION_TIMEOUT at once,
        # which this test is not about).
        await cluster.until(lambda: len(replicated(n1, "rt").replica.members) == 2)
        assert answer(await post(n1, "/channel/create?topic=rt&channel=c")) == (200, None)
        assert answer(await post(n1, "/channel/create?topic=rt&channel=d")) == (200, None)
        emptied = [b"e%d" % i for i in range(20)]
        assert await publish(n1, "rt", emptied) == emptied
        # Some of them in flight when the channel is emptied (Go drops those too).
        inflight = await subscribe(n1, "rt", "c", 5)
        await inflight.messages(5)
        assert answer(await post(n1, "/channel/empty?topic=rt&channel=c")) == (200, None)
        await inflight.aclose()
        assert await publish(n1, "rt", [b"after"]) == [b"after"]
        await trio.sleep(0.2)  # the stream reaches every member
        leader = await fail_over(cluster, "rt")
        conn = await subscribe(leader, "rt", "c", 100)
        assert await receive_all(conn) == [b"after"]  # nothing emptied comes back
        other = await subscribe(leader, "rt", "d", 100)
        assert sorted(await receive_all(other)) == sorted([*emptied, b"after"])
        await conn.aclose()
        await other.aclose()
        cluster.stop()


async def test_an_emptied_topic_stays_empty_after_a_failover(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        # No channel yet: the messages wait in the topic, and /topic/empty drops them.
        dropped = [b"d%d" % i for i in range(10)]
        assert await publish(n1, "rt", dropped) == dropped
        assert answer(await post(n1, "/topic/empty?topic=rt")) == (200, None)
        assert await publish(n1, "rt", [b"kept"]) == [b"kept"]
        await trio.sleep(0.2)
        leader = await fail_over(cluster, "rt")
        conn = await subscribe(leader, "rt", "c", 100)
        assert await receive_all(conn) == [b"kept"]
        await conn.aclose()
        cluster.stop()


def replication_files(path: Path, topic: str) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith(f"{topic}."))


def topic_files(path: Path, topic: str) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith((f"{topic}.", f"{topic}:")))


async def test_a_deleted_topic_is_gone_on_every_member(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        assert await publish(n1, "rt", [b"a", b"b"]) == [b"a", b"b"]
        assert await consume(n1, "rt", 1) == [b"a"]
        assert answer(await post(n1, "/channel/pause?topic=rt&channel=c")) == (200, None)
        await trio.sleep(0.2)
        dirs = [tmp_path / f"n{i + 1}" for i in range(3)]
        for path in dirs:
            assert "rt.replication.log" in topic_files(path, "rt")
            assert "rt:c.replication.fin" in topic_files(path, "rt")
        # n3 is away when the topic is deleted: it deletes its copy when it comes back.
        cluster.crash(2)
        assert answer(await post(n1, "/topic/delete?topic=rt")) == (200, None)
        for index in (0, 1):
            member = node(cluster, index)
            assert "rt" not in member.topics
            await member.metadata.flush()
        for path in dirs[:2]:
            assert topic_files(path, "rt") == []
            assert b'"rt"' not in (path / "nsqd.dat").read_bytes()
        assert topic_files(dirs[2], "rt") != []
        n3 = await cluster.start(2)
        await cluster.until(lambda: "rt" not in n3.topics)
        await n3.metadata.flush()
        assert topic_files(dirs[2], "rt") == []
        await trio.sleep(1.0)  # n3 did not bring it back to the others
        assert all("rt" not in member.topics for member in cluster.live())
        # The name can be used again: a new topic, without the deleted one's messages.
        assert await publish(n1, "rt", [b"new"]) == [b"new"]
        leader = node(cluster, cluster.primary("rt"))
        conn = await subscribe(leader, "rt", "c", 10)
        assert await receive_all(conn) == [b"new"]
        await conn.aclose()
        cluster.stop()


async def test_a_member_away_during_a_delete_does_not_bring_its_copy_back(
    tmp_path: Path,
) -> None:
    """The topic is created again while a member that missed its delete is away: when it
    returns it holds the new topic only, without the deleted one's messages."""
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        old = [b"old%d" % i for i in range(5)]
        assert await publish(n1, "rt", old) == old
        await trio.sleep(0.2)
        cluster.crash(2)
        assert answer(await post(n1, "/topic/delete?topic=rt")) == (200, None)
        assert await publish(n1, "rt", [b"new"]) == [b"new"]
        n3 = await cluster.start(2)
        leader = node(cluster, cluster.primary("rt"))
        fresh = replicated(leader, "rt").replica
        await cluster.until(
            lambda: "rt" in n3.topics and replicated(n3, "rt").replica.epoch == fresh.epoch
        )
        await cluster.until(lambda: len(replicated(n3, "rt").replica.log) == 1)
        await trio.sleep(0.5)
        assert len(fresh.log) == 1  # nothing of the deleted topic merged in
        conn = await subscribe(leader, "rt", "c", 10)
        assert await receive_all(conn) == [b"new"]
        await conn.aclose()
        cluster.stop()


async def test_a_deleted_channel_is_gone_on_every_member_and_after_a_failover(
    tmp_path: Path,
) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = node(cluster, 0)
        assert await publish(n1, "rt", [b"a"]) == [b"a"]
        assert answer(await post(n1, "/channel/create?topic=rt&channel=c")) == (200, None)
        assert answer(await post(n1, "/channel/create?topic=rt&channel=d")) == (200, None)
        await trio.sleep(0.2)
        # A consumer of the channel on a replica is disconnected as on the primary.
        watcher = await subscribe(node(cluster, 1), "rt", "c", 1)
        assert answer(await post(n1, "/channel/delete?topic=rt&channel=c")) == (200, None)
        assert await watcher.closed()
        await cluster.until(
            lambda: all("c" not in replicated(n, "rt").channels for n in cluster.live())
        )
        for i in range(3):
            assert "rt:c.replication.fin" not in topic_files(tmp_path / f"n{i + 1}", "rt")
        leader = await fail_over(cluster, "rt")
        assert set(replicated(leader, "rt").channels) == {"d"}
        cluster.stop()


async def test_an_admin_action_sent_to_a_replica_is_done_by_the_primary(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1, n2 = node(cluster, 0), node(cluster, 1)
        assert await publish(n1, "rt", [b"a"]) == [b"a"]
        await cluster.until(lambda: "rt" in n2.topics and replicated(n2, "rt").replica.primary == 1)
        # Each answer is the primary's, as Go nsqd gives it.
        assert answer(await post(n2, "/channel/create?topic=rt&channel=c")) == (200, None)
        assert "c" in n1.topics["rt"].channels
        assert answer(await post(n2, "/channel/pause?topic=rt&channel=c")) == (200, None)
        assert n1.topics["rt"].channels["c"].paused
        assert n2.topics["rt"].channels["c"].paused  # the forwarder has it when answered
        missing = "/channel/pause?topic=rt&channel=nope"
        expected = (404, {"message": "CHANNEL_NOT_FOUND"})
        assert answer(await post(n2, missing)) == answer(await post(n1, missing)) == expected
        assert answer(await post(n2, "/topic/pause?topic=rt")) == (200, None)
        assert n1.topics["rt"].paused
        assert answer(await post(n2, "/topic/unpause?topic=rt")) == (200, None)
        assert not n1.topics["rt"].paused
        # Checked where it arrives, as Go does, before anything is forwarded.
        assert answer(await post(n2, "/channel/pause?topic=rt")) == (
            400,
            {"message": "MISSING_ARG_CHANNEL"},
        )
        assert answer(await post(n2, "/topic/pause?topic=nope")) == (
            404,
            {"message": "TOPIC_NOT_FOUND"},
        )
        assert answer(await post(n2, "/topic/delete?topic=rt")) == (200, None)
        assert "rt" not in n1.topics and "rt" not in n2.topics
        await cluster.until(lambda: "rt" not in node(cluster, 2).topics)
        # An unreplicated topic's actions stay where they are sent.
        assert await publish(n2, "plain", [b"x"]) == [b"x"]
        assert answer(await post(n2, "/topic/pause?topic=plain")) == (200, None)
        assert n2.topics["plain"].paused and "plain" not in n1.topics
        cluster.stop()


async def test_a_replica_answers_503_while_no_primary_is_known(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        # A slow failover: the replicas know the primary is gone well before they elect one.
        cluster = http_cluster(
            nursery, tmp_path, replication_lease=3.0, replication_failover_timeout=4.0
        )
        await cluster.start_all()
        n1, n2 = node(cluster, 0), node(cluster, 1)
        assert await publish(n1, "rt", [b"a"]) == [b"a"]
        await cluster.until(lambda: "rt" in n2.topics and replicated(n2, "rt").replica.primary == 1)
        cluster.crash(0)
        await cluster.until(lambda: not n2.replication.peers[0].connected)  # type: ignore[union-attr]
        status, body = answer(await post(n2, "/channel/create?topic=rt&channel=c"))
        assert (status, body) == (503, {"message": "NO_PRIMARY"})
        assert "c" not in n2.topics["rt"].channels
        cluster.stop()


async def test_takeover_by_the_survivor_of_two_members(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path, size=2)
        # Its traces follow the spec: alone, the survivor acknowledges only what it wrote.
        traces = traced(cluster, tmp_path)
        await cluster.start_all()
        n1, n2 = node(cluster, 0), node(cluster, 1)
        bodies = [b"m%d" % i for i in range(10)]
        assert await publish(n1, "rt", bodies) == bodies
        finished = await consume_and_close(n1, "rt", 4)
        survivor = replicated(n2, "rt").replica
        await cluster.until(lambda: len(survivor.log.finished.get("c", ())) == 4)
        assert answer(await post(n1, "/topic/takeover?topic=rt")) == (
            400,
            {"message": "ALREADY_PRIMARY"},
        )
        assert answer(await post(n2, "/topic/takeover?topic=rt")) == (
            409,
            {"message": "PEER_CONNECTED"},
        )
        await publish(n2, "plain", [b"x"])
        assert answer(await post(n2, "/topic/takeover?topic=plain")) == (
            400,
            {"message": "TOPIC_NOT_REPLICATED"},
        )
        cluster.crash(0)
        await trio.sleep(1.5)  # alone, it does not take over by itself (no quorum)
        assert cluster.role(1, "rt") == "replica"
        assert answer(await post(n2, "/topic/takeover?topic=rt")) == (200, None)
        assert cluster.role(1, "rt") == "primary"
        rest = await consume(n2, "rt", 6)
        assert sorted(rest) == sorted(set(bodies) - set(finished))
        # It acknowledges alone, and keeps serving past its lease.
        assert await publish(n2, "rt", [b"alone"]) == [b"alone"]
        await trio.sleep(1.0)
        assert cluster.role(1, "rt") == "primary"
        # The other member returns as a replica of the new epoch and gets what it missed.
        old = await cluster.start(0)
        await cluster.until(lambda: cluster.role(0, "rt") == "replica")
        replica = replicated(old, "rt").replica
        await cluster.until(lambda: replica.epoch == replicated(n2, "rt").replica.epoch)
        await cluster.until(lambda: not replicated(n2, "rt").replica.doubled)
        await cluster.until(lambda: len(replica.log) == len(replicated(n2, "rt").replica.log))
        cluster.stop()
    assert check(traces).ok


async def test_takeover_is_refused_in_a_set_of_three(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = http_cluster(nursery, tmp_path)
        await cluster.start_all()
        n1, n2 = node(cluster, 0), node(cluster, 1)
        assert await publish(n1, "rt", [b"a"]) == [b"a"]
        await cluster.until(lambda: "rt" in n2.topics)
        assert answer(await post(n2, "/topic/takeover?topic=rt")) == (
            400,
            {"message": "TAKEOVER_NEEDS_TWO_MEMBERS"},
        )
        assert answer(await post(n2, "/topic/takeover?topic=nope")) == (
            404,
            {"message": "TOPIC_NOT_FOUND"},
        )
        cluster.stop()
