"""GET /stats: the JSON shape and its filters, per-client stats for consumers and
producers, the counters, and the text format (docs/protocol.md §2.8, §4, §4.1; Go's nsqd/stats.go,
doStats and printStats in nsqd/http.go)."""

from __future__ import annotations

import time
from datetime import datetime

import httpx
import pytest

from .conftest import SCAN_LATENESS, Connect, unique_name
from .nsq_conn import NSQConn
from .nsq_http import (
    JSON_TYPE,
    TEXT_TYPE,
    V1_HEADER,
    V1_VALUE,
    channel_stats,
    eventually,
    expect_empty,
    expect_json,
    expect_text,
    stats,
    topic_stats,
)

#: e2e processing latency with --e2e-processing-latency-percentile unset (the default)
NO_LATENCY = {"count": 0, "percentiles": None}
#: Go's memStats, in printStats' order
MEMORY_KEYS = [
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
    "gc_total_runs",
]
#: ClientV2Stats keys in nsqd 1.3.0 that are always present (authed, auth_identity,
#: auth_identity_url and pub_counts are omitted when empty).
CLIENT_KEYS = {
    "client_id",
    "hostname",
    "version",
    "remote_address",
    "state",
    "ready_count",
    "in_flight_count",
    "message_count",
    "finish_count",
    "requeue_count",
    "connect_ts",
    "sample_rate",
    "deflate",
    "snappy",
    "user_agent",
    "tls",
    "tls_cipher_suite",
    "tls_version",
    "tls_negotiated_protocol",
    "tls_negotiated_protocol_is_mutual",
}
#: Added after 1.3.0 (topology-aware consumption): always present there, empty by default.
CLIENT_KEYS_POST_130 = {"topology_zone", "topology_region"}
STATE_INIT, STATE_SUBSCRIBED = 0, 3


def _remote_address(conn: NSQConn) -> str:
    """How nsqd (Go's net.Addr.String()) writes this connection's address."""
    host, port = conn.sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _create(api: httpx.Client, topic: str, *channels: str) -> None:
    expect_empty(api.post("/topic/create", params={"topic": topic}))
    for channel in channels:
        expect_empty(api.post("/channel/create", params={"topic": topic, "channel": channel}))


def _pub(api: httpx.Client, topic: str, body: bytes) -> None:
    expect_text(api.post("/pub", params={"topic": topic}, content=body), "OK")


# -- the JSON shape -----------------------------------------------------------------------


def test_top_level_keys(api: httpx.Client) -> None:
    full = expect_json(api.get("/stats", params={"format": "json"}))
    assert set(full) == {"version", "health", "start_time", "topics", "memory", "producers"}
    assert isinstance(full["version"], str) and isinstance(full["start_time"], int)
    assert full["health"] == "OK"
    assert set(full["memory"]) == set(MEMORY_KEYS)
    assert all(type(v) is int and v >= 0 for v in full["memory"].values()), full["memory"]
    assert isinstance(full["topics"], list)


@pytest.mark.parametrize("value", ["false", "0"])
def test_include_mem_false_drops_memory(api: httpx.Client, value: str) -> None:
    got = expect_json(api.get("/stats", params={"format": "json", "include_mem": value}))
    assert set(got) == {"version", "health", "start_time", "topics", "producers"}


@pytest.mark.parametrize("value", ["true", "1", "bogus", ""])
def test_include_mem_other_values_keep_memory(api: httpx.Client, value: str) -> None:
    got = expect_json(api.get("/stats", params={"format": "json", "include_mem": value}))
    assert set(got["memory"]) == set(MEMORY_KEYS)


def test_fresh_topic_and_channel(api: httpx.Client, topic: str, channel: str) -> None:
    _create(api, topic, channel)
    assert stats(api, topic=topic)["topics"] == [
        {
            "topic_name": topic,
            "channels": [
                {
                    "channel_name": channel,
                    "depth": 0,
                    "backend_depth": 0,
                    "in_flight_count": 0,
                    "deferred_count": 0,
                    "message_count": 0,
                    "requeue_count": 0,
                    "timeout_count": 0,
                    "client_count": 0,
                    "clients": [],
                    "paused": False,
                    "e2e_processing_latency": NO_LATENCY,
                }
            ],
            "depth": 0,
            "backend_depth": 0,
            "message_count": 0,
            "message_bytes": 0,
            "paused": False,
            "e2e_processing_latency": NO_LATENCY,
        }
    ]


def test_topics_and_channels_are_sorted_by_name(api: httpx.Client, topic: str) -> None:
    names = [f"{topic}_{suffix}" for suffix in ("b", "a", "c")]
    channels = [f"ch_{suffix}" for suffix in ("z", "B", "a", "0")]
    try:
        for name in names:
            _create(api, name, *channels)
        every = [t["topic_name"] for t in stats(api)["topics"]]
        assert every == sorted(every)
        mine = [t for t in stats(api)["topics"] if t["topic_name"] in names]
        assert [t["topic_name"] for t in mine] == sorted(names)
        for found in mine:
            assert [c["channel_name"] for c in found["channels"]] == sorted(channels)
    finally:
        for name in names:
            api.post("/topic/delete", params={"topic": name})


# -- filters ------------------------------------------------------------------------------


def test_topic_filter_unknown_topic_is_null(api: httpx.Client, topic: str) -> None:
    response = api.get("/stats", params={"format": "json", "topic": topic, "include_mem": "0"})
    assert expect_json(response)["topics"] is None
    assert b'"topics":null' in response.content


def test_topic_filter(api: httpx.Client, topic: str) -> None:
    other = unique_name("conf_t")
    try:
        _create(api, topic)
        _create(api, other)
        assert [t["topic_name"] for t in stats(api, topic=topic)["topics"]] == [topic]
    finally:
        api.post("/topic/delete", params={"topic": other})


def test_channel_filter(api: httpx.Client, topic: str, channel: str) -> None:
    """Only that channel is listed, and topics without it are left out."""
    with_it, without = unique_name("conf_t"), unique_name("conf_t")
    try:
        _create(api, topic, channel, "other")
        _create(api, with_it, "other", channel)
        _create(api, without, "other")
        found = stats(api, channel=channel)["topics"]
        assert [t["topic_name"] for t in found] == sorted([topic, with_it])
        assert all([c["channel_name"] for c in t["channels"]] == [channel] for t in found)
        # a topic filter and a channel it does not have: an empty list, not null
        response = api.get(
            "/stats",
            params={"format": "json", "topic": without, "channel": channel, "include_mem": "0"},
        )
        assert expect_json(response)["topics"] == []
        assert b'"topics":[]' in response.content
        found = stats(api, topic=topic, channel=channel)["topics"]
        assert [(t["topic_name"], len(t["channels"])) for t in found] == [(topic, 1)]
    finally:
        for name in (with_it, without):
            api.post("/topic/delete", params={"topic": name})


@pytest.mark.parametrize("value", ["false", "0"])
def test_include_clients_false(
    api: httpx.Client, connect: Connect, topic: str, channel: str, value: str
) -> None:
    """Clients and producers become null; client_count still counts."""
    connect().pub(topic, b"x")
    connect().sub(topic, channel)
    got = stats(api, topic=topic, include_clients=value)
    assert got["producers"] is None
    assert got["topics"][0]["channels"][0]["clients"] is None
    assert got["topics"][0]["channels"][0]["client_count"] == 1


@pytest.mark.parametrize("value", ["true", "1", "bogus", ""])
def test_include_clients_other_values(
    api: httpx.Client, connect: Connect, topic: str, channel: str, value: str
) -> None:
    connect().sub(topic, channel)
    got = stats(api, topic=topic, include_clients=value)
    assert len(got["topics"][0]["channels"][0]["clients"]) == 1


# -- clients ------------------------------------------------------------------------------


def test_consumer_client_stats(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    start = int(time.time())
    consumer = connect(client_id="conf-cid", hostname="conf-host", user_agent="conf-ua/1.0")
    consumer.sub(topic, channel)
    consumer.rdy(5)
    _pub(api, topic, b"one")
    msg = consumer.read_message()

    found = channel_stats(api, topic, channel)
    assert (found["client_count"], found["in_flight_count"], found["message_count"]) == (1, 1, 1)
    [client] = found["clients"]
    assert set(client) - CLIENT_KEYS_POST_130 == CLIENT_KEYS, sorted(client)
    assert start - 1 <= client.pop("connect_ts") <= time.time() + 1
    for key in CLIENT_KEYS_POST_130 & set(client):
        assert client.pop(key) == ""
    assert client == {
        "client_id": "conf-cid",
        "hostname": "conf-host",
        "version": "V2",
        "remote_address": _remote_address(consumer),
        "state": STATE_SUBSCRIBED,
        "ready_count": 5,
        "in_flight_count": 1,
        "message_count": 1,
        "finish_count": 0,
        "requeue_count": 0,
        "sample_rate": 0,
        "deflate": False,
        "snappy": False,
        "user_agent": "conf-ua/1.0",
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }

    consumer.fin(msg.id)

    def finished() -> None:
        found = channel_stats(api, topic, channel)
        client = found["clients"][0]
        assert (client["in_flight_count"], client["finish_count"]) == (0, 1), client
        assert found["in_flight_count"] == 0
        # FIN records an e2e latency only when percentiles are configured
        assert found["e2e_processing_latency"] == NO_LATENCY
        assert topic_stats(api, topic)["e2e_processing_latency"] == NO_LATENCY  # type: ignore[index]

    eventually(finished)


def test_unidentified_client_is_named_by_its_address(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    [client] = channel_stats(api, topic, channel)["clients"]
    host = consumer.sock.getsockname()[0]
    assert (client["client_id"], client["hostname"], client["user_agent"]) == (host, host, "")
    assert (client["state"], client["ready_count"]) == (STATE_SUBSCRIBED, 0)


def test_producer_stats(api: httpx.Client, connect: Connect, topic: str) -> None:
    producer = connect()
    producer.pub(topic, b"a")
    producer.mpub(topic, [b"b", b"c"])
    producer.dpub(topic, 0, b"d")
    address = _remote_address(producer)
    producers = stats(api, topic=topic)["producers"] or []
    found = [p for p in producers if p["remote_address"] == address]
    assert len(found) == 1, producers
    [me] = found
    assert set(me) - CLIENT_KEYS_POST_130 == CLIENT_KEYS | {"pub_counts"}, sorted(me)
    assert me["pub_counts"] == [{"topic": topic, "count": 4}]
    assert (me["version"], me["state"], me["message_count"]) == ("V2", STATE_INIT, 0)
    # the producer stops being listed once it disconnects
    producer.close()

    def gone() -> None:
        producers = stats(api, topic=topic)["producers"] or ()
        assert address not in [p["remote_address"] for p in producers]

    eventually(gone)


def test_connection_that_never_published_is_not_a_producer(
    api: httpx.Client, connect: Connect, topic: str
) -> None:
    idle = connect(client_id="idle")
    idle.nop()
    _create(api, topic)
    address = _remote_address(idle)
    producers = stats(api)["producers"] or ()
    assert address not in [p["remote_address"] for p in producers]


# -- counters -----------------------------------------------------------------------------


def test_requeue_and_timeout_counts(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = connect(msg_timeout=1000)
    consumer.sub(topic, channel)
    consumer.rdy(1)
    _pub(api, topic, b"x")
    msg = consumer.read_message()
    consumer.req(msg.id, 0)
    msg = consumer.read_message()
    assert msg.attempts == 2
    # let it time out (msg_timeout 1 s), then it comes back a third time
    msg = consumer.read_message(timeout=1.0 + SCAN_LATENESS)
    assert msg.attempts == 3
    found = channel_stats(api, topic, channel)
    counts = (found["requeue_count"], found["timeout_count"], found["message_count"])
    assert counts == (1, 1, 1), found
    client = found["clients"][0]
    assert (client["requeue_count"], client["message_count"]) == (1, 3), client


def test_deferred_count(api: httpx.Client, topic: str, channel: str) -> None:
    _create(api, topic, channel)
    for _ in range(2):
        response = api.post("/pub", params={"topic": topic, "defer": "60000"}, content=b"d")
        expect_text(response, "OK")
    _pub(api, topic, b"now")

    def counted() -> None:
        found = channel_stats(api, topic, channel)
        got = (found["deferred_count"], found["depth"], found["message_count"])
        assert got == (2, 1, 3), found

    eventually(counted)
    assert topic_stats(api, topic)["depth"] == 0  # type: ignore[index]


def test_topic_and_channel_paused_flags(api: httpx.Client, topic: str, channel: str) -> None:
    _create(api, topic, channel)
    expect_empty(api.post("/topic/pause", params={"topic": topic}))
    found = topic_stats(api, topic)
    assert found is not None
    assert (found["paused"], found["channels"][0]["paused"]) == (True, False)
    expect_empty(api.post("/topic/unpause", params={"topic": topic}))
    expect_empty(api.post("/channel/pause", params={"topic": topic, "channel": channel}))
    found = topic_stats(api, topic)
    assert found is not None
    assert (found["paused"], found["channels"][0]["paused"]) == (False, True)


# -- the text format ----------------------------------------------------------------------


def _text(api: httpx.Client, **params: str) -> str:
    response = api.get("/stats", params=params)
    assert response.status_code == 200
    assert response.headers.get("content-type") == TEXT_TYPE
    assert response.headers.get(V1_HEADER) == V1_VALUE
    return response.text


def _topic_line(name: str, paused: bool, depth: int = 0, msgs: int = 0) -> str:
    prefix = "*P " if paused else "   "
    return f"{prefix}[{name:<15}] depth: {depth:<5} be-depth: {0:<5} msgs: {msgs:<8} e2e%: \n"


def _channel_line(name: str, paused: bool, depth: int = 0, msgs: int = 0) -> str:
    prefix = "   *P " if paused else "      "
    return (
        f"{prefix}[{name:<25}] depth: {depth:<5} be-depth: {0:<5} inflt: {0:<4} def: {0:<4} "
        f"re-q: {0:<5} timeout: {0:<5} msgs: {msgs:<8} e2e%: \n"
    )


def test_text_header(api: httpx.Client) -> None:
    version = stats(api)["version"]
    start_time = stats(api)["start_time"]
    lines = _text(api).split("\n")
    assert lines[0].startswith(f"nsqd v{version} (built w/"), lines[0]
    assert lines[1].startswith("start_time "), lines[1]
    when = datetime.fromisoformat(lines[1].removeprefix("start_time "))
    assert when.tzinfo is not None and int(when.timestamp()) == start_time, lines[1]
    assert lines[2].startswith("uptime "), lines[2]
    assert lines[3:5] == ["", "Health: OK"], lines[3:5]


def test_text_memory_block(api: httpx.Client, topic: str) -> None:
    text = _text(api, topic=topic)
    memory = text.split("\nMemory:\n", 1)[1].split("\n\n", 1)[0].split("\n")
    assert [line.split("\t")[0] for line in memory] == [f"   {key:<25}" for key in MEMORY_KEYS]
    assert all(line.split("\t")[1].isdigit() for line in memory), memory
    assert "\nMemory:\n" not in _text(api, topic=topic, include_mem="false")


def test_text_no_topics(api: httpx.Client, topic: str) -> None:
    text = _text(api, topic=topic, include_mem="false", include_clients="false")
    assert text.endswith("\nHealth: OK\n\nTopics: None\n\nProducers: None\n"), text


def test_text_topics_and_channels(api: httpx.Client, topic: str, channel: str) -> None:
    other = "ch_a_" + channel
    _create(api, topic, channel, other)
    _pub(api, topic, b"abc")
    eventually(lambda: _expect_channel_depths(api, topic, [1, 1]))
    expect_empty(api.post("/channel/pause", params={"topic": topic, "channel": channel}))
    expect_empty(api.post("/topic/pause", params={"topic": topic}))
    _pub(api, topic, b"held")
    expected = (
        "\nHealth: OK\n\nTopics:\n"
        + _topic_line(topic, paused=True, depth=1, msgs=2)
        + _channel_line(other, paused=False, depth=1, msgs=1)
        + _channel_line(channel, paused=True, depth=1, msgs=1)
        + "\nProducers: None\n"
    )

    def rendered() -> None:
        text = _text(api, topic=topic, include_mem="false", include_clients="false")
        assert text.endswith(expected), text

    eventually(rendered)


def _expect_channel_depths(api: httpx.Client, topic: str, depths: list[int]) -> None:
    found = topic_stats(api, topic)
    assert found is not None
    assert [c["depth"] for c in found["channels"]] == depths, found


@pytest.mark.parametrize("fmt", ["text", "JSON", "", "xml"])
def test_format_other_than_json_is_text(api: httpx.Client, topic: str, fmt: str) -> None:
    text = _text(api, format=fmt, topic=topic, include_mem="0", include_clients="0")
    assert text.startswith("nsqd v"), text
    assert text.endswith("\nTopics: None\n\nProducers: None\n"), text


def test_json_and_text_agree(api: httpx.Client, topic: str, channel: str) -> None:
    _create(api, topic, channel)
    response = api.get("/stats", params={"format": "json", "topic": topic})
    assert response.headers.get("content-type") == JSON_TYPE
    found = response.json()["topics"][0]
    text = _text(api, topic=topic, include_mem="0", include_clients="0")
    assert _topic_line(found["topic_name"], paused=found["paused"]) in text
    assert _channel_line(found["channels"][0]["channel_name"], paused=False) in text
