"""Delivery: the RDY window, message frame contents, channels sharing and fanning out,
ephemeral channels (docs/protocol.md §1.3 RDY, §1.5, §1.6, §1.8, §2.1, §2.2, §2.6)."""

from __future__ import annotations

import re
import time

import pytest

from .conftest import Connect, unique_name
from .nsq_conn import collect

HEX_ID = re.compile(rb"^[0-9a-f]{16}$")


# -- RDY ----------------------------------------------------------------------------------


def test_rdy_zero_gets_nothing(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(0)
    connect().mpub(topic, [b"a", b"b"])
    consumer.expect_nothing(0.5)
    consumer.rdy(2)
    assert sorted(m.body for m in consumer.read_messages(2)) == [b"a", b"b"]


def test_no_messages_before_rdy(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    connect().pub(topic, b"x")
    # a client starts with RDY 0
    consumer.expect_nothing(0.5)


def test_rdy_is_a_window_of_unacked_messages(connect: Connect, topic: str, channel: str) -> None:
    connect().mpub(topic, [b"m%d" % i for i in range(5)])
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(2)
    first = consumer.read_messages(2)
    consumer.expect_nothing(0.5)
    # FIN frees one slot: exactly one more arrives
    consumer.fin(first[0].id)
    third = consumer.read_message()
    consumer.expect_nothing(0.4)
    # two more FINs free two slots
    consumer.fin(first[1].id)
    consumer.fin(third.id)
    rest = consumer.read_messages(2)
    consumer.expect_nothing(0.3)
    bodies = {m.body for m in [*first, third, *rest]}
    assert bodies == {b"m%d" % i for i in range(5)}


def test_rdy_without_count_means_one(connect: Connect, topic: str, channel: str) -> None:
    connect().mpub(topic, [b"1", b"2", b"3"])
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.send(b"RDY\n")
    consumer.read_message()
    consumer.expect_nothing(0.5)


def test_rdy_max_is_accepted(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(2500)
    consumer.expect_nothing(0.2)
    connect().pub(topic, b"x")
    assert consumer.read_message().body == b"x"


def test_rdy_out_of_range_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(2501)
    consumer.expect_fatal("E_INVALID", "RDY count 2501 out of range 0-2500")


@pytest.mark.parametrize("value", [b"abc", b"-1", b"1x", b"+1"])
def test_rdy_unparsable_is_fatal(connect: Connect, topic: str, channel: str, value: bytes) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.send(b"RDY " + value + b"\n")
    consumer.expect_fatal("E_INVALID", f"RDY could not parse count {value.decode()}")


def test_rdy_before_sub_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.rdy(1)
    conn.expect_fatal("E_INVALID", "cannot RDY in current state")


def test_lowering_rdy_stops_delivery(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(1)
    producer = connect()
    producer.pub(topic, b"one")
    msg = consumer.read_message()
    consumer.rdy(0)
    consumer.fin(msg.id)
    producer.pub(topic, b"two")
    consumer.expect_nothing(0.5)
    consumer.rdy(1)
    assert consumer.read_message().body == b"two"


# -- message frames -----------------------------------------------------------------------


def test_message_frame_contents(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(1)
    before = time.time_ns()
    connect().pub(topic, b"payload")
    msg = consumer.read_message()
    after = time.time_ns()
    assert HEX_ID.match(msg.id), msg.id
    assert msg.attempts == 1
    # publish time, in ns since the epoch (allow for clock skew between hosts)
    assert before - 5_000_000_000 <= msg.timestamp <= after + 5_000_000_000
    assert msg.body == b"payload"


@pytest.mark.parametrize(
    "body",
    [
        bytes(range(256)),
        b"\n",
        b"\x00" * 100,
        b"line one\nPUB x\n\x00\x00\x00\x05hello",
        "ünïcödé ✓".encode(),
        b"x",
    ],
    ids=["all-bytes", "newline", "nuls", "embedded-command", "utf8", "one-byte"],
)
def test_bodies_are_binary_safe(connect: Connect, topic: str, channel: str, body: bytes) -> None:
    producer = connect()
    producer.pub(topic, body)
    producer.mpub(topic, [body, body])
    producer.dpub(topic, 0, body)
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(10)
    assert [m.body for m in consumer.read_messages(4)] == [body] * 4


def test_message_ids_are_unique_per_topic(connect: Connect, topic: str, channel: str) -> None:
    producer = connect()
    for i in range(20):
        producer.pub(topic, b"%d" % i)
    producer.mpub(topic, [b"m"] * 20)
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(100)
    msgs = consumer.read_messages(40)
    ids = [m.id for m in msgs]
    assert len(set(ids)) == 40
    assert all(HEX_ID.match(i) for i in ids)


# -- topics and channels ------------------------------------------------------------------


def test_messages_before_any_channel_go_to_the_first_channel(connect: Connect, topic: str) -> None:
    producer = connect()
    producer.mpub(topic, [b"early1", b"early2"])
    producer.pub(topic, b"early3")
    first = connect()
    first.sub(topic, unique_name("first"))
    first.rdy(10)
    assert sorted(m.body for m in first.read_messages(3)) == [b"early1", b"early2", b"early3"]
    # a channel created afterwards does not get them
    second = connect()
    second.sub(topic, unique_name("second"))
    second.rdy(10)
    second.expect_nothing(0.5)


def test_fan_out_each_channel_gets_every_message(connect: Connect, topic: str) -> None:
    consumers = []
    for _ in range(3):
        c = connect()
        c.sub(topic, unique_name("fan"))
        c.rdy(50)
        consumers.append(c)
    producer = connect()
    bodies = [b"fan-%d" % i for i in range(10)]
    for body in bodies[:5]:
        producer.pub(topic, body)
    producer.mpub(topic, bodies[5:])
    per_channel = [c.read_messages(10) for c in consumers]
    for msgs in per_channel:
        assert sorted(m.body for m in msgs) == sorted(bodies)
    # every channel's copy carries the same ID and timestamp
    copies = [{m.body: (m.id, m.timestamp) for m in msgs} for msgs in per_channel]
    assert copies[0] == copies[1] == copies[2]
    for c in consumers:
        c.expect_nothing(0.2)


def test_consumers_of_one_channel_share_its_messages(
    connect: Connect, topic: str, channel: str
) -> None:
    a, b = connect(), connect()
    for c in (a, b):
        c.sub(topic, channel)
        c.rdy(100)
    producer = connect()
    bodies = [b"share-%d" % i for i in range(40)]
    for body in bodies[:20]:
        producer.pub(topic, body)
    producer.mpub(topic, bodies[20:])
    got_a, got_b = collect([a, b], len(bodies), timeout=10)
    # every message delivered to exactly one of them
    assert sorted(m.body for m in got_a + got_b) == sorted(bodies)
    # both with RDY get some
    assert got_a and got_b, (len(got_a), len(got_b))
    a.expect_nothing(0.3)
    b.expect_nothing(0.1)


def test_subscribed_connection_can_publish(connect: Connect, topic: str, channel: str) -> None:
    conn = connect()
    conn.sub(topic, channel)
    conn.rdy(1)
    # the OK response and the message frame may arrive in either order
    conn.pub(topic, b"to myself")
    msg = conn.read_message()
    assert msg.body == b"to myself"
    conn.fin(msg.id)
    conn.pub(unique_name("conf_other"), b"elsewhere")


def test_ephemeral_channel_delivers(connect: Connect, topic: str) -> None:
    consumer = connect()
    consumer.sub(topic, unique_name("eph") + "#ephemeral")
    consumer.rdy(5)
    connect().mpub(topic, [b"e1", b"e2"])
    assert sorted(m.body for m in consumer.read_messages(2)) == [b"e1", b"e2"]


def test_ephemeral_channel_goes_away_with_its_last_consumer(connect: Connect, topic: str) -> None:
    durable = unique_name("durable")
    ephemeral = unique_name("eph") + "#ephemeral"
    for name in (durable, ephemeral):
        c = connect()
        c.sub(topic, name)
        c.close()
    time.sleep(0.5)
    connect().pub(topic, b"while nobody listens")
    # the durable channel kept the message for its next consumer...
    d = connect()
    d.sub(topic, durable)
    d.rdy(1)
    assert d.read_message().body == b"while nobody listens"
    # ...the ephemeral one was deleted when its last consumer left, so a new one has none
    e = connect()
    e.sub(topic, ephemeral)
    e.rdy(1)
    e.expect_nothing(0.5)


def test_ephemeral_topic_delivers(connect: Connect) -> None:
    topic = unique_name("conf_et") + "#ephemeral"
    consumer = connect()
    consumer.sub(topic, unique_name("c"))
    consumer.rdy(5)
    connect().pub(topic, b"ephemeral topic")
    assert consumer.read_message().body == b"ephemeral topic"
