"""Replicated topics at scale and at the edges of a join (docs/replication.md section 13), in
process as in test_replication.py: FINs merged from a joining member reach the primary's
queues, dead letters count as finished, a lagging member is caught up in bounded frames and
joins the stream with nothing missed or sent twice, and a node with a large log takes office
and answers summaries without stalling its event loop.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.integration.test_replication import Cluster, Proxy, publish
from tests.nsqd_harness import Conn
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.replication import wire as wire
from trionsq.nsqd.replication.log import FIN_SUFFIX, LOG_HEADER, LOG_SUFFIX, encode_frames
from trionsq.nsqd.replication.topic import ReplicatedTopic, TopicReplica
from trionsq.protocol import dpub, fin, mpub, pub, rdy, req, touch
from trionsq.protocol.message import encode_new_frames, framed_id

TOPIC = "rt"


def replica(nsqd: NSQD | None) -> TopicReplica:
    assert nsqd is not None
    topic = nsqd.topics[TOPIC]
    assert isinstance(topic, ReplicatedTopic)
    return topic.replica


def id_of(nsqd: NSQD | None, body: bytes) -> bytes:
    """The ID of the message with `body` in the node's log."""
    for _, frame in replica(nsqd).log.records():
        if frame[34:] == body:
            return framed_id(frame)
    raise AssertionError(f"{body!r} not in the log")


async def receive_until(conn: Conn, marker: bytes, quiet: float = 0.3) -> list[bytes]:
    """Bodies delivered until `marker` (FINed), and any that follow within `quiet` s."""
    got: list[bytes] = []
    with trio.fail_after(10):
        while marker not in got:
            message = await conn.message()
            got.append(bytes(message.body))
            await conn.send(fin(message.id))
    with trio.move_on_after(quiet):
        while True:
            message = await conn.message()
            got.append(bytes(message.body))
            await conn.send(fin(message.id))
    return got


async def rejoin_with_fin(cluster: Cluster, index: int, message_id: bytes) -> None:
    """Crash member `index`, give it a FIN of `message_id` on channel c that the primary
    does not have (as if its consumer had finished it in an epoch it led), and restart it:
    the primary merges its finished sets when it syncs it."""
    primary = cluster.nodes[0]
    await cluster.until(lambda: message_id in replica(cluster.nodes[index]).log.ids())
    cluster.crash(index)
    path = os.path.join(cluster.options[index].data_path, f"{TOPIC}:c{FIN_SUFFIX}")
    with open(path, "ab") as f:
        f.write(message_id)
    node_id = index + 1
    await cluster.start(index)
    await cluster.until(lambda: node_id in replica(primary).members)
    assert message_id in replica(primary).log.finished["c"]


@pytest.mark.parametrize("where", ["memory", "disk", "deferred", "in_flight"])
async def test_a_fin_merged_from_a_joining_member_is_not_delivered_again(
    tmp_path: Path, where: str
) -> None:
    extra: dict[str, Any] = {"msg_timeout": 1.0}
    if where == "disk":
        extra["mem_queue_size"] = 0
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, **extra)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, TOPIC, [b"warm"]) == [b"warm"]
        consumer = await Conn.consumer(n1, TOPIC, "c")
        await cluster.until(lambda: "c" in replica(cluster.nodes[2]).log.finished)
        conn = await Conn.open(n1)
        if where == "deferred":
            await conn.send(dpub(TOPIC, 2500, b"target"))
        else:
            await conn.send(pub(TOPIC, b"target"))
        assert await conn.response() == b"OK"
        await conn.aclose()
        assert await publish(n1, TOPIC, [b"other"]) == [b"other"]
        target = id_of(n1, b"target")
        got: list[bytes] = []
        if where == "in_flight":
            # The consumer holds the message (no FIN): it would come back at its timeout.
            await consumer.send(rdy(10))
            with trio.fail_after(5):
                while b"target" not in got:
                    message = await consumer.message()
                    got.append(bytes(message.body))
                    if message.body != b"target":
                        await consumer.send(fin(message.id))
        channel = n1.topics[TOPIC].channels["c"]
        if where == "disk":
            assert channel.backend.depth and not channel.memory
        async with trio.open_nursery() as holding:
            if where == "in_flight":  # held (TOUCH) until the member has rejoined

                async def keep_holding() -> None:
                    while True:
                        await trio.sleep(0.3)
                        await consumer.send(touch(target))

                holding.start_soon(keep_holding)
            await rejoin_with_fin(cluster, 2, target)
            holding.cancel_scope.cancel()
        if where == "deferred":
            await trio.sleep(2.6)  # its due time has passed
        assert await publish(n1, TOPIC, [b"end"]) == [b"end"]
        await consumer.send(rdy(10))
        got += await receive_until(consumer, b"end", quiet=1.2 if where == "in_flight" else 0.3)
        expected = {b"warm", b"other", b"end"} | ({b"target"} if where == "in_flight" else set())
        assert sorted(got) == sorted(expected)
        await consumer.aclose()
        cluster.stop()


async def test_a_dead_lettered_message_is_finished_on_the_replicas(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, max_attempts=2, dead_letter_topic="dead-{topic}")
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, TOPIC, [b"warm"]) == [b"warm"]
        consumer = await Conn.consumer(n1, TOPIC, "c", ready=1)
        message = await consumer.message()
        await consumer.send(fin(message.id))
        assert await publish(n1, TOPIC, [b"poison"]) == [b"poison"]
        for _ in range(2):  # delivered twice, requeued twice: then dead-lettered
            message = await consumer.message()
            assert message.body == b"poison"
            await consumer.send(req(message.id, 0))
        await consumer.no_frame_for(0.3)
        dead = n1.topics["dead-rt"]
        assert dead.depth == 1
        poison = id_of(n1, b"poison")
        await cluster.until(
            lambda: all(poison in replica(n).log.finished["c"] for n in cluster.live())
        )
        await consumer.aclose()
        cluster.crash(0)
        await cluster.until(lambda: cluster.primary(TOPIC) in (1, 2))
        leader = cluster.nodes[cluster.primary(TOPIC)]  # type: ignore[index]
        assert leader is not None
        assert await publish(leader, TOPIC, [b"end"]) == [b"end"]
        conn = await Conn.consumer(leader, TOPIC, "c", ready=10)
        assert await receive_until(conn, b"end") == [b"end"]
        await conn.aclose()
        cluster.stop()


async def test_a_lagging_member_is_caught_up_in_bounded_frames(tmp_path: Path) -> None:
    """A member that missed much more than --replication-window is sent what it lacks in
    frames of about half a window, no more than a window unacknowledged, while publishing
    goes on; it then joins the stream, holding every message once."""
    window = 32 * 1024
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, replication_window=window)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, TOPIC, [b"warm"]) == [b"warm"]
        await cluster.until(lambda: 3 in replica(n1).members)
        cluster.crash(2)
        conn = await Conn.open(n1)
        body = b"x" * 200
        for batch in range(40):
            await conn.send(mpub(TOPIC, [b"%d-%d-" % (batch, i) + body for i in range(50)]))
            assert await conn.response() == b"OK"
        lag = os.path.getsize(replica(n1).log.path)
        assert lag > 10 * window
        # What the primary sends node 3, and how much of its catch-up is unacknowledged.
        peer = next(p for p in n1.replication.peers if p.address == cluster.addresses[2])
        frames: list[tuple[int, int]] = []
        send = peer.send

        def recording_send(frame: bytes) -> bool:
            if frame[4] == wire.MSGS:
                state = replica(n1).catching_up.get(3)
                frames.append((len(frame), state.unacked_bytes if state is not None else -1))
            return send(frame)

        peer.send = recording_send  # type: ignore[method-assign]
        await cluster.start(2)
        batch = 100
        while 3 not in replica(n1).members:  # publishing goes on during the catch-up
            await conn.send(mpub(TOPIC, [b"%d-%d-" % (batch, i) + body for i in range(20)]))
            assert await conn.response() == b"OK"
            batch += 1
        for _ in range(5):  # and after it joined
            await conn.send(mpub(TOPIC, [b"%d-%d-" % (batch, i) + body for i in range(20)]))
            assert await conn.response() == b"OK"
            batch += 1
        await conn.aclose()
        primary_log = replica(n1).log
        member = replica(cluster.nodes[2])
        await cluster.until(lambda: len(member.log) >= len(primary_log))
        await trio.sleep(0.2)
        catch_up = [(size, unacked) for size, unacked in frames if unacked >= 0]
        assert len(catch_up) > 10
        assert max(size for size, _ in catch_up) <= window // 2 + 1024
        assert max(unacked for _, unacked in catch_up) <= window
        ids = member.log.ids()
        assert len(member.log) == len(ids)  # nothing sent twice
        assert ids == primary_log.ids()  # nothing missed
        cluster.stop()


def write_log(data_path: str, count: int) -> None:
    """A replicated topic's log of `count` unfinished messages, and its channel c."""
    frames = encode_new_frames(
        [b"%016x" % i for i in range(count)],
        1_700_000_000_000_000_000,
        [b"message %d" % i for i in range(count)],
    )
    with open(os.path.join(data_path, TOPIC + LOG_SUFFIX), "wb") as f:
        f.write(LOG_HEADER + encode_frames(frames, 0))
    open(os.path.join(data_path, f"{TOPIC}:c{FIN_SUFFIX}"), "wb").close()


async def test_a_large_log_does_not_stall_a_takeover_or_a_summary(tmp_path: Path) -> None:
    """The whole log is read at a takeover (the channels are rebuilt from it) and for every
    summary (a promise): in worker threads, a chunk at a time, so the event loop goes on.
    Checked by what the members hand to `run_blocking` (not by timing the loop: this
    machine is shared)."""
    count = 300_000
    handed: list[tuple[str, int]] = []  # (the function's name, records it returned)

    async def recording_runner(fn: Any, *args: Any) -> Any:
        result = await trio.to_thread.run_sync(fn, *args)
        name = getattr(fn, "__name__", "")
        handed.append((name, len(result[0]) if name == "records_from" else 0))
        return result

    async with trio.open_nursery() as nursery:
        cluster = Cluster(
            nursery,
            tmp_path,
            replication_heartbeat_interval=0.25,
            replication_lease=1.0,
            replication_failover_timeout=1.5,
            replication_ack_timeout=30.0,
        )
        cluster.run_blocking = recording_runner
        for options in cluster.options:
            write_log(options.data_path, count)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        # Every member loads its log (in the event loop, not checked), a first primary
        # rebuilds its channel.
        await publish(n1, TOPIC, [b"warm"])
        await cluster.until(lambda: all(TOPIC in n.topics for n in cluster.live()))

        def settled() -> bool:
            index = cluster.primary(TOPIC)
            if index is None:
                return False
            first = replica(cluster.nodes[index])
            return len(first.members) == 2 and first.topic.channels["c"].depth >= count

        await cluster.until(settled, 120)  # 300,000 records loaded on a shared machine
        first = cluster.primary(TOPIC)
        assert first is not None
        held = len(replica(cluster.nodes[first]).log)  # the count and "warm"

        handed.clear()
        cluster.crash(first)  # a failover: promises (summaries of the log), a takeover
        await cluster.until(lambda: cluster.primary(TOPIC) not in (None, first))
        leader = cluster.nodes[cluster.primary(TOPIC)]  # type: ignore[index]
        assert leader is not None
        channel = leader.topics[TOPIC].channels["c"]
        await cluster.until(lambda: channel.depth == held, 120)
        names = [name for name, _ in handed]
        assert "_joined_ids" in names  # a summary of the log, in a worker thread
        chunks = [records for name, records in handed if name == "records_from"]
        # The new primary's rebuild read the whole log in worker threads, in chunks (the
        # channel's depth came from them, not from a read in the event loop).
        assert sum(chunks) == held
        assert len(chunks) > 10 and max(chunks) < held // 10
        cluster.stop()


async def test_a_catch_up_the_member_stops_acknowledging_ends(tmp_path: Path) -> None:
    """A stalled member does not hold the catch-up (and the log's compaction) for ever: it
    ends after --replication-ack-timeout without an acknowledgement, and the member is synced
    again once it answers."""
    window = 16 * 1024
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, replication_window=window, replication_ack_timeout=1.0)
        proxy = Proxy(cluster.ports[2])  # node 1's connection to node 3
        await nursery.start(proxy.run)
        options = cluster.options[0]
        cluster.options[0] = dataclasses.replace(
            options, replicate_to=[cluster.addresses[1], f"127.0.0.1:{proxy.port}"]
        )
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, TOPIC, [b"warm"]) == [b"warm"]
        cluster.crash(2)
        conn = await Conn.open(n1)
        for batch in range(20):
            await conn.send(mpub(TOPIC, [b"%d-%d-" % (batch, i) + b"x" * 200 for i in range(50)]))
            assert await conn.response() == b"OK"
        await conn.aclose()
        primary = replica(n1)
        peer = next(p for p in n1.replication.peers if p.address.endswith(f":{proxy.port}"))
        send = peer.send

        def stall_at_catch_up(frame: bytes) -> bool:
            if frame[4] == wire.MSGS and 3 in primary.catching_up:
                proxy.set("stall")  # the member gets nothing more, acknowledges nothing
            return send(frame)

        peer.send = stall_at_catch_up  # type: ignore[method-assign]
        await cluster.start(2)
        await cluster.until(lambda: 3 in primary.catching_up)
        peer.send = send  # type: ignore[method-assign]
        await cluster.until(lambda: 3 not in primary.catching_up, 5)
        assert primary.log.pins == 0 and 3 not in primary.members
        proxy.set("pass")
        await cluster.until(lambda: 3 in primary.members, 10)
        member = replica(cluster.nodes[2])
        await cluster.until(lambda: member.log.ids() == primary.log.ids())
        assert len(member.log) == len(primary.log)
        cluster.stop()
        nursery.cancel_scope.cancel()
