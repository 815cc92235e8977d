"""Bounded queues (beyond NSQ, opt-in) through a whole nsqd: --max-queue-depth,
--max-queue-bytes and --queue-full-policy, the per-topic and per-channel settings of HTTP
/topic/config and /channel/config and their life in nsqd.dat, what reject answers on TCP and
HTTP, what drop-oldest keeps and counts, and that neither touches messages in flight nor
loses an acknowledged message when the disk is full."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

from tests.conformance.nsq_conn import NSQConn
from tests.integration.test_nsqd_durability import FullDisk
from tests.integration.test_nsqd_power_cut import _drain, _options
from tests.nsqd_harness import Conn, start_nsqd
from trionsq.diskqueue.simulated import SimulatedDisk
from trionsq.nsqd.nsqd import NSQD
from trionsq.protocol import (
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    decode_message,
    dpub,
    fin,
    mpub,
    pub,
    rdy,
    req,
    sub,
)
from trionsq.testing import DaemonProcess


async def stop(nsqd: NSQD) -> None:
    nsqd.request_exit()
    await nsqd.wait_exited()


@asynccontextmanager
async def http_client(nsqd: NSQD) -> AsyncIterator[httpx.AsyncClient]:
    assert nsqd.http_address is not None
    host, port = nsqd.http_address
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        yield client


async def bounded(nursery: trio.Nursery, path: Any, **overrides: Any) -> NSQD:
    return await start_nsqd(nursery, str(path), http_address="127.0.0.1:0", **overrides)


async def publish(producer: Conn, topic: str, bodies: list[bytes]) -> None:
    for body in bodies:
        await producer.send(pub(topic, body))
        assert await producer.response() == b"OK"


def topic_stats(nsqd: NSQD, name: str) -> dict[str, Any]:
    from trionsq.nsqd.stats import snapshot

    topics = snapshot(nsqd, topic=name)["topics"]
    assert topics is not None
    return topics[0]  # type: ignore[no-any-return]


def channel_stats(nsqd: NSQD, topic: str, channel: str) -> dict[str, Any]:
    return next(c for c in topic_stats(nsqd, topic)["channels"] if c["channel_name"] == channel)


# -- reject -------------------------------------------------------------------------------


FULL = b"topic t is full (%d queued, max depth 3)"


async def test_reject_refuses_pub_mpub_dpub_whole_and_keeps_the_connection(nursery, tmp_path):
    nsqd = await bounded(nursery, tmp_path, max_queue_depth=3, mem_queue_size=2)
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"a", b"b"])
    # MPUB is all or nothing: two do not fit in the one place left
    await producer.send(mpub("t", [b"c", b"d"]))
    assert (
        await producer.error()
        == b"E_MPUB_FAILED MPUB failed topic t is full (2 queued, max depth 3)"
    )
    await publish(producer, "t", [b"c"])
    await producer.send(pub("t", b"d"))
    assert (
        await producer.error() == b"E_PUB_FAILED PUB failed topic t is full (3 queued, max depth 3)"
    )
    await producer.send(dpub("t", 1000, b"e"))
    assert (
        await producer.error()
        == b"E_DPUB_FAILED DPUB failed topic t is full (3 queued, max depth 3)"
    )
    # the error is not fatal: the same connection publishes elsewhere
    await publish(producer, "other", [b"x"])
    stats = topic_stats(nsqd, "t")
    assert (stats["depth"], stats["message_count"]) == (3, 3)
    assert (stats["rejected_count"], stats["dropped_count"]) == (4, 0)
    assert (stats["max_depth"], stats["queue_full_policy"]) == (3, "reject")
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    assert sorted(m.body for m in await consumer.messages(3)) == [b"a", b"b", b"c"]


async def test_reject_over_http_answers_503_queue_full(nursery, tmp_path):
    nsqd = await bounded(nursery, tmp_path, max_queue_depth=2)
    async with http_client(nsqd) as http:
        assert (await http.post("/pub?topic=t", content=b"1")).status_code == 200
        response = await http.post("/mpub?topic=t", content=b"2\n3\n")
        assert response.status_code == 503
        assert response.json() == {"message": "QUEUE_FULL"}
        assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
        assert (await http.post("/pub?topic=t", content=b"2")).status_code == 200
        response = await http.post("/pub?topic=t", content=b"3")
        assert (response.status_code, response.json()) == (503, {"message": "QUEUE_FULL"})
        response = await http.post("/pub?topic=t&defer=100", content=b"4")
        assert (response.status_code, response.json()) == (503, {"message": "QUEUE_FULL"})
    assert nsqd.topics["t"].depth == 2


async def test_reject_by_disk_bytes(nursery, tmp_path):
    # each message is a 4 + 26 + 10 = 40-byte record
    nsqd = await bounded(nursery, tmp_path, max_queue_bytes=100, mem_queue_size=0)
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"0123456789", b"0123456789"])
    await producer.send(pub("t", b"0123456789"))
    assert await producer.error() == (
        b"E_PUB_FAILED PUB failed topic t is full (80 bytes on disk, max bytes 100)"
    )
    assert nsqd.topics["t"].backend.depth_bytes == 80


async def test_a_full_reject_channel_holds_back_its_topics_publishers(nursery, tmp_path):
    nsqd = await bounded(nursery, tmp_path)
    consumer = await Conn.consumer(nsqd, "t", "slow", ready=0)
    await Conn.consumer(nsqd, "t", "other", ready=0)
    async with http_client(nsqd) as http:
        response = await http.post("/channel/config?topic=t&channel=slow&max_depth=3")
        assert response.json() == {
            "max_depth": 3,
            "max_bytes": 0,
            "policy": "reject",
            "max_attempts": 0,
            "message_ttl": 0,
            "dead_letter_topic": "",
            "settings": {"max_depth": 3},
        }
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"1", b"2", b"3"])
    await producer.send(pub("t", b"4"))
    assert await producer.error() == (
        b"E_PUB_FAILED PUB failed channel t:slow is full (3 queued, max depth 3)"
    )
    assert channel_stats(nsqd, "t", "slow")["rejected_count"] == 1
    assert "rejected_count" not in channel_stats(nsqd, "t", "other")  # it has no limits
    # a message delivered makes room (in flight is not queued)
    await consumer.send(b"RDY 1\n")
    message = await consumer.message()
    await consumer.send(fin(message.id))
    await publish(producer, "t", [b"4"])
    assert channel_stats(nsqd, "t", "other")["depth"] == 4


# -- drop-oldest --------------------------------------------------------------------------


async def test_drop_oldest_keeps_the_newest_in_memory_and_on_disk(nursery, tmp_path):
    nsqd = await bounded(
        nursery, tmp_path, max_queue_depth=10, queue_full_policy="drop-oldest", mem_queue_size=4
    )
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"%02d" % i for i in range(20)])
    await producer.send(mpub("t", [b"%02d" % i for i in range(20, 25)]))
    assert await producer.response() == b"OK"
    topic = nsqd.topics["t"]
    assert topic.depth == 10 and topic.backend.depth > 0
    stats = topic_stats(nsqd, "t")
    assert (stats["dropped_count"], stats["rejected_count"], stats["message_count"]) == (15, 0, 25)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=20)
    kept = await consumer.messages(10)
    assert [m.body for m in kept] == [b"%02d" % i for i in range(15, 25)]
    await consumer.no_frame_for(0.1)
    async with http_client(nsqd) as http:
        metrics = (await http.get("/metrics")).text
    assert 'nsq_topic_dropped_total{topic="t"} 15' in metrics
    assert 'nsq_topic_max_depth{topic="t"} 10' in metrics


async def test_drop_oldest_by_disk_bytes(nursery, tmp_path):
    nsqd = await bounded(
        nursery,
        tmp_path,
        max_queue_bytes=130,  # three 40-byte records, not four
        queue_full_policy="drop-oldest",
        mem_queue_size=0,
    )
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"message%03d" % i for i in range(10)])
    topic = nsqd.topics["t"]
    assert (topic.depth, topic.backend.depth_bytes, topic.dropped_count) == (3, 120, 7)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    assert [m.body for m in await consumer.messages(3)] == [b"message%03d" % i for i in (7, 8, 9)]


async def test_a_drop_oldest_channel_loses_only_its_own_messages(nursery, tmp_path):
    nsqd = await bounded(nursery, tmp_path, mem_queue_size=3)
    fast = await Conn.consumer(nsqd, "t", "fast", ready=0)
    slow = await Conn.consumer(nsqd, "t", "slow", ready=0)
    async with http_client(nsqd) as http:
        response = await http.post(
            "/channel/config?topic=t&channel=slow&max_depth=5&policy=drop-oldest"
        )
        assert response.status_code == 200
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"%02d" % i for i in range(20)])
    await producer.send(mpub("t", [b"%02d" % i for i in range(20, 30)]))
    assert await producer.response() == b"OK"
    await fast.send(b"RDY 100\n")
    assert [m.body for m in await fast.messages(30)] == [b"%02d" % i for i in range(30)]
    await slow.send(b"RDY 100\n")
    assert [m.body for m in await slow.messages(5)] == [b"%02d" % i for i in range(25, 30)]
    await slow.no_frame_for(0.1)
    assert channel_stats(nsqd, "t", "slow")["dropped_count"] == 25
    assert "dropped_count" not in channel_stats(nsqd, "t", "fast")
    assert "dropped_count" not in topic_stats(nsqd, "t")  # the topic has no limits


async def test_drop_oldest_never_drops_a_message_in_flight(nursery, tmp_path):
    nsqd = await bounded(
        nursery, tmp_path, max_queue_depth=2, queue_full_policy="drop-oldest", mem_queue_size=1
    )
    consumer = await Conn.consumer(nsqd, "t", "c", ready=3)
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"a", b"b", b"c"])
    in_flight = await consumer.messages(3)
    await publish(producer, "t", [b"%d" % i for i in range(10)])
    channel = nsqd.topics["t"].channels["c"]
    assert (channel.depth, channel.in_flight_count, channel.dropped_count) == (2, 3, 8)
    # the in-flight ones finish and requeue as usual; a requeue is never dropped (the queue
    # passes its limit by what comes back)
    await consumer.send(b"RDY 0\n")
    await consumer.send(fin(in_flight[0].id))
    await consumer.send(req(in_flight[1].id, 0))
    await consumer.send(fin(in_flight[2].id))
    with trio.fail_after(5):
        while channel.in_flight_count:
            await trio.sleep(0.01)
    assert (channel.depth, channel.dropped_count) == (3, 8)
    await consumer.send(b"RDY 10\n")
    with trio.fail_after(5):
        again = await consumer.messages(3)
    assert sorted(m.body for m in again) == [b"8", b"9", b"b"]
    assert channel.dropped_count == 8


# -- settings per topic and channel -------------------------------------------------------


async def test_settings_are_kept_in_nsqd_dat_and_survive_a_restart(nursery, tmp_path):
    nsqd = await bounded(nursery, tmp_path)
    await Conn.consumer(nsqd, "t", "c")
    await Conn.consumer(nsqd, "plain", "c")
    async with http_client(nsqd) as http:
        response = await http.post("/topic/config?topic=t&max_depth=50&policy=drop-oldest")
        assert response.json() == {
            "max_depth": 50,
            "max_bytes": 0,
            "policy": "drop-oldest",
            "max_attempts": 0,
            "message_ttl": 0,
            "dead_letter_topic": "",
            "settings": {"max_depth": 50, "policy": "drop-oldest"},
        }
        response = await http.post("/channel/config?topic=t&channel=c&max_bytes=4096")
        assert response.status_code == 200
    with open(os.path.join(tmp_path, "nsqd.dat")) as f:
        saved = json.load(f)
    by_name = {t["name"]: t for t in saved["topics"]}
    assert by_name["t"]["queue_limits"] == {"max_depth": 50, "policy": "drop-oldest"}
    assert by_name["t"]["channels"] == [
        {"name": "c", "paused": False, "queue_limits": {"max_bytes": 4096}}
    ]
    assert by_name["plain"] == {
        "name": "plain",
        "paused": False,
        "channels": [{"name": "c", "paused": False}],
    }
    await stop(nsqd)
    nsqd = await bounded(nursery, tmp_path)
    async with http_client(nsqd) as http:
        assert (await http.get("/topic/config?topic=t")).json()["max_depth"] == 50
        channel = (await http.get("/channel/config?topic=t&channel=c")).json()
        assert channel == {
            "max_depth": 0,
            "max_bytes": 4096,
            "policy": "reject",
            "max_attempts": 0,
            "message_ttl": 0,
            "dead_letter_topic": "",
            "settings": {"max_bytes": 4096},
        }
        # an empty value removes a setting: the flags apply again
        await http.post("/topic/config?topic=t&max_depth=&policy=")
        assert (await http.get("/topic/config?topic=t")).json()["settings"] == {}
    assert nsqd.topics["t"].limits is None
    assert nsqd.topics["t"].bounded  # its channel still has a limit
    await stop(nsqd)
    with open(os.path.join(tmp_path, "nsqd.dat")) as f:
        saved = json.load(f)
    assert "queue_limits" not in {t["name"]: t for t in saved["topics"]}["t"]


async def test_a_setting_overrides_the_flags_and_0_lifts_a_limit(nursery, tmp_path):
    nsqd = await bounded(nursery, tmp_path, max_queue_depth=1)
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"1"])
    async with http_client(nsqd) as http:
        await http.post("/topic/config?topic=t&max_depth=0")
    await publish(producer, "t", [b"%d" % i for i in range(20)])
    assert "max_depth" not in topic_stats(nsqd, "t")  # no limit, nothing dropped or refused
    # lowering a drop-oldest limit drops at once
    async with http_client(nsqd) as http:
        await http.post("/topic/config?topic=t&max_depth=5&policy=drop-oldest")
    assert (nsqd.topics["t"].depth, nsqd.topics["t"].dropped_count) == (5, 16)


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/topic/config?topic=t&max_depth=-1", 400, "INVALID_MAX_DEPTH"),
        ("/topic/config?topic=t&max_bytes=ten", 400, "INVALID_MAX_BYTES"),
        ("/topic/config?topic=t&policy=drop-newest", 400, "INVALID_POLICY"),
        ("/topic/config?topic=nope&max_depth=1", 404, "TOPIC_NOT_FOUND"),
        ("/topic/config?max_depth=1", 400, "MISSING_ARG_TOPIC"),
        ("/channel/config?topic=t&channel=nope&max_depth=1", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/config?topic=t&channel=c&max_depth=x", 400, "INVALID_MAX_DEPTH"),
        ("/channel/config?topic=t&max_depth=1", 400, "MISSING_ARG_CHANNEL"),
    ],
)
async def test_bad_settings_answer_nsq_errors(nursery, tmp_path, path, status, message):
    nsqd = await bounded(nursery, tmp_path)
    await Conn.consumer(nsqd, "t", "c")
    async with http_client(nsqd) as http:
        response = await http.post(path)
    assert (response.status_code, response.json()) == (status, {"message": message})
    assert nsqd.topics["t"].limit_override is None
    assert nsqd.topics["t"].channels["c"].limit_override is None


# -- defaults and faults ------------------------------------------------------------------


async def test_without_limits_stats_and_metrics_keep_nsqs_shape(nursery, tmp_path):
    nsqd = await bounded(nursery, tmp_path, mem_queue_size=1)
    await Conn.consumer(nsqd, "t", "c")
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"1", b"2", b"3"])
    assert not nsqd.topics["t"].bounded
    stats = topic_stats(nsqd, "t")
    for key in ("max_depth", "dropped_count", "rejected_count", "backend_bytes"):
        assert key not in stats and key not in stats["channels"][0]
    async with http_client(nsqd) as http:
        metrics = (await http.get("/metrics")).text
    assert "dropped" not in metrics and "max_depth" not in metrics


async def test_a_full_disk_still_loses_no_acknowledged_message(nursery, tmp_path, monkeypatch):
    # the topic is at its limit: a publish would drop its oldest, but only once written
    nsqd = await bounded(
        nursery, tmp_path, max_queue_depth=5, queue_full_policy="drop-oldest", mem_queue_size=0
    )
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"before %d" % i for i in range(5)])
    disk = FullDisk(monkeypatch)
    await producer.send(pub("t", b"refused"))
    assert await producer.error() == (
        b"E_PUB_FAILED PUB failed failed to write to disk - No space left on device"
    )
    assert await producer.closed()
    topic = nsqd.topics["t"]
    assert (topic.depth, topic.dropped_count) == (5, 0)
    disk.free()
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    delivered = await consumer.messages(5)
    assert sorted(m.body for m in delivered) == [b"before %d" % i for i in range(5)]
    producer = await Conn.open(nsqd)
    await publish(producer, "t", [b"after"])
    assert (await consumer.message()).body == b"after"


async def test_reject_with_sync_ack_keeps_every_acknowledged_message_across_a_power_cut() -> None:
    """Publishers against full queues (the topic's and a slow channel's, reject) on a
    simulated disk whose power is cut: every message answered OK comes back."""
    import random

    rng = random.Random(5)
    disk = SimulatedDisk()
    options = _options(sync_ack=True, sync_timeout=0.05, max_queue_depth=40)
    acked: set[bytes] = set()
    finished: set[bytes] = set()
    refused = 0

    async def publisher(nsqd: NSQD, tag: int) -> None:
        nonlocal refused
        conn = await Conn.open(nsqd)
        n = 0
        try:
            while True:
                bodies = [b"p%d-%d" % (tag, n + i) for i in range(10)]
                n += 10
                await conn.send(mpub("powercut", bodies))
                frame = await conn.frame()
                if frame == (FRAME_TYPE_RESPONSE, b"OK"):
                    acked.update(bodies)
                elif b"is full" in frame[1]:
                    refused += 1
                    await trio.sleep(0.005)
                else:
                    return  # the disk is gone
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            return

    async def consumer(nsqd: NSQD) -> None:
        conn = await Conn.open(nsqd)
        try:
            await conn.send(sub("powercut", "c") + rdy(5))
            assert await conn.response() == b"OK"
            while True:
                frame_type, data = await conn.frame()
                if frame_type != FRAME_TYPE_MESSAGE:
                    return
                message = decode_message(data)
                await trio.sleep(0.002)
                finished.add(bytes(message.body))
                await conn.send(fin(message.id))
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            return

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nsqd = NSQD(options, fs=disk)
            await nursery.start(nsqd.run)
            nursery.start_soon(consumer, nsqd)
            for tag in range(3):
                nursery.start_soon(publisher, nsqd, tag)
            await trio.sleep(1.0)
            survivor = disk.power_cut(rng, torn=True)
            await trio.sleep(0.2)
            scope.cancel()
    assert refused > 0 and len(acked) > 50, (refused, len(acked))
    owed = acked - finished
    arrived = await _drain(survivor, options, owed, patience=10)
    lost = owed - arrived.keys()
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages lost"


def test_the_daemon_process_takes_the_flags_and_the_config_file(tmp_path) -> None:
    """`trionsq nsqd` as a process, over real sockets: a flag, and TOML keys."""
    config = tmp_path / "nsqd.toml"
    config.write_text('max_queue_depth = 2\nqueue_full_policy = "reject"\n')
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--config={config}", "--max-queue-bytes=1000000"]
    with DaemonProcess("nsqd", args=args, data_path=str(data)) as daemon:
        with NSQConn(daemon.tcp_address) as producer:
            producer.mpub("t", [b"1", b"2"])
            producer.send(pub("t", b"3"))
            producer.expect_error(
                "E_PUB_FAILED", "PUB failed topic t is full (2 queued, max depth 2)"
            )
            producer.pub("u", b"still connected")
        host, port = daemon.http_address  # type: ignore[misc]
        with httpx.Client(base_url=f"http://{host}:{port}") as http:
            response = http.post("/pub?topic=t", content=b"3")
            assert (response.status_code, response.json()) == (503, {"message": "QUEUE_FULL"})
            assert http.get("/config/queue_full_policy").text == "reject"
            stats = http.get("/stats?format=json&topic=t").json()["topics"][0]
            assert (stats["max_depth"], stats["max_bytes"], stats["rejected_count"]) == (
                2,
                1000000,
                2,
            )


async def test_one_config_request_sets_queue_limits_and_dead_lettering_or_neither(
    nursery, tmp_path
):
    """/channel/config serves bounded queues and dead letters alike: one POST may set both,
    and a bad value for either applies none of them."""
    nsqd = await bounded(nursery, tmp_path)
    await Conn.consumer(nsqd, "t", "c", ready=0)
    async with http_client(nsqd) as http:
        response = await http.post(
            "/channel/config?topic=t&channel=c&max_depth=7&max_attempts=3&message_ttl=bad"
        )
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_MESSAGE_TTL"})
        response = await http.post("/channel/config?topic=t&channel=c&max_depth=-7&max_attempts=3")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_MAX_DEPTH"})
        assert (await http.get("/channel/config?topic=t&channel=c")).json()["settings"] == {}
        response = await http.post("/channel/config?topic=t&channel=c&max_depth=7&max_attempts=3")
        answer = response.json()
        assert answer["settings"] == {"max_depth": 7, "max_attempts": 3}
        assert (answer["max_depth"], answer["max_attempts"]) == (7, 3)
        assert answer["dead_letter_topic"] == "t.dead"
        response = await http.post("/channel/config?topic=t&channel=c")
        assert (response.status_code, response.json()) == (400, {"message": "MISSING_ARG_SETTING"})
    with open(os.path.join(tmp_path, "nsqd.dat")) as f:
        (topic,) = json.load(f)["topics"]
    assert topic["channels"] == [
        {"name": "c", "paused": False, "max_attempts": 3, "queue_limits": {"max_depth": 7}}
    ]
