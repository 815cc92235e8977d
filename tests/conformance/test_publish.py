"""PUB, MPUB and DPUB: success, limits and every error path (docs/protocol.md §1.3). A DPUB is
delivered no earlier than its defer and at most `SCAN_LATENESS` later (nsqd's queue scan)."""

from __future__ import annotations

import struct
import time

import pytest

from .conftest import SCAN_LATENESS, Connect

MAX_MSG_SIZE = 1_048_576
MAX_BODY_SIZE = 5_242_880
MAX_REQ_TIMEOUT_MS = 3_600_000


def _size(n: int) -> bytes:
    return struct.pack(">i", n)


# -- PUB ----------------------------------------------------------------------------------


def test_pub_ok(connect: Connect, topic: str) -> None:
    connect().pub(topic, b"hello")


def test_pub_max_size_is_accepted_and_delivered_intact(
    connect: Connect, topic: str, channel: str
) -> None:
    body = bytes(range(256)) * (MAX_MSG_SIZE // 256)
    assert len(body) == MAX_MSG_SIZE
    connect().pub(topic, body)
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(1)
    msg = consumer.read_message(timeout=10)
    assert msg.body == body


def test_pub_too_big_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    # nsqd checks the size before reading the body, so only the size is sent
    conn.send(b"PUB " + topic.encode() + b"\n" + _size(MAX_MSG_SIZE + 1))
    conn.expect_fatal("E_BAD_MESSAGE", "PUB message too big 1048577 > 1048576")


@pytest.mark.parametrize("size", [0, -1])
def test_pub_invalid_body_size_is_fatal(connect: Connect, topic: str, size: int) -> None:
    conn = connect()
    conn.send(b"PUB " + topic.encode() + b"\n" + _size(size))
    conn.expect_fatal("E_BAD_MESSAGE", f"PUB invalid message body size {size}")


def test_pub_insufficient_params_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.command(b"PUB", body=b"x")
    conn.expect_fatal("E_INVALID", "PUB insufficient number of parameters")


@pytest.mark.parametrize("name", ["bad!topic", "a" * 65, "with.colon:x", "t#ephemeral#ephemeral"])
def test_pub_bad_topic_is_fatal(connect: Connect, name: str) -> None:
    conn = connect()
    conn.command(b"PUB", name.encode(), body=b"x")
    conn.expect_fatal("E_BAD_TOPIC", f'PUB topic name "{name}" is not valid')


@pytest.mark.parametrize("suffix", ["", "#ephemeral"])
def test_pub_longest_valid_topic_name(connect: Connect, suffix: str) -> None:
    name = "conf.-_" + "x" * (64 - 7 - len(suffix)) + suffix
    assert len(name) == 64
    connect().pub(name, b"x")


# -- MPUB ---------------------------------------------------------------------------------


def test_mpub_many_messages_delivered_in_full(connect: Connect, topic: str, channel: str) -> None:
    bodies = [b"mpub-%04d" % i for i in range(300)]
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(len(bodies))
    connect().mpub(topic, bodies)
    msgs = consumer.read_messages(len(bodies), timeout=10)
    assert sorted(m.body for m in msgs) == bodies
    # each message of an MPUB gets its own ID
    assert len({m.id for m in msgs}) == len(bodies)
    assert all(m.attempts == 1 for m in msgs)
    consumer.expect_nothing(0.3)


def test_mpub_single_message(connect: Connect, topic: str, channel: str) -> None:
    connect().mpub(topic, [b"only one"])
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(5)
    assert consumer.read_message().body == b"only one"


def test_mpub_insufficient_params_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.command(b"MPUB", body=_size(1) + _size(1) + b"x")
    conn.expect_fatal("E_INVALID", "MPUB insufficient number of parameters")


def test_mpub_bad_topic_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.command(b"MPUB", b"bad!topic", body=_size(1) + _size(1) + b"x")
    text = conn.expect_error("E_BAD_TOPIC")
    # Go repeats the code in the text ("E_BAD_TOPIC MPUB topic name ..."): a quirk
    assert text.endswith('MPUB topic name "bad!topic" is not valid'), text
    conn.expect_closed()


@pytest.mark.parametrize("size", [0, -5])
def test_mpub_invalid_body_size_is_fatal(connect: Connect, topic: str, size: int) -> None:
    conn = connect()
    conn.send(b"MPUB " + topic.encode() + b"\n" + _size(size))
    conn.expect_fatal("E_BAD_BODY", f"MPUB invalid body size {size}")


def test_mpub_body_too_big_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.send(b"MPUB " + topic.encode() + b"\n" + _size(MAX_BODY_SIZE + 1))
    conn.expect_fatal("E_BAD_BODY", f"MPUB body too big {MAX_BODY_SIZE + 1} > {MAX_BODY_SIZE}")


@pytest.mark.parametrize("count", [0, -1, (MAX_BODY_SIZE - 4) // 5 + 1])
def test_mpub_invalid_message_count_is_fatal(connect: Connect, topic: str, count: int) -> None:
    conn = connect()
    conn.command(b"MPUB", topic.encode(), body=_size(count))
    conn.expect_fatal("E_BAD_BODY", f"MPUB invalid message count {count}")


def test_mpub_invalid_message_size_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    body = _size(3) + _size(3) + b"abc" + _size(0) + _size(1) + b"x"
    conn.command(b"MPUB", topic.encode(), body=body)
    conn.expect_fatal("E_BAD_MESSAGE", "MPUB invalid message(1) body size 0")


def test_mpub_message_too_big_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    # the declared body holds just the count and the first message size
    conn.command(b"MPUB", topic.encode(), body=_size(1) + _size(MAX_MSG_SIZE + 1))
    conn.expect_fatal("E_BAD_MESSAGE", f"MPUB message too big {MAX_MSG_SIZE + 1} > {MAX_MSG_SIZE}")


def test_mpub_is_all_or_nothing(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(10)
    producer = connect()
    body = _size(3) + _size(1) + b"a" + _size(1) + b"b" + _size(0)
    producer.command(b"MPUB", topic.encode(), body=body)
    producer.expect_fatal("E_BAD_MESSAGE", "MPUB invalid message(2) body size 0")
    # the valid messages before the bad one were not queued
    consumer.expect_nothing(0.5)


# -- DPUB ---------------------------------------------------------------------------------


def check_dpub_deferral(connect: Connect, topic: str, channel: str, lateness: float) -> None:
    """DPUB with a 1000 ms defer: delivered no earlier than 1 s and no later than 1 s +
    `lateness`, as a first attempt. `tests/integration/test_nsqd_scan_timing.py` runs it
    against trionsq with its tighter bound."""
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(1)
    producer = connect()
    start = time.monotonic()
    producer.dpub(topic, 1000, b"deferred")
    consumer.expect_nothing(0.8)
    msg = consumer.read_message(timeout=1.0 + lateness)
    elapsed = time.monotonic() - start
    assert msg.body == b"deferred"
    assert msg.attempts == 1
    assert 0.95 <= elapsed <= 1.0 + lateness, elapsed


def test_dpub_is_delivered_after_the_defer(connect: Connect, topic: str, channel: str) -> None:
    check_dpub_deferral(connect, topic, channel, SCAN_LATENESS)


def test_dpub_zero_is_immediate(connect: Connect, topic: str, channel: str) -> None:
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(1)
    connect().dpub(topic, 0, b"now")
    assert consumer.read_message(timeout=1.0).body == b"now"


def test_dpub_max_defer_is_accepted(connect: Connect, topic: str) -> None:
    connect().dpub(topic, MAX_REQ_TIMEOUT_MS, b"in an hour")


def test_dpub_out_of_range_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.send(b"DPUB " + topic.encode() + b" 3600001\n" + _size(1) + b"x")
    conn.expect_fatal("E_INVALID", "DPUB timeout 3600001 out of range 0-3600000")


@pytest.mark.parametrize("value", [b"abc", b"-1", b"1.5", b"+5"])
def test_dpub_unparsable_timeout_is_fatal(connect: Connect, topic: str, value: bytes) -> None:
    conn = connect()
    conn.command(b"DPUB", topic.encode(), value, body=b"x")
    conn.expect_fatal("E_INVALID", f"DPUB could not parse timeout {value.decode()}")


def test_dpub_insufficient_params_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.command(b"DPUB", topic.encode(), body=b"x")
    conn.expect_fatal("E_INVALID", "DPUB insufficient number of parameters")


def test_dpub_bad_topic_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.command(b"DPUB", b"bad!topic", b"100", body=b"x")
    conn.expect_error("E_BAD_TOPIC")
    conn.expect_closed()


def test_dpub_too_big_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.send(b"DPUB " + topic.encode() + b" 100\n" + _size(MAX_MSG_SIZE + 1))
    conn.expect_fatal("E_BAD_MESSAGE", "DPUB message too big 1048577 > 1048576")


@pytest.mark.parametrize("size", [0, -1])
def test_dpub_invalid_body_size_is_fatal(connect: Connect, topic: str, size: int) -> None:
    conn = connect()
    conn.send(b"DPUB " + topic.encode() + b" 100\n" + _size(size))
    conn.expect_fatal("E_BAD_MESSAGE", f"DPUB invalid message body size {size}")
