"""Beyond NSQ: dead-lettering (--max-attempts, --dead-letter-topic) and message TTL
(--message-ttl), in process: through REQ and through timeouts (on a mock clock), expired
messages dropped or dead-lettered, the counts in /stats and /metrics, a dead-letter topic that
refuses, and the per-topic and per-channel settings of the HTTP API kept across a restart."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.backend import BackendError
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.prometheus import render_prometheus
from trionsq.nsqd.stats import snapshot
from trionsq.nsqd.topic import Topic
from trionsq.protocol import fin, mpub, pub, req
from trionsq.protocol.message import encode_message_frame
from trionsq.testing import DaemonProcess, pythonpath_env


async def stop(nsqd: NSQD) -> None:
    nsqd.request_exit()
    await nsqd.wait_exited()


async def publish(nsqd: NSQD, topic: str, bodies: list[bytes]) -> None:
    producer = await Conn.open(nsqd)
    await producer.send(mpub(topic, bodies))
    assert await producer.response() == b"OK"
    await producer.aclose()


def channel_stats(nsqd: NSQD, topic: str, channel: str) -> dict[str, object]:
    (entry,) = snapshot(nsqd, topic=topic, channel=channel)["topics"]
    (stats,) = entry["channels"]
    return stats


def publish_frames_at(nsqd: NSQD, topic: str, bodies: list[bytes], timestamp_ns: int) -> None:
    """Messages put on `topic` as if published at `timestamp_ns` (their TTL counts from it)."""
    ids = nsqd.guid.next_ids(len(bodies))
    frames = [encode_message_frame(i, timestamp_ns, 0, b) for i, b in zip(ids, bodies, strict=True)]
    nsqd.get_topic(topic).put_frames(frames)


async def requeue_until_quiet(consumer: Conn, quiet: float = 5.0) -> Counter[bytes]:
    """REQ every message received until none comes for `quiet` seconds; deliveries per ID."""
    deliveries: Counter[bytes] = Counter()
    while True:
        with trio.move_on_after(quiet) as idle:
            message = await consumer.message()
        if idle.cancelled_caught:
            return deliveries
        deliveries[message.id] += 1
        assert message.attempts == deliveries[message.id]
        await consumer.send(req(message.id, 0))


# -- --max-attempts ---------------------------------------------------------------------------


async def test_a_message_reqd_max_attempts_times_moves_to_the_dead_letter_topic(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=3)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    await publish(nsqd, "t", [b"one", b"two", b"three"])
    deliveries = await requeue_until_quiet(consumer)
    assert sorted(deliveries.values()) == [3, 3, 3]  # exactly 3 times each, then never again
    channel = nsqd.topics["t"].channels["c"]
    assert (channel.depth, channel.in_flight_count, channel.requeue_count) == (0, 0, 9)

    # On t.dead, the same messages: IDs, bodies, and attempts (3 deliveries so far: the
    # first from the dead-letter topic says 4).
    dead = await Conn.consumer(nsqd, "t.dead", "replay", ready=10)
    moved = await dead.messages(3)
    assert {m.id for m in moved} == set(deliveries)
    assert sorted(m.body for m in moved) == [b"one", b"three", b"two"]
    assert [m.attempts for m in moved] == [4, 4, 4]
    for message in moved:
        await dead.send(fin(message.id))
    await dead.no_frame_for(1)

    stats = channel_stats(nsqd, "t", "c")
    assert stats["dead_letter_count"] == 3 and stats["expired_count"] == 0
    assert (stats["max_attempts"], stats["dead_letter_topic"]) == (3, "t.dead")
    assert snapshot(nsqd, topic="t.dead")["topics"][0]["message_count"] == 3
    metrics = render_prometheus(snapshot(nsqd))
    assert 'nsq_channel_dead_lettered_total{topic="t",channel="c"} 3' in metrics
    assert 'nsq_channel_expired_total{topic="t",channel="c"} 0' in metrics
    # The dead-letter topic's own channel has no limit: it has no such keys, no samples.
    assert "dead_letter_count" not in channel_stats(nsqd, "t.dead", "replay")
    assert 'nsq_channel_dead_lettered_total{topic="t.dead"' not in metrics


async def test_timeouts_count_as_attempts(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=2)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1, msg_timeout=1000)
    await publish(nsqd, "t", [b"slow"])
    first = await consumer.message()
    second = await consumer.message()  # timed out after 1 s: delivered again
    assert (second.id, second.attempts) == (first.id, 2)
    await consumer.no_frame_for(10)  # timed out again: dead-lettered, not delivered a third time
    channel = nsqd.topics["t"].channels["c"]
    assert (channel.timeout_count, channel.dead_letter_count) == (2, 1)
    dead = await Conn.consumer(nsqd, "t.dead", "c", ready=1)
    moved = await dead.message()
    assert (moved.id, moved.body, moved.attempts) == (first.id, b"slow", 3)


async def test_a_deferred_requeue_past_max_attempts_is_dead_lettered_when_due(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=1)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await publish(nsqd, "t", [b"x"])
    message = await consumer.message()
    await consumer.send(req(message.id, 5000))
    await trio.sleep(4)
    assert nsqd.topics["t"].channels["c"].dead_letter_count == 0
    await consumer.no_frame_for(5)
    assert nsqd.topics["t"].channels["c"].dead_letter_count == 1
    assert nsqd.topics["t.dead"].depth == 1


async def test_dead_letters_are_durable_and_leave_the_channel_across_a_restart(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=1, mem_queue_size=0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    await publish(nsqd, "t", [b"a", b"b"])
    for message in await consumer.messages(2):
        await consumer.send(req(message.id, 0))
    with trio.fail_after(5):
        while nsqd.topics["t"].channels["c"].dead_letter_count < 2:
            await trio.sleep(0.01)
    # On disk in the dead-letter topic (mem-queue-size=0), as any publish.
    assert nsqd.topics["t.dead"].backend.depth == 2
    await consumer.aclose()
    await stop(nsqd)
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=1, mem_queue_size=0)
    assert nsqd.topics["t"].channels["c"].depth == 0  # not delivered again from the channel
    dead = await Conn.consumer(nsqd, "t.dead", "c", ready=5)
    assert sorted(m.body for m in await dead.messages(2)) == [b"a", b"b"]


async def test_a_dead_letter_topics_channels_do_not_dead_letter_again(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=1)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await publish(nsqd, "t", [b"x"])
    await requeue_until_quiet(consumer)
    dead = await Conn.consumer(nsqd, "t.dead", "c", ready=1)
    attempts = []
    for _ in range(4):
        message = await dead.message()
        attempts.append(message.attempts)
        await dead.send(req(message.id, 0))
    assert attempts == [2, 3, 4, 5]  # delivered again and again, as NSQ does
    assert "t.dead.dead" not in nsqd.topics
    assert nsqd.topics["t.dead"].channels["c"].screen is None


async def test_a_pattern_with_the_channel_gives_each_channel_its_dead_letter_topic(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(
        nursery, str(tmp_path), max_attempts=1, dead_letter_topic="dlq.{topic}.{channel}"
    )
    first = await Conn.consumer(nsqd, "t", "a", ready=1)
    second = await Conn.consumer(nsqd, "t", "b#ephemeral", ready=1)
    await publish(nsqd, "t", [b"x"])
    await requeue_until_quiet(first)
    await requeue_until_quiet(second)
    assert nsqd.topics["dlq.t.a"].depth == 1
    assert nsqd.topics["dlq.t.b"].depth == 1


async def test_a_pattern_making_an_invalid_name_leaves_messages_in_the_channel(
    nursery, tmp_path, autojump_clock, caplog
):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=1)
    long_name = "x" * 62  # 62 + ".dead" is over NSQ's 64 characters
    with caplog.at_level(logging.WARNING, logger="trionsq.nsqd"):
        consumer = await Conn.consumer(nsqd, long_name, "c", ready=1)
    assert any("invalid topic name" in r.getMessage() for r in caplog.records)
    await publish(nsqd, long_name, [b"x"])
    attempts = []
    for _ in range(3):
        message = await consumer.message()
        attempts.append(message.attempts)
        await consumer.send(req(message.id, 0))
    assert attempts == [1, 2, 3]  # never dropped: delivered again, as without the flag
    assert channel_stats(nsqd, long_name, "c").get("dead_letter_count") is None


async def test_a_refused_dead_letter_stays_in_the_channel_until_it_can_be_moved(
    nursery, tmp_path, autojump_clock, monkeypatch, caplog
):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=1)
    put_frames = Topic.put_frames
    broken = True

    def failing_put_frames(self: Topic, frames: list[bytes], *args: object, **kw: object) -> None:
        if broken and self.name == "t.dead":
            raise BackendError("failed to write to disk - No space left on device")
        put_frames(self, frames, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Topic, "put_frames", failing_put_frames)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await publish(nsqd, "t", [b"x"])
    message = await consumer.message()
    await consumer.send(req(message.id, 0))
    with caplog.at_level(logging.INFO, logger="trionsq.nsqd"):
        await consumer.no_frame_for(5)  # neither delivered beyond max-attempts...
        channel = nsqd.topics["t"].channels["c"]
        assert (channel.depth, channel.dead_letter_count) == (1, 0)  # ...nor dropped
        await publish(nsqd, "t", [b"z"])  # another dispatch, refused again: not logged again
        other = await consumer.message()
        assert other.body == b"z"
        await consumer.send(fin(other.id))
    refusals = [r for r in caplog.records if "refused messages" in r.getMessage()]
    assert len(refusals) == 1
    broken = False
    await publish(nsqd, "t", [b"y"])  # the next dispatch moves it
    fresh = await consumer.message()
    assert fresh.body == b"y"
    assert (channel.dead_letter_count, nsqd.topics["t.dead"].depth) == (1, 1)


# -- --message-ttl ------------------------------------------------------------------------------


async def test_expired_messages_are_dropped_and_young_ones_delivered(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), message_ttl=60.0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    hour_ago = time.time_ns() - 3600 * 10**9
    publish_frames_at(nsqd, "t", [b"old1", b"old2"], hour_ago)
    await publish(nsqd, "t", [b"young"])
    message = await consumer.message()
    assert message.body == b"young"
    await consumer.no_frame_for(0.5)
    stats = channel_stats(nsqd, "t", "c")
    assert (stats["expired_count"], stats["dead_letter_count"]) == (2, 0)
    assert (stats["message_ttl"], stats["dead_letter_topic"]) == (60 * 10**9, "")
    assert "t.dead" not in nsqd.topics
    assert 'nsq_channel_expired_total{topic="t",channel="c"} 2' in render_prometheus(snapshot(nsqd))


async def test_a_message_expires_while_it_waits(nursery, tmp_path):
    """Real time: published young, delivered after its TTL (the channel was paused)."""
    nsqd = await start_nsqd(nursery, str(tmp_path), message_ttl=0.3)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    nsqd.topics["t"].channels["c"].pause()
    await publish(nsqd, "t", [b"waits"])
    await trio.sleep(0.5)
    await publish(nsqd, "t", [b"fresh"])
    nsqd.topics["t"].channels["c"].unpause()
    assert (await consumer.message()).body == b"fresh"
    await consumer.no_frame_for(0.3)
    assert nsqd.topics["t"].channels["c"].expired_count == 1


async def test_expired_messages_are_dead_lettered_when_the_channel_dead_letters(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), message_ttl=60.0, max_attempts=5)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    publish_frames_at(nsqd, "t", [b"old"], time.time_ns() - 3600 * 10**9)
    await consumer.no_frame_for(0.3)
    stats = channel_stats(nsqd, "t", "c")
    assert (stats["expired_count"], stats["dead_letter_count"]) == (1, 1)
    # The flags' TTL does not apply to the dead-letter topic: the old message is delivered.
    dead = await Conn.consumer(nsqd, "t.dead", "c", ready=1)
    message = await dead.message()
    assert (message.body, message.attempts) == (b"old", 1)


async def test_a_long_run_of_expired_messages_is_screened_in_bounded_passes(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), message_ttl=60.0, mem_queue_size=30_000)
    nsqd.get_topic("t").get_channel("c")
    publish_frames_at(nsqd, "t", [b"%d" % i for i in range(25_000)], time.time_ns() - 10**12)
    await publish(nsqd, "t", [b"young"])
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    with trio.fail_after(10):
        message = await consumer.message()
    assert message.body == b"young"
    assert nsqd.topics["t"].channels["c"].expired_count == 25_000


# -- per-topic and per-channel settings (HTTP) --------------------------------------------------


@pytest.fixture
async def nsqd(nursery: trio.Nursery, tmp_path: object) -> NSQD:
    return await start_nsqd(nursery, str(tmp_path), http_address="127.0.0.1:0")


@pytest.fixture
async def http(nsqd: NSQD) -> AsyncIterator[httpx.AsyncClient]:
    assert nsqd.http_address is not None
    host, port = nsqd.http_address
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        yield client


def read_nsqd_dat(data_path: str) -> dict[str, object]:
    with open(os.path.join(data_path, "nsqd.dat")) as f:
        return json.load(f)


async def test_channel_settings_apply_and_are_kept_in_nsqd_dat_only_when_set(
    nursery, tmp_path, nsqd, http
):
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    assert await nsqd.metadata.flush()
    plain = (tmp_path / "nsqd.dat").read_bytes()
    answer = await http.post("/channel/config?topic=t&channel=c&max_attempts=2")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "max_depth": 0,
        "max_bytes": 0,
        "policy": "reject",
        "max_attempts": 2,
        "message_ttl": 0,
        "dead_letter_topic": "t.dead",
        "settings": {"max_attempts": 2},
    }
    assert read_nsqd_dat(str(tmp_path))["topics"] == [
        {
            "name": "t",
            "paused": False,
            "channels": [{"name": "c", "paused": False, "max_attempts": 2}],
        }
    ]
    await consumer.send(pub("t", b"x"))
    assert await consumer.response() == b"OK"
    attempts = []
    for _ in range(2):
        message = await consumer.message()
        attempts.append(message.attempts)
        await consumer.send(req(message.id, 0))
    await consumer.no_frame_for(0.3)
    assert attempts == [1, 2]
    assert nsqd.topics["t.dead"].depth == 1
    stats = (await http.get("/stats?format=json&topic=t&channel=c")).json()
    counted = stats["topics"][0]["channels"][0]
    assert (counted["dead_letter_count"], counted["dead_letter_topic"]) == (1, "t.dead")
    metrics = (await http.get("/metrics")).text
    assert 'nsq_channel_dead_lettered_total{topic="t",channel="c"} 1' in metrics
    # Cleared: the flags apply again, and nsqd.dat is as Go writes it.
    answer = await http.post("/channel/config?topic=t&channel=c&max_attempts=")
    assert answer.json()["settings"] == {}
    await http.post("/topic/delete?topic=t.dead")
    assert (tmp_path / "nsqd.dat").read_bytes() == plain


async def test_settings_survive_a_restart(nursery, tmp_path, nsqd, http):
    await http.post("/topic/create?topic=t")
    await http.post("/channel/create?topic=t&channel=c")
    await http.post("/channel/create?topic=t&channel=d")
    assert (
        await http.post("/topic/config?topic=t&message_ttl=1h&max_attempts=4")
    ).status_code == 200
    assert (await http.post("/channel/config?topic=t&channel=d&max_attempts=0")).status_code == 200
    topic_answer = (await http.get("/topic/config?topic=t")).json()
    assert topic_answer == {
        "max_depth": 0,
        "max_bytes": 0,
        "policy": "reject",
        "max_attempts": 4,
        "message_ttl": 3600 * 10**9,
        "dead_letter_topic": "t.dead",
        "settings": {"max_attempts": 4, "message_ttl": 3600 * 10**9},
    }
    await stop(nsqd)
    again = await start_nsqd(nursery, str(tmp_path), http_address="127.0.0.1:0")
    host, port = again.http_address  # type: ignore[misc]
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        assert (await client.get("/topic/config?topic=t")).json() == topic_answer
        c = (await client.get("/channel/config?topic=t&channel=c")).json()
        d = (await client.get("/channel/config?topic=t&channel=d")).json()
    assert (c["max_attempts"], c["message_ttl"], c["settings"]) == (4, 3600 * 10**9, {})
    # The channel's own 0 turns dead-lettering off for it; the topic's TTL still applies.
    assert (d["max_attempts"], d["message_ttl"], d["dead_letter_topic"]) == (0, 3600 * 10**9, "")
    assert d["settings"] == {"max_attempts": 0}


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/topic/config?topic=t", 400, "MISSING_ARG_SETTING"),
        ("/topic/config?max_attempts=1", 400, "MISSING_ARG_TOPIC"),
        ("/topic/config?topic=bad!&max_attempts=1", 400, "INVALID_TOPIC"),
        ("/topic/config?topic=nope&max_attempts=1", 404, "TOPIC_NOT_FOUND"),
        ("/topic/config?topic=t&max_attempts=x", 400, "INVALID_MAX_ATTEMPTS"),
        ("/topic/config?topic=t&max_attempts=-1", 400, "INVALID_MAX_ATTEMPTS"),
        ("/topic/config?topic=t&max_attempts=65536", 400, "INVALID_MAX_ATTEMPTS"),
        ("/topic/config?topic=t&message_ttl=5", 400, "INVALID_MESSAGE_TTL"),
        ("/topic/config?topic=t&message_ttl=-1s", 400, "INVALID_MESSAGE_TTL"),
        ("/topic/config?topic=t.dead&max_attempts=3", 400, "MAX_ATTEMPTS_ON_DEAD_LETTER_TOPIC"),
        ("/channel/config?topic=t&max_attempts=1", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/config?topic=t&channel=bad!&max_attempts=1", 400, "INVALID_ARG_CHANNEL"),
        ("/channel/config?topic=t&channel=nope&max_attempts=1", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/config?topic=t&channel=c&message_ttl=soon", 400, "INVALID_MESSAGE_TTL"),
    ],
)
async def test_settings_errors(nsqd, http, path, status, message):
    await http.post("/topic/create?topic=t")
    await http.post("/topic/create?topic=t.dead")
    await http.post("/channel/create?topic=t&channel=c")
    answer = await http.post(path)
    assert (answer.status_code, answer.json()) == (status, {"message": message})
    assert answer.headers["x-nsq-content-type"] == "nsq; version=1.0"
    assert nsqd.topics["t"].delivery_limits is None


async def test_stats_and_metrics_have_no_new_keys_without_the_feature(nsqd, http):
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await consumer.send(pub("t", b"x"))
    assert await consumer.response() == b"OK"
    await consumer.message()
    stats = (await http.get("/stats?format=json")).json()
    channel = stats["topics"][0]["channels"][0]
    assert not {"dead_letter_count", "expired_count", "dead_letter_topic"} & set(channel)
    metrics = (await http.get("/metrics")).text
    assert "dead_lettered" not in metrics and "expired" not in metrics


# -- the flags through `trionsq nsqd` -----------------------------------------------------------


def test_the_flags_and_config_keys_reach_a_daemon_process(tmp_path):
    config = tmp_path / "nsqd.toml"
    config.write_text('message_ttl = "90s"\ndead_letter_topic = "dlq-{topic}"\n')
    with DaemonProcess("nsqd", args=["--max-attempts=2", f"--config={config}"]) as proc:
        deadline = time.monotonic() + 10
        while proc.http_address is None:  # its HTTP line may follow the TCP one
            assert time.monotonic() < deadline, proc.stderr_lines
            time.sleep(0.02)
        host, port = proc.http_address
        base = f"http://{host}:{port}"
        assert httpx.post(f"{base}/topic/create?topic=t").status_code == 200
        answer = httpx.get(f"{base}/topic/config?topic=t").json()
    assert answer == {
        "max_depth": 0,
        "max_bytes": 0,
        "policy": "reject",
        "max_attempts": 2,
        "message_ttl": 90 * 10**9,
        "dead_letter_topic": "dlq-t",
        "settings": {},
    }


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--dead-letter-topic=dead#letters", "--dead-letter-topic must be made of the characters"),
        ("--max-attempts=70000", "--max-attempts must be [0,65535]"),
    ],
)
def test_bad_flags_stop_the_daemon(tmp_path, flag, message):
    result = subprocess.run(
        [sys.executable, "-m", "trionsq", "nsqd", "--tcp-address=127.0.0.1:0", flag],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env=pythonpath_env(),
    )
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr


async def test_a_refusing_dead_letter_topic_does_not_make_the_queue_scan_spin(
    nursery, tmp_path, monkeypatch
):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_attempts=1, mem_queue_size=20_000)
    put_frames = Topic.put_frames

    def failing_put_frames(self: Topic, frames: list[bytes], *args: object, **kw: object) -> None:
        if self.name == "t.dead":
            raise BackendError("failed to write to disk - No space left on device")
        put_frames(self, frames, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Topic, "put_frames", failing_put_frames)
    channel = nsqd.get_topic("t").get_channel("c")
    ids = nsqd.guid.next_ids(12_000)
    now = time.time_ns()
    nsqd.topics["t"].put_frames([encode_message_frame(i, now, 1, b"x") for i in ids])
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await consumer.no_frame_for(0.2)
    # A pass looked at SCREEN_BATCH of them, all refused: kept, and no pass scheduled at once.
    assert (channel.depth, channel.dead_letter_count, channel.rescreen) == (12_000, 0, False)
