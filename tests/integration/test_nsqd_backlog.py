"""A topic's disk backlog on its way to the channels (trionsq/nsqd/topic.py, "The disk
backlog"): paced by a consumed channel's reads rather than copied disk to disk at once, moved at
once when no one consumes, and owed to the channels that existed when it was written (a channel
created or emptied meanwhile does not get it). Every message is delivered once, in order where
the queues are FIFO, across a restart too."""

from __future__ import annotations

import trio
import trio.testing

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.topic import PUMP_LEAD_MIN
from trionsq.protocol import Message, fin, mpub

BACKLOG = 6 * PUMP_LEAD_MIN


def _bodies(first: int, count: int, tag: bytes = b"") -> list[bytes]:
    return [tag + b"%06d" % n for n in range(first, first + count)]


async def _publish(nsqd: NSQD, topic: str, bodies: list[bytes]) -> None:
    producer = await Conn.open(nsqd)
    for start in range(0, len(bodies), 500):
        await producer.send(mpub(topic, bodies[start : start + 500]))
        assert await producer.response() == b"OK"
    await producer.aclose()


async def _read(consumer: Conn, count: int) -> list[Message]:
    """Read `count` messages, FINning each."""
    got = []
    for _ in range(count):
        message = await consumer.message()
        await consumer.send(fin(message.id))
        got.append(message)
    return got


async def _settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_a_consumed_channel_gets_the_backlog_as_it_reads_it(nursery, tmp_path):
    """--mem-queue-size=0: the backlog stays in the topic's queue but for a bounded lead in the
    channel's; it arrives once each, in order."""
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    await _publish(nsqd, "t", _bodies(0, BACKLOG))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=100)
    first = await _read(consumer, 100)
    await _settle()
    topic = nsqd.topics["t"]
    channel = topic.channels["c"]
    assert channel.depth <= 2 * PUMP_LEAD_MIN
    assert topic.backend.depth >= BACKLOG - 100 - 2 * PUMP_LEAD_MIN
    rest = await _read(consumer, BACKLOG - 100)
    assert [m.body for m in first + rest] == _bodies(0, BACKLOG)
    assert {m.attempts for m in first + rest} == {1}
    await consumer.no_frame_for(0.2)
    assert (topic.depth, channel.depth, channel.message_count) == (0, 0, BACKLOG)


async def test_a_memory_queue_takes_the_backlog_decoded_once(nursery, tmp_path):
    """With a memory queue large enough for the lead, what the consumer reads goes from the
    topic's disk queue straight to the channel's memory: nothing through the channel's disk."""
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=4 * PUMP_LEAD_MIN)
    bodies = _bodies(0, 5 * BACKLOG)
    await _publish(nsqd, "t", bodies)
    topic = nsqd.topics["t"]
    assert topic.backend.depth == len(bodies) - 4 * PUMP_LEAD_MIN
    consumer = await Conn.consumer(nsqd, "t", "c", ready=300)
    channel = topic.channels["c"]
    got = []
    for _ in range(len(bodies) // 1000):
        got += await _read(consumer, 1000)
        await _settle()
        assert channel.backend.depth == 0
        assert channel.message_count == len(got) + channel.depth + len(channel.clients[0].in_flight)
    assert [m.body for m in got] == bodies
    assert topic.depth == 0


async def test_with_no_consumer_the_backlog_moves_to_the_channels_at_once(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    await _publish(nsqd, "t", _bodies(0, BACKLOG))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=50)
    await _read(consumer, 50)
    topic = nsqd.topics["t"]
    topic.get_channel("idle")
    await _publish(nsqd, "t", _bodies(BACKLOG, 10))
    await _settle()
    assert topic.backend.depth > 0, "paced while 'c' is read"
    await consumer.aclose()
    await _settle()
    # No consumer left: everything moves, as Go's pump moves it.
    assert topic.depth == 0
    channel = topic.channels["c"]
    assert channel.depth + channel.in_flight_count == BACKLOG + 10 - 50
    assert topic.channels["idle"].depth == 10


async def test_a_channel_created_while_the_backlog_is_paced_gets_newer_messages_only(
    nursery, tmp_path
):
    """The backlog was published before 'late' existed: Go's pump would have copied it to
    'early' already, so it is 'early''s alone."""
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    await _publish(nsqd, "t", _bodies(0, BACKLOG))
    early = await Conn.consumer(nsqd, "t", "early", ready=100)
    got = await _read(early, 100)
    late = await Conn.consumer(nsqd, "t", "late", ready=100)
    await _publish(nsqd, "t", _bodies(0, 10, b"new "))
    assert [m.body for m in await _read(late, 10)] == _bodies(0, 10, b"new ")
    got += await _read(early, BACKLOG + 10 - 100)
    assert [m.body for m in got] == _bodies(0, BACKLOG) + _bodies(0, 10, b"new ")
    await late.no_frame_for(0.2)
    await early.no_frame_for(0.1)
    topic = nsqd.topics["t"]
    assert (topic.depth, topic.channels["early"].depth, topic.channels["late"].depth) == (0, 0, 0)
    assert topic.channels["late"].message_count == 10


async def test_the_first_channel_gets_what_waited_for_it(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    await _publish(nsqd, "t", _bodies(0, BACKLOG))
    topic = nsqd.topics["t"]
    topic.get_channel("one")
    topic.get_channel("two")  # created before the pump's first pass: it is owed it too
    consumers = [await Conn.consumer(nsqd, "t", name, ready=200) for name in ("one", "two")]
    for consumer in consumers:
        assert [m.body for m in await _read(consumer, BACKLOG)] == _bodies(0, BACKLOG)


async def test_emptying_a_channel_drops_the_backlog_held_back_for_it(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    await _publish(nsqd, "t", _bodies(0, BACKLOG))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await _read(consumer, 1)
    await consumer.message()  # in flight: dropped too
    topic = nsqd.topics["t"]
    assert topic.backend.depth > 0
    topic.channels["c"].empty()
    await _publish(nsqd, "t", _bodies(0, 3, b"after "))
    assert [m.body for m in await _read(consumer, 3)] == _bodies(0, 3, b"after ")
    await consumer.no_frame_for(0.2)
    assert (topic.depth, topic.channels["c"].depth) == (0, 0)


async def test_a_channel_created_while_paused_gets_what_was_published_meanwhile(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    await _publish(nsqd, "t", _bodies(0, BACKLOG))
    early = await Conn.consumer(nsqd, "t", "early", ready=100)
    got = await _read(early, 100)
    topic = nsqd.topics["t"]
    topic.pause()
    await _publish(nsqd, "t", _bodies(0, 10, b"paused "))
    late = await Conn.consumer(nsqd, "t", "late", ready=100)
    topic.unpause()
    assert [m.body for m in await _read(late, 10)] == _bodies(0, 10, b"paused ")
    got += await _read(early, BACKLOG + 10 - 100)
    assert [m.body for m in got] == _bodies(0, BACKLOG) + _bodies(0, 10, b"paused ")
    await late.no_frame_for(0.2)


async def test_a_paced_backlog_survives_a_restart(nursery, tmp_path):
    """Shut down while most of the backlog is still in the topic's queue: after the restart
    every message not finished comes back, once."""
    path = str(tmp_path)
    nsqd = await start_nsqd(nursery, path, mem_queue_size=0)
    await _publish(nsqd, "t", _bodies(0, BACKLOG))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    done = await _read(consumer, 300)
    in_flight = await consumer.message()
    await _settle()
    assert nsqd.topics["t"].channels["c"].in_flight_count == 1
    assert nsqd.topics["t"].backend.depth > 0
    nsqd.request_exit()
    await nsqd.wait_exited()
    nsqd = await start_nsqd(nursery, path, mem_queue_size=0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=100)
    again = await _read(consumer, BACKLOG - 300)
    await consumer.no_frame_for(0.2)
    assert sorted(m.body for m in done + again) == _bodies(0, BACKLOG)
    assert [m.body for m in again if m.attempts == 2] == [in_flight.body]
