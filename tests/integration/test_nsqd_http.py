"""nsqd's HTTP API in process: each route's answers and errors as Go nsqd gives them."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.nsqd import NSQD
from trionsq.testing import free_ports


@pytest.fixture
async def nsqd(nursery: trio.Nursery, tmp_path: object) -> NSQD:
    return await start_nsqd(nursery, str(tmp_path), http_address="127.0.0.1:0")


@pytest.fixture
async def http(nsqd: NSQD) -> AsyncIterator[httpx.AsyncClient]:
    assert nsqd.http_address is not None
    host, port = nsqd.http_address
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        yield client


def error_of(response: httpx.Response) -> tuple[int, str]:
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
    return response.status_code, response.json()["message"]


async def test_ping_and_info(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    ping = await http.get("/ping")
    assert (ping.status_code, ping.text) == (200, "OK")
    info = (await http.get("/info")).json()
    assert info["version"] == "1.3.0"
    assert info["tcp_port"] == nsqd.tcp_address[1]  # type: ignore[index]
    assert info["http_port"] == nsqd.http_address[1]  # type: ignore[index]
    assert info["max_heartbeat_interval"] == 60_000_000_000
    assert set(info) >= {"broadcast_address", "hostname", "start_time", "max_deflate_level"}


async def test_ping_reports_an_unhealthy_daemon(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    nsqd.health = "NOK - disk full"
    response = await http.get("/ping")
    assert (response.status_code, response.text) == (500, "NOK - disk full")
    assert "X-NSQ-Content-Type" not in response.headers


async def test_pub_delivers_to_a_consumer(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    response = await http.post("/pub?topic=t", content=b"hello")
    assert (response.status_code, response.text) == (200, "OK")
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
    assert (await consumer.message()).body == b"hello"


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/pub?topic=t", b"", 400, "MSG_EMPTY"),
        ("/pub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("/pub?topic=bad!", b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=t&defer=x", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=-1", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=3600001", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t", b"x" * 1048577, 413, "MSG_TOO_BIG"),
        ("/pub?topic=t%zz", b"x", 400, "INVALID_REQUEST"),
        ("/mpub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("/mpub?topic=t", b"ok\n" + b"x" * 1048577, 413, "MSG_TOO_BIG"),
        ("/mpub?topic=t&binary=true", struct.pack(">I", 0), 413, "BAD_BODY"),
        ("/mpub?topic=t&binary=true", struct.pack(">II", 1, 0), 413, "BAD_MESSAGE"),
        ("/mpub?topic=t&binary=true", struct.pack(">II", 2, 1) + b"a", 413, "BAD_MESSAGE"),
    ],
)
async def test_publish_errors(
    http: httpx.AsyncClient, path: str, body: bytes, status: int, message: str
) -> None:
    assert error_of(await http.post(path, content=body)) == (status, message)


async def test_pub_with_defer_waits(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    await http.post("/pub?topic=t&defer=60000", content=b"later")
    await http.post("/channel/create?topic=t&channel=c")
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await consumer.no_frame_for(0.2)
    assert len(nsqd.topics["t"].channels["c"].deferred) == 1


async def test_mpub_text_and_binary(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    text = await http.post("/mpub?topic=t", content=b"one\ntwo\r\n\nthree\n")
    binary = await http.post(
        "/mpub?topic=t&binary=1", content=struct.pack(">II", 2, 4) + b"four" + b"\0\0\0\x04five"
    )
    assert (text.text, binary.text) == ("OK", "OK")
    bodies = [m.body for m in await consumer.messages(5)]
    assert bodies == [b"one", b"two\r", b"three", b"four", b"five"]


async def test_topic_and_channel_admin(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    assert "t" in nsqd.topics
    assert (await http.post("/channel/create?topic=t&channel=c")).status_code == 200
    assert "c" in nsqd.topics["t"].channels
    await http.post("/pub?topic=t", content=b"x")
    await trio.testing.wait_all_tasks_blocked()
    assert nsqd.topics["t"].channels["c"].depth == 1
    assert (await http.post("/channel/empty?topic=t&channel=c")).status_code == 200
    assert nsqd.topics["t"].channels["c"].depth == 0
    assert (await http.post("/channel/pause?topic=t&channel=c")).status_code == 200
    assert nsqd.topics["t"].channels["c"].paused
    assert (await http.post("/channel/unpause?topic=t&channel=c")).status_code == 200
    assert not nsqd.topics["t"].channels["c"].paused
    assert (await http.post("/topic/pause?topic=t")).status_code == 200
    assert nsqd.topics["t"].paused
    await http.post("/pub?topic=t", content=b"y")
    assert nsqd.topics["t"].channels["c"].depth == 0
    assert (await http.post("/topic/empty?topic=t")).status_code == 200
    assert (await http.post("/topic/unpause?topic=t")).status_code == 200
    await trio.testing.wait_all_tasks_blocked()
    assert nsqd.topics["t"].channels["c"].depth == 0
    assert (await http.post("/channel/delete?topic=t&channel=c")).status_code == 200
    assert "c" not in nsqd.topics["t"].channels
    assert (await http.post("/topic/delete?topic=t")).status_code == 200
    assert "t" not in nsqd.topics


async def test_unpausing_a_channel_delivers(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await http.post("/channel/pause?topic=t&channel=c")
    await http.post("/pub?topic=t", content=b"held")
    await consumer.no_frame_for(0.1)
    await http.post("/channel/unpause?topic=t&channel=c")
    assert (await consumer.message()).body == b"held"


async def test_deleting_a_channel_closes_its_consumers(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await http.post("/channel/delete?topic=t&channel=c")
    assert await consumer.closed()


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/topic/create", 400, "MISSING_ARG_TOPIC"),
        ("/topic/create?topic=a%20b", 400, "INVALID_TOPIC"),
        ("/topic/delete", 400, "MISSING_ARG_TOPIC"),
        ("/topic/delete?topic=missing", 404, "TOPIC_NOT_FOUND"),
        ("/topic/empty?topic=bad!", 400, "INVALID_TOPIC"),
        ("/topic/empty?topic=missing", 404, "TOPIC_NOT_FOUND"),
        ("/topic/pause?topic=missing", 404, "TOPIC_NOT_FOUND"),
        ("/topic/unpause", 400, "MISSING_ARG_TOPIC"),
        ("/channel/create", 400, "MISSING_ARG_TOPIC"),
        ("/channel/create?topic=bad!", 400, "INVALID_ARG_TOPIC"),
        ("/channel/create?topic=t", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/create?topic=t&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
        ("/channel/create?topic=missing&channel=c", 404, "TOPIC_NOT_FOUND"),
        ("/channel/delete?topic=t&channel=missing", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/empty?topic=t&channel=missing", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/pause?topic=t&channel=missing", 404, "CHANNEL_NOT_FOUND"),
    ],
)
async def test_admin_errors(http: httpx.AsyncClient, path: str, status: int, message: str) -> None:
    await http.post("/topic/create?topic=t")
    assert error_of(await http.post(path)) == (status, message)


async def test_unknown_routes_and_methods(http: httpx.AsyncClient) -> None:
    assert error_of(await http.get("/nope")) == (404, "NOT_FOUND")
    assert error_of(await http.get("/pub")) == (405, "METHOD_NOT_ALLOWED")


async def test_config_get_and_put(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    assert (await http.get("/config/msg_timeout")).json() == 60_000_000_000
    assert (await http.get("/config/mem_queue_size")).json() == 10000
    assert (await http.get("/config/log_level")).json() == 2
    assert (await http.put("/config/log_level", content=b"debug")).json() == 1
    assert nsqd.options.log_level == "debug"
    # A port nothing listens on, not NSQ's 4160: the lookup loop connects to it.
    addresses = [f"127.0.0.1:{free_ports(1)[0]}"]
    put = await http.put("/config/nsqlookupd_tcp_addresses", content=json.dumps(addresses))
    assert put.json() == addresses
    assert nsqd.options.nsqlookupd_tcp_addresses == addresses
    assert error_of(await http.get("/config/nope")) == (400, "INVALID_OPTION")
    assert error_of(await http.put("/config/mem_queue_size", content=b"1")) == (
        400,
        "INVALID_OPTION",
    )
    assert error_of(await http.put("/config/log_level", content=b"")) == (413, "INVALID_VALUE")
    assert error_of(await http.put("/config/log_level", content=b"loud")) == (400, "INVALID_VALUE")
    assert error_of(await http.put("/config/nsqlookupd_tcp_addresses", content=b"{")) == (
        400,
        "INVALID_VALUE",
    )


async def test_stats_json_text_and_filters(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await http.post("/pub?topic=t", content=b"x")
    await http.post("/topic/create?topic=other")
    await consumer.message()
    stats = (await http.get("/stats?format=json")).json()
    assert (stats["version"], stats["health"]) == ("1.3.0", "OK")
    assert [t["topic_name"] for t in stats["topics"]] == ["other", "t"]
    channel = stats["topics"][1]["channels"][0]
    assert (channel["channel_name"], channel["in_flight_count"], channel["message_count"]) == (
        "c",
        1,
        1,
    )
    assert channel["clients"][0]["ready_count"] == 1
    assert "memory" in stats
    filtered = (
        await http.get("/stats?format=json&topic=t&include_clients=false&include_mem=0")
    ).json()
    assert [t["topic_name"] for t in filtered["topics"]] == ["t"]
    assert filtered["topics"][0]["channels"][0]["clients"] is None
    assert filtered["producers"] is None and "memory" not in filtered
    assert (await http.get("/stats?format=json&topic=missing")).json()["topics"] is None
    text = (await http.get("/stats?topic=t")).text
    assert text.startswith("nsqd v1.3.0 ")
    assert "\nHealth: OK\n" in text
    assert "   [t              ] depth: 0     be-depth: 0     msgs: 1 " in text


async def test_metrics_parse_as_prometheus_text(http: httpx.AsyncClient, nsqd: NSQD) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    await http.post("/pub?topic=t", content=b"x")
    await http.post("/channel/create?topic=t&channel=c")
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    topic_messages = families["nsq_topic_messages"].samples
    assert any(s.labels == {"topic": "t"} and s.value == 1 for s in topic_messages)
    assert "nsq_channel_depth" in families and "process_resident_memory_bytes" in families
