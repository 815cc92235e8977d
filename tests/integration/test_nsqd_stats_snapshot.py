"""`/stats` snapshots of a live in-process nsqd: the JSON shape and key order, sorting, the
topic/channel/include_clients/include_mem rules, counters, client and producer stats, the
pub_counts quirk, e2e processing latency, and the text rendering."""

from __future__ import annotations

import json

import trio
import trio.testing

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.stats import format_text, snapshot
from trionsq.protocol import dpub, fin, mpub, pub, rdy, req

TOPIC_KEYS = [
    "topic_name",
    "channels",
    "depth",
    "backend_depth",
    "message_count",
    "message_bytes",
    "paused",
    "e2e_processing_latency",
]
CHANNEL_KEYS = [
    "channel_name",
    "depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "message_count",
    "requeue_count",
    "timeout_count",
    "client_count",
    "clients",
    "paused",
    "e2e_processing_latency",
]
DISABLED = {"count": 0, "percentiles": None}


async def publish(nsqd, *commands: bytes, identify: dict | None = None) -> Conn:
    producer = await Conn.open(nsqd, **(identify or {}))
    for command in commands:
        await producer.send(command)
        assert await producer.response() == b"OK"
    return producer


async def test_empty_daemon(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    stats = snapshot(nsqd)
    assert list(stats) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert stats["version"] == "1.3.0" and stats["health"] == "OK"
    assert stats["start_time"] == nsqd.start_time
    assert stats["topics"] == [] and stats["producers"] is None
    assert stats["memory"]["gc_total_runs"] >= 0
    json.dumps(stats)


async def test_topics_and_channels_sorted_with_their_counters(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await publish(nsqd, pub("zeta", b"12345"), mpub("alpha", [b"ab", b"cde"]))
    for channel in ("c2", "c1"):
        await Conn.consumer(nsqd, "alpha", channel)
    await trio.testing.wait_all_tasks_blocked()
    stats = snapshot(nsqd)
    assert [t["topic_name"] for t in stats["topics"]] == ["alpha", "zeta"]
    alpha, zeta = stats["topics"]
    assert list(alpha) == TOPIC_KEYS
    assert (alpha["message_count"], alpha["message_bytes"], alpha["depth"]) == (2, 5, 0)
    assert (zeta["message_count"], zeta["message_bytes"], zeta["depth"]) == (1, 5, 1)
    assert zeta["channels"] == [] and zeta["e2e_processing_latency"] == DISABLED
    assert [c["channel_name"] for c in alpha["channels"]] == ["c1", "c2"]
    c1, c2 = alpha["channels"]
    assert list(c1) == CHANNEL_KEYS
    # c2, created first, took what waited in the topic.
    assert (c2["depth"], c2["message_count"], c2["client_count"]) == (2, 2, 1)
    assert (c1["depth"], c1["message_count"], c1["client_count"]) == (0, 0, 1)
    assert c1["e2e_processing_latency"] == DISABLED
    assert alpha["paused"] is False and c1["paused"] is False


async def test_channel_in_flight_deferred_requeue_timeout_and_paused(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=2, msg_timeout=1000)
    await publish(nsqd, mpub("t", [b"a", b"b"]))
    first, second = await consumer.messages(2)
    await consumer.send(rdy(0) + req(first.id, 60_000))
    await trio.sleep(1.5)  # the second times out
    nsqd.topics["t"].channels["c"].paused = True
    channel = snapshot(nsqd, "t")["topics"][0]["channels"][0]
    assert channel["in_flight_count"] == 0
    assert channel["deferred_count"] == 1 and channel["requeue_count"] == 1
    assert channel["timeout_count"] == 1 and channel["depth"] == 1
    assert channel["paused"] is True
    client = channel["clients"][0]
    assert (client["message_count"], client["requeue_count"], client["ready_count"]) == (2, 1, 0)
    assert second.id != first.id


async def test_deferred_publish_without_channel_counts_in_topic_depth(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await publish(nsqd, dpub("t", 5000, b"later"), pub("t", b"now"))
    topic = snapshot(nsqd)["topics"][0]
    assert (topic["depth"], topic["message_count"]) == (2, 2)


async def test_client_stats_of_a_consumer(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(
        nsqd,
        "t",
        "c",
        ready=5,
        client_id="worker-1",
        hostname="worker.example",
        user_agent="test/1.0",
        sample_rate=99,
    )
    await publish(nsqd, pub("t", b"x"))
    message = await consumer.message()
    await consumer.send(fin(message.id))
    await trio.testing.wait_all_tasks_blocked()
    client = snapshot(nsqd)["topics"][0]["channels"][0]["clients"][0]
    server_side = next(iter(nsqd.topics["t"].channels["c"].clients))
    assert client == {
        "client_id": "worker-1",
        "hostname": "worker.example",
        "version": "V2",
        "remote_address": server_side.remote_address,
        "state": 3,
        "ready_count": 5,
        "in_flight_count": 0,
        "message_count": 1,
        "finish_count": 1,
        "requeue_count": 0,
        "connect_ts": server_side.connect_ts,
        "sample_rate": 99,
        "deflate": False,
        "snappy": False,
        "user_agent": "test/1.0",
        "topology_zone": "",
        "topology_region": "",
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }


async def test_producers_and_the_pub_counts_quirk(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await Conn.open(nsqd)  # connected, never published: not a producer
    await publish(nsqd, pub("b", b"1"), mpub("a", [b"2", b"3"]), identify={"client_id": "p"})
    stats = snapshot(nsqd)
    [producer] = stats["producers"]
    assert producer["client_id"] == "p" and producer["state"] == 0
    assert producer["pub_counts"] == [{"topic": "b", "count": 1}]  # only the first topic
    [filtered] = snapshot(nsqd, "a")["producers"]
    assert filtered["pub_counts"] == [{"topic": "a", "count": 2}]


async def test_a_producer_that_disconnects_leaves_producers(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    producer = await publish(nsqd, pub("t", b"1"))
    assert len(snapshot(nsqd)["producers"]) == 1
    await producer.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert snapshot(nsqd)["producers"] is None


async def test_filters(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await Conn.consumer(nsqd, "t1", "shared")
    await Conn.consumer(nsqd, "t1", "only1")
    await Conn.consumer(nsqd, "t2", "shared")
    await publish(nsqd, pub("t3", b"x"))
    assert snapshot(nsqd, "missing")["topics"] is None
    assert snapshot(nsqd, "missing", "shared")["topics"] is None
    assert [t["topic_name"] for t in snapshot(nsqd, "t2")["topics"]] == ["t2"]
    by_channel = snapshot(nsqd, channel="shared")["topics"]
    assert [t["topic_name"] for t in by_channel] == ["t1", "t2"]
    assert all([c["channel_name"] for c in t["channels"]] == ["shared"] for t in by_channel)
    assert snapshot(nsqd, "t2", "only1")["topics"] == []
    assert snapshot(nsqd, "", "")["topics"] == snapshot(nsqd)["topics"]


async def test_without_clients_or_memory(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await Conn.consumer(nsqd, "t", "c")
    await publish(nsqd, pub("t", b"x"))
    stats = snapshot(nsqd, include_clients=False, include_mem=False)
    assert list(stats) == ["version", "health", "start_time", "topics", "producers"]
    assert stats["producers"] is None
    channel = stats["topics"][0]["channels"][0]
    assert channel["clients"] is None and channel["client_count"] == 1
    nsqd.topics["t"].get_channel("idle")
    idle = snapshot(nsqd, "t", "idle")["topics"][0]["channels"][0]
    assert idle["clients"] == []


async def test_health_comes_from_the_daemon(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    nsqd.health = "NOK - disk full"
    assert snapshot(nsqd)["health"] == "NOK - disk full"


# -- e2e processing latency -----------------------------------------------------------------


async def consume_and_finish_in_channel(nsqd, count: int) -> None:
    """Deliver `count` messages of t/c and finish them through the channel (Channel.finish)."""
    consumer = await Conn.consumer(nsqd, "t", "c", ready=count)
    await publish(nsqd, mpub("t", [b"m"] * count))
    messages = await consumer.messages(count)
    channel = nsqd.topics["t"].channels["c"]
    client = channel.clients[0]
    for message in messages:
        channel.finish(client, message.id)


async def test_e2e_latency_recorded_on_finish_and_merged_into_the_topic(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), e2e_processing_latency_percentiles=[0.99, 0.5])
    await consume_and_finish_in_channel(nsqd, 3)
    nsqd.topics["t"].get_channel("other")
    topic = snapshot(nsqd)["topics"][0]
    channel = topic["channels"][0]
    assert channel["channel_name"] == "c"
    latency = channel["e2e_processing_latency"]
    assert latency["count"] == 3
    assert [p["quantile"] for p in latency["percentiles"]] == [0.99, 0.5]
    assert all(0 < p["value"] < 5e9 for p in latency["percentiles"])
    assert topic["channels"][1]["e2e_processing_latency"] == {
        "count": 0,
        "percentiles": [{"quantile": 0.99, "value": 0.0}, {"quantile": 0.5, "value": 0.0}],
    }
    assert topic["e2e_processing_latency"]["count"] == 3
    # The topic's latency covers all its channels even when a channel filter is given.
    filtered = snapshot(nsqd, channel="other")["topics"][0]
    assert filtered["e2e_processing_latency"]["count"] == 3


async def test_e2e_latency_disabled_by_default_records_nothing(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await consume_and_finish_in_channel(nsqd, 2)
    topic = snapshot(nsqd)["topics"][0]
    assert nsqd.topics["t"].channels["c"].e2e is None
    assert topic["e2e_processing_latency"] == DISABLED
    assert topic["channels"][0]["e2e_processing_latency"] == DISABLED


async def test_e2e_latency_recorded_on_fin_over_the_wire(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), e2e_processing_latency_percentiles=[1.0])
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await publish(nsqd, pub("t", b"x"))
    message = await consumer.message()
    await consumer.send(fin(message.id))
    await trio.testing.wait_all_tasks_blocked()
    assert snapshot(nsqd)["topics"][0]["channels"][0]["e2e_processing_latency"]["count"] == 1


# -- text -----------------------------------------------------------------------------------


async def test_text_rendering_of_a_live_snapshot(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await Conn.consumer(nsqd, "t", "c", hostname="h")
    await publish(nsqd, pub("t", b"x"), identify={"hostname": "p"})
    lines = format_text(snapshot(nsqd)).splitlines()
    assert lines[0].startswith("nsqd v1.3.0 ")
    assert "Memory:" in lines and "Topics:" in lines and "Producers:" in lines
    assert any(line.startswith("   [t              ] depth: 0") for line in lines)
    assert any(line.startswith("      [c                        ] depth: 1") for line in lines)
    assert any(line.startswith("        [V2 h: ") and "state: 3" in line for line in lines)
    assert lines[-1].startswith("   [V2 p: ") and "topics: t=1" in lines[-1]
