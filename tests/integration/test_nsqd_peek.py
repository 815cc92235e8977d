"""Peek (``GET /channel/peek``, ``GET /topic/peek``; docs/nsqd.md, "Beyond NSQ: peek"):
every field of what a channel or topic holds in memory, on disk and deferred, and that peeking
changes nothing: the messages are then delivered exactly as they would have been (the same
ones, in the same order, each once, with attempts 1)."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd import peek
from trionsq.nsqd.nsqd import NSQD
from trionsq.protocol import Message, dpub, fin, pub, rdy, req

#: Bodies of every kind peek tells apart: text (with newlines, non-ASCII), and binary.
BODIES = [
    b"plain text",
    "h\u00e9llo \u2713".encode(),
    b"two\nlines\ttabbed\r\n",
    b"\x00\x01\xfebinary",
    b"\xff\xfe not utf-8",
    b"bell \x07 is not printable",
    b'{"json": true}',
    b"last",
]


@pytest.fixture
async def nsqd(nursery: trio.Nursery, tmp_path: object) -> NSQD:
    return await start_nsqd(nursery, str(tmp_path), http_address="127.0.0.1:0", mem_queue_size=3)


async def _client(nsqd: NSQD) -> httpx.AsyncClient:
    assert isinstance(nsqd.http_address, tuple)
    host, port = nsqd.http_address
    return httpx.AsyncClient(base_url=f"http://{host}:{port}")


@pytest.fixture
async def http(nsqd: NSQD) -> AsyncIterator[httpx.AsyncClient]:
    async with await _client(nsqd) as client:
        yield client


async def _publish(nsqd: NSQD, topic: str, bodies: list[bytes]) -> None:
    producer = await Conn.open(nsqd)
    for body in bodies:
        await producer.send(pub(topic, body))
        assert await producer.response() == b"OK"
    await producer.aclose()


async def _dpub(nsqd: NSQD, topic: str, entries: list[tuple[int, bytes]]) -> None:
    producer = await Conn.open(nsqd)
    for defer_ms, body in entries:
        await producer.send(dpub(topic, defer_ms, body))
        assert await producer.response() == b"OK"
    await producer.aclose()


async def _peek(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    response = await http.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
    result: dict[str, Any] = response.json()
    return result


async def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


async def _consume(consumer: Conn, count: int) -> list[Message]:
    got = []
    for _ in range(count):
        message = await consumer.message()
        await consumer.send(fin(message.id))
        got.append(message)
    return got


def _body(entry: dict[str, Any]) -> bytes:
    if entry["body_encoding"] == "text":
        return str(entry["body"]).encode()
    assert entry["body_encoding"] == "base64"
    return base64.b64decode(entry["body"])


def _same_deferred(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """The same deferred messages: due times are nsqd's monotonic clock read as wall time,
    which two peeks may put microseconds apart."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if {**x, "deferred_until": 0} != {**y, "deferred_until": 0}:
            return False
        if abs(x["deferred_until"] - y["deferred_until"]) > 1_000_000:
            return False
    return True


def _check_message(entry: dict[str, Any], body: bytes, queue: str, t0: int, t1: int) -> None:
    assert set(entry) >= {"id", "timestamp", "attempts", "body", "body_encoding", "body_size"}
    assert len(entry["id"]) == 16 and int(entry["id"], 16) >= 0
    assert t0 <= entry["timestamp"] <= t1
    assert entry["attempts"] == 0
    assert entry["queue"] == queue
    assert entry["body_size"] == len(body)
    assert _body(entry) == body
    try:
        text = body.decode()
        printable = all(c.isprintable() or c in "\t\n\r" for c in text)
    except UnicodeDecodeError:
        printable = False
    assert entry["body_encoding"] == ("text" if printable else "base64")
    if queue != "deferred":
        assert "deferred_until" not in entry


async def test_channel_peek_shows_memory_disk_and_deferred_and_changes_nothing(
    nsqd: NSQD, http: httpx.AsyncClient
) -> None:
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    assert (await http.post("/channel/create?topic=t&channel=c")).status_code == 200
    t0 = time.time_ns()
    await _publish(nsqd, "t", BODIES)
    # Deferred by DPUB (TCP) and by /pub?defer= (HTTP), the later-due published first.
    await _dpub(nsqd, "t", [(3000, b"due second")])
    assert (await http.post("/pub?topic=t&defer=2000", content=b"due first")).status_code == 200
    t1 = time.time_ns()
    channel = nsqd.topics["t"].channels["c"]
    await _wait_for(lambda: len(channel.deferred) == 2)

    result = await _peek(http, "/channel/peek?topic=t&channel=c&n=100")
    assert {k: v for k, v in result.items() if k not in ("messages", "deferred")} == {
        "topic_name": "t",
        "channel_name": "c",
        "depth": 8,
        "deferred_count": 2,
        "in_flight_count": 0,
        "paused": False,
    }
    messages = result["messages"]
    # --mem-queue-size=3: the first three in memory, the rest in the channel's disk queue.
    assert len(messages) == len(BODIES)
    for i, (entry, body) in enumerate(zip(messages, BODIES, strict=True)):
        _check_message(entry, body, "memory" if i < 3 else "disk", t0, t1)
    assert len({m["id"] for m in messages}) == len(messages)
    deferred = result["deferred"]
    assert [_body(d) for d in deferred] == [b"due first", b"due second"]
    for entry, body in zip(deferred, [b"due first", b"due second"], strict=True):
        _check_message(entry, body, "deferred", t0, t1)
    now = time.time_ns()
    assert now + 1.0e9 < deferred[0]["deferred_until"] <= t1 + 2.0e9 + 0.1e9
    assert deferred[0]["deferred_until"] < deferred[1]["deferred_until"] <= t1 + 3.1e9

    # n bounds each list; peeking again sees the same: nothing moved.
    few = await _peek(http, "/channel/peek?topic=t&channel=c&n=2")
    assert few["messages"] == messages[:2]
    assert _same_deferred(few["deferred"], deferred[:2])
    one = await _peek(http, "/channel/peek?topic=t&channel=c&n=1")
    assert one["messages"] == messages[:1]
    assert _same_deferred(one["deferred"], deferred[:1])
    default = await _peek(http, "/channel/peek?topic=t&channel=c")
    assert default["messages"] == messages  # n defaults to 10
    again = await _peek(http, "/channel/peek?topic=t&channel=c&n=100")
    assert again["messages"] == messages
    assert _same_deferred(again["deferred"], deferred)
    stats = nsqd.stats()["topics"][0]["channels"][0]
    assert (stats["depth"], stats["deferred_count"], stats["in_flight_count"]) == (8, 2, 0)
    assert (stats["message_count"], stats["requeue_count"], stats["timeout_count"]) == (10, 0, 0)

    # Delivery is what it would have been: the same messages in the peeked order, each
    # once, attempts 1; then the deferred ones at their due time.
    consumer = await Conn.consumer(nsqd, "t", "c", ready=100)
    got = await _consume(consumer, len(BODIES))
    assert [m.id.decode() for m in got] == [m["id"] for m in messages]
    assert [m.body for m in got] == BODIES
    assert [m.timestamp for m in got] == [m["timestamp"] for m in messages]
    assert {m.attempts for m in got} == {1}
    later = await _consume(consumer, 2)
    assert [m.id.decode() for m in later] == [d["id"] for d in deferred]
    assert {m.attempts for m in later} == {1}
    assert time.time_ns() >= deferred[1]["deferred_until"] - 0.2e9
    await consumer.no_frame_for(0.3)
    empty = await _peek(http, "/channel/peek?topic=t&channel=c")
    assert (empty["messages"], empty["deferred"], empty["depth"]) == ([], [], 0)


async def test_a_durable_channel_peeks_past_its_in_flight_messages(
    nursery: trio.Nursery, tmp_path: object
) -> None:
    # --mem-queue-size=0: every message on disk, in a queue that tracks what it handed out.
    nsqd = await start_nsqd(nursery, str(tmp_path), http_address="127.0.0.1:0", mem_queue_size=0)
    async with await _client(nsqd) as http:
        bodies = [b"m%d" % i for i in range(6)]
        consumer = await Conn.consumer(nsqd, "t", "c")
        await _publish(nsqd, "t", bodies)
        await consumer.send(rdy(2))
        first = await consumer.messages(2)
        channel = nsqd.topics["t"].channels["c"]
        await _wait_for(lambda: nsqd.topics["t"].depth == 0 and channel.depth == 4)
        result = await _peek(http, "/channel/peek?topic=t&channel=c")
        assert result["in_flight_count"] == 2
        assert [_body(m) for m in result["messages"]] == bodies[2:]
        assert {m["queue"] for m in result["messages"]} == {"disk"}
        for message in first:
            await consumer.send(fin(message.id))
        await consumer.send(rdy(10))
        rest = await _consume(consumer, 4)
        assert [m.id.decode() for m in rest] == [m["id"] for m in result["messages"]]
        assert {m.attempts for m in rest} == {1}
        await consumer.no_frame_for(0.2)


async def test_a_paused_channel_can_be_peeked(nsqd: NSQD, http: httpx.AsyncClient) -> None:
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    assert (await http.post("/channel/pause?topic=t&channel=c")).status_code == 200
    await _publish(nsqd, "t", [b"a", b"b", b"c", b"d"])
    result = await _peek(http, "/channel/peek?topic=t&channel=c")
    assert result["paused"] is True
    assert [_body(m) for m in result["messages"]] == [b"a", b"b", b"c", b"d"]
    await consumer.no_frame_for(0.1)  # still paused: peeking delivered nothing
    assert (await http.post("/channel/unpause?topic=t&channel=c")).status_code == 200
    got = await _consume(consumer, 4)
    assert [m.id.decode() for m in got] == [m["id"] for m in result["messages"]]
    assert {m.attempts for m in got} == {1}


async def test_a_requeued_message_shows_its_attempts(nsqd: NSQD, http: httpx.AsyncClient) -> None:
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await _publish(nsqd, "t", [b"again"])
    message = await consumer.message()
    await consumer.send(rdy(0))
    await consumer.send(req(message.id, 60000))
    channel = nsqd.topics["t"].channels["c"]
    await _wait_for(lambda: len(channel.deferred) == 1)
    result = await _peek(http, "/channel/peek?topic=t&channel=c")
    assert result["messages"] == []
    (entry,) = result["deferred"]
    assert (entry["id"], entry["attempts"], _body(entry)) == (message.id.decode(), 1, b"again")
    assert entry["deferred_until"] > time.time_ns() + 50e9


async def test_topic_peek_shows_what_waits_for_a_channel(
    nsqd: NSQD, http: httpx.AsyncClient
) -> None:
    bodies = [b"t%d" % i for i in range(5)]
    t0 = time.time_ns()
    await _publish(nsqd, "t", bodies)
    await _dpub(nsqd, "t", [(1000, b"deferred")])
    t1 = time.time_ns()
    result = await _peek(http, "/topic/peek?topic=t&n=50")
    assert {k: v for k, v in result.items() if k not in ("messages", "deferred")} == {
        "topic_name": "t",
        "depth": 5,
        "deferred_count": 1,
        "paused": False,
    }
    for i, (entry, body) in enumerate(zip(result["messages"], bodies, strict=True)):
        _check_message(entry, body, "memory" if i < 3 else "disk", t0, t1)
    (deferred,) = result["deferred"]
    _check_message(deferred, b"deferred", "deferred", t0, t1)
    assert t0 + 1e9 <= deferred["deferred_until"] <= t1 + 1.1e9
    # The first channel gets them all, each once, as without the peek.
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    got = await _consume(consumer, 6)
    queued = [m.id.decode() for m in got if m.id.decode() != deferred["id"]]
    assert queued == [m["id"] for m in result["messages"]]
    assert {m.id.decode() for m in got} == {*queued, deferred["id"]}
    assert {m.attempts for m in got} == {1}
    await consumer.no_frame_for(0.2)


async def test_peek_is_bounded_in_bytes(
    nsqd: NSQD, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _publish(nsqd, "t", [b"x" * 100] * 6)  # 3 in memory, 3 on disk
    monkeypatch.setattr(peek, "MAX_BYTES", 300)
    result = await _peek(http, "/topic/peek?topic=t&n=100")
    assert len(result["messages"]) == 3  # stops once the frames (134 bytes each) pass 300
    monkeypatch.setattr(peek, "MAX_BYTES", 4 * 134 + 1)
    result = await _peek(http, "/topic/peek?topic=t&n=100")
    # All three in memory (402 bytes), then the disk queue's until they pass the rest.
    assert [m["queue"] for m in result["messages"]] == ["memory"] * 3 + ["disk"] * 2
    monkeypatch.setattr(peek, "MAX_BYTES", 1)
    result = await _peek(http, "/topic/peek?topic=t&n=100")
    assert len(result["messages"]) == 1  # never fewer than one


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/channel/peek", 400, "MISSING_ARG_TOPIC"),
        ("/channel/peek?topic=bad!&channel=c", 400, "INVALID_ARG_TOPIC"),
        ("/channel/peek?topic=t", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/peek?topic=t&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
        ("/channel/peek?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"),
        ("/channel/peek?topic=t&channel=nope", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/peek?topic=t&channel=c&n=0", 400, "INVALID_N"),
        ("/channel/peek?topic=t&channel=c&n=1001", 400, "INVALID_N"),
        ("/channel/peek?topic=t&channel=c&n=abc", 400, "INVALID_N"),
        ("/channel/peek?topic=t&channel=c&n=-1", 400, "INVALID_N"),
        ("/channel/peek?topic=t&channel=c&n=", 400, "INVALID_N"),
        ("/topic/peek", 400, "MISSING_ARG_TOPIC"),
        ("/topic/peek?topic=bad!", 400, "INVALID_TOPIC"),
        ("/topic/peek?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("/topic/peek?topic=t&n=x", 400, "INVALID_N"),
        ("/topic/peek?topic=t%zz", 400, "INVALID_REQUEST"),
    ],
)
async def test_peek_errors(
    nsqd: NSQD, http: httpx.AsyncClient, path: str, status: int, message: str
) -> None:
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    assert (await http.post("/channel/create?topic=t&channel=c")).status_code == 200
    response = await http.get(path)
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
    assert (response.status_code, response.json()) == (status, {"message": message})


async def test_peek_is_get_only(nsqd: NSQD, http: httpx.AsyncClient) -> None:
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    response = await http.post("/topic/peek?topic=t")
    assert (response.status_code, response.json()) == (405, {"message": "METHOD_NOT_ALLOWED"})


async def test_a_message_deferred_at_shutdown_shows_its_due_time_from_disk(
    nursery: trio.Nursery, tmp_path: object
) -> None:
    # nsqd writes deferred messages to the disk queue at exit, their due times beside it: after
    # a restart peek shows such a message on disk with its due time, then, once a consumer's
    # read deferred it again, among the deferred ones with the same due time.
    path = str(tmp_path)
    nsqd = await start_nsqd(nursery, path, http_address="127.0.0.1:0")
    consumer = await Conn.consumer(nsqd, "t", "c")
    await _dpub(nsqd, "t", [(600_000, b"after the restart")])
    channel = nsqd.topics["t"].channels["c"]
    await _wait_for(lambda: len(channel.deferred) == 1)
    await consumer.aclose()
    nsqd.request_exit()
    await nsqd.wait_exited()

    nsqd = await start_nsqd(nursery, path, http_address="127.0.0.1:0")
    async with await _client(nsqd) as http:
        result = await _peek(http, "/channel/peek?topic=t&channel=c")
        (entry,) = result["messages"]
        assert (entry["queue"], _body(entry), entry["attempts"]) == (
            "disk",
            b"after the restart",
            0,
        )
        due = entry["deferred_until"]
        assert time.time_ns() + 590e9 < due < time.time_ns() + 600e9
        assert result["deferred"] == []
        consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
        channel = nsqd.topics["t"].channels["c"]
        await _wait_for(lambda: len(channel.deferred) == 1)
        result = await _peek(http, "/channel/peek?topic=t&channel=c")
        assert result["messages"] == []
        (deferred,) = result["deferred"]
        assert deferred["id"] == entry["id"]
        assert abs(deferred["deferred_until"] - due) < 0.1e9
        await consumer.no_frame_for(0.1)
