"""In-flight messages: FIN, REQ, TOUCH, timeouts and redelivery, CLS, disconnects
(docs/protocol.md §1.3 FIN/REQ/TOUCH/CLS, §1.8, §2.3, §2.4). A deadline is honoured no earlier than
its time and at most `SCAN_LATENESS` later (nsqd's queue scan). The `check_*` scenarios take
that lateness as an argument: `tests/integration/test_nsqd_scan_timing.py` runs them against
trionsq with its tighter bound."""

from __future__ import annotations

import time

import pytest

from .conftest import SCAN_LATENESS, Connect
from .nsq_conn import NSQConn

UNKNOWN_ID = b"0123456789abcdef"


def _consumer(connect: Connect, topic: str, channel: str, rdy: int = 1, **identify: int) -> NSQConn:
    conn = connect(**identify) if identify else connect()
    conn.sub(topic, channel)
    conn.rdy(rdy)
    return conn


# -- FIN ----------------------------------------------------------------------------------


def test_fin_acknowledges(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel, msg_timeout=1000)
    connect().pub(topic, b"done")
    msg = consumer.read_message()
    consumer.fin(msg.id)
    # no response, and never redelivered (it would be after the 1 s timeout)
    consumer.expect_nothing(1.6)
    # FIN again: no longer in flight, non-fatal
    consumer.fin(msg.id)
    consumer.expect_error("E_FIN_FAILED", f"FIN {msg.id.decode()} failed ID not in flight")


def test_fin_unknown_id_is_not_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.fin(UNKNOWN_ID)
    consumer.expect_error("E_FIN_FAILED", "FIN 0123456789abcdef failed ID not in flight")
    # the connection is still usable: it goes on receiving
    connect().pub(topic, b"after")
    assert consumer.read_message().body == b"after"


def test_fin_by_another_consumer_is_not_fatal(connect: Connect, topic: str, channel: str) -> None:
    owner = _consumer(connect, topic, channel)
    other = _consumer(connect, topic, channel, rdy=0)
    connect().pub(topic, b"mine")
    msg = owner.read_message()
    other.fin(msg.id)
    other.expect_error("E_FIN_FAILED", f"FIN {msg.id.decode()} failed client does not own message")
    owner.fin(msg.id)
    owner.nop()
    owner.expect_nothing(0.2)
    other.nop()
    other.expect_nothing(0.1)


@pytest.mark.parametrize("bad_id", [b"abc", b"0123456789abcdef0", b"0123456789abcde"])
def test_fin_malformed_id_is_fatal(
    connect: Connect, topic: str, channel: str, bad_id: bytes
) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.send(b"FIN " + bad_id + b"\n")
    consumer.expect_fatal("E_INVALID", "invalid message ID")


def test_fin_insufficient_params_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.send(b"FIN\n")
    consumer.expect_fatal("E_INVALID", "FIN insufficient number of params")


@pytest.mark.parametrize(
    ("command", "name"),
    [(b"FIN %s\n", "FIN"), (b"REQ %s 0\n", "REQ"), (b"TOUCH %s\n", "TOUCH")],
)
def test_before_sub_is_fatal(connect: Connect, command: bytes, name: str) -> None:
    conn = connect()
    conn.send(command % UNKNOWN_ID)
    conn.expect_fatal("E_INVALID", f"cannot {name} in current state")


# -- timeouts -----------------------------------------------------------------------------


def check_timeout_redelivery(connect: Connect, topic: str, channel: str, lateness: float) -> None:
    """A message its consumer neither FINs nor TOUCHes within its 1 s msg_timeout comes back
    to it, the same message with attempts + 1, no later than 1 s + `lateness`."""
    consumer = _consumer(connect, topic, channel, msg_timeout=1000)
    connect().pub(topic, b"slow")
    first = consumer.read_message()
    start = time.monotonic()
    again = consumer.read_message(timeout=1.0 + lateness)
    elapsed = time.monotonic() - start
    assert 0.9 <= elapsed <= 1.0 + lateness, elapsed
    assert (again.id, again.body, again.timestamp) == (first.id, first.body, first.timestamp)
    assert (first.attempts, again.attempts) == (1, 2)
    consumer.fin(again.id)
    consumer.nop()
    consumer.expect_nothing(0.2)


def test_timeout_redelivers_with_attempts_plus_one(
    connect: Connect, topic: str, channel: str
) -> None:
    check_timeout_redelivery(connect, topic, channel, SCAN_LATENESS)


def check_timeout_goes_to_another_consumer(
    connect: Connect, topic: str, channel: str, lateness: float
) -> None:
    """A message timed out (1 s msg_timeout) on a consumer with RDY 0 goes to another
    consumer of the channel no later than 1 s + `lateness`; the first one's FIN then
    fails."""
    slow = _consumer(connect, topic, channel, msg_timeout=1000)
    fast = _consumer(connect, topic, channel, rdy=0)
    connect().pub(topic, b"contested")
    msg = slow.read_message()
    start = time.monotonic()
    slow.rdy(0)
    fast.rdy(1)
    again = fast.read_message(timeout=1.0 + lateness)
    elapsed = time.monotonic() - start
    assert 0.9 <= elapsed <= 1.0 + lateness, elapsed
    assert (again.id, again.attempts) == (msg.id, 2)
    # the slow consumer's FIN comes too late: the message now belongs to `fast`
    slow.fin(msg.id)
    slow.expect_error("E_FIN_FAILED", f"FIN {msg.id.decode()} failed client does not own message")
    fast.fin(again.id)
    fast.pub(topic + "_sync", b"sync")
    # ...and once finished (the PUB's OK shows the FIN was processed) it is not in flight
    slow.fin(msg.id)
    slow.expect_error("E_FIN_FAILED", f"FIN {msg.id.decode()} failed ID not in flight")


def test_timed_out_message_goes_to_another_consumer(
    connect: Connect, topic: str, channel: str
) -> None:
    check_timeout_goes_to_another_consumer(connect, topic, channel, SCAN_LATENESS)


def test_disconnect_does_not_requeue_before_timeout(
    connect: Connect, topic: str, channel: str
) -> None:
    gone = _consumer(connect, topic, channel, msg_timeout=2000)
    connect().pub(topic, b"orphan")
    msg = gone.read_message()
    gone.close()
    start = time.monotonic()
    heir = _consumer(connect, topic, channel)
    # nsqd does not requeue at disconnect: the message waits out the 2 s msg_timeout
    heir.expect_nothing(1.4)
    again = heir.read_message(timeout=2.0 + SCAN_LATENESS)
    elapsed = time.monotonic() - start
    assert (again.id, again.body, again.attempts) == (msg.id, b"orphan", 2)
    assert 1.4 <= elapsed <= 2.0 + SCAN_LATENESS, elapsed


# -- REQ ----------------------------------------------------------------------------------


def test_req_zero_redelivers_at_once(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    connect().pub(topic, b"again")
    first = consumer.read_message()
    start = time.monotonic()
    consumer.req(first.id, 0)
    again = consumer.read_message(timeout=1.0)
    assert time.monotonic() - start < 1.0
    assert (again.id, again.body, again.timestamp) == (first.id, b"again", first.timestamp)
    assert again.attempts == 2
    consumer.req(again.id, 0)
    assert consumer.read_message(timeout=1.0).attempts == 3


def check_req_with_delay(connect: Connect, topic: str, channel: str, lateness: float) -> None:
    """REQ with a 1000 ms delay: the message comes back no earlier than 1 s and no later than
    1 s + `lateness`, with attempts + 1."""
    consumer = _consumer(connect, topic, channel)
    connect().pub(topic, b"later")
    first = consumer.read_message()
    start = time.monotonic()
    consumer.req(first.id, 1000)
    # REQ frees the slot at once, but the deferred message is not due before 1 s
    consumer.expect_nothing(0.8)
    again = consumer.read_message(timeout=1.0 + lateness)
    elapsed = time.monotonic() - start
    assert 0.95 <= elapsed <= 1.0 + lateness, elapsed
    assert (again.id, again.attempts) == (first.id, 2)


def test_req_with_delay(connect: Connect, topic: str, channel: str) -> None:
    check_req_with_delay(connect, topic, channel, SCAN_LATENESS)


def test_req_frees_the_rdy_slot(connect: Connect, topic: str, channel: str) -> None:
    connect().mpub(topic, [b"a", b"b"])
    consumer = _consumer(connect, topic, channel)
    first = consumer.read_message()
    consumer.expect_nothing(0.3)
    consumer.req(first.id, 60000)
    second = consumer.read_message()
    assert {first.body, second.body} == {b"a", b"b"}


def test_req_timeout_above_max_is_clamped(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    connect().pub(topic, b"much later")
    msg = consumer.read_message()
    consumer.req(msg.id, 3_600_001)
    # clamped to max-req-timeout (1 h) with no error: nothing comes back soon
    consumer.expect_nothing(0.5)
    consumer.req(msg.id, 0)
    consumer.expect_error("E_REQ_FAILED", f"REQ {msg.id.decode()} failed ID not in flight")


def test_req_unknown_id_is_not_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.req(UNKNOWN_ID, 0)
    consumer.expect_error("E_REQ_FAILED", "REQ 0123456789abcdef failed ID not in flight")
    connect().pub(topic, b"after")
    assert consumer.read_message().body == b"after"


def test_req_insufficient_params_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.send(b"REQ " + UNKNOWN_ID + b"\n")
    consumer.expect_fatal("E_INVALID", "REQ insufficient number of params")


def test_req_malformed_id_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.send(b"REQ abc 0\n")
    consumer.expect_fatal("E_INVALID", "invalid message ID")


@pytest.mark.parametrize("value", [b"abc", b"-1", b"1.5"])
def test_req_unparsable_timeout_is_fatal(
    connect: Connect, topic: str, channel: str, value: bytes
) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.send(b"REQ " + UNKNOWN_ID + b" " + value + b"\n")
    consumer.expect_fatal("E_INVALID", f"REQ could not parse timeout {value.decode()}")


# -- TOUCH --------------------------------------------------------------------------------


def check_touch_extends_the_deadline(
    connect: Connect, topic: str, channel: str, lateness: float
) -> None:
    """TOUCH at 0.7 s of a 1 s msg_timeout moves the deadline to about 1.7 s: no redelivery
    before 1.45 s, and one no later than 1.7 s + `lateness`."""
    consumer = _consumer(connect, topic, channel, msg_timeout=1000)
    connect().pub(topic, b"touch me")
    msg = consumer.read_message()
    start = time.monotonic()
    time.sleep(0.7)
    consumer.touch(msg.id)
    # without the TOUCH it would be due at 1.0 s
    consumer.expect_nothing(1.45 - (time.monotonic() - start))
    again = consumer.read_message(timeout=1.7 + lateness)
    elapsed = time.monotonic() - start
    assert (again.id, again.attempts) == (msg.id, 2)
    assert 1.45 <= elapsed <= 1.7 + lateness, elapsed
    consumer.fin(again.id)


def test_touch_extends_the_deadline(connect: Connect, topic: str, channel: str) -> None:
    check_touch_extends_the_deadline(connect, topic, channel, SCAN_LATENESS)


def test_touch_unknown_id_is_not_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.touch(UNKNOWN_ID)
    consumer.expect_error("E_TOUCH_FAILED", "TOUCH 0123456789abcdef failed ID not in flight")
    connect().pub(topic, b"after")
    assert consumer.read_message().body == b"after"


def test_touch_by_another_consumer_is_not_fatal(connect: Connect, topic: str, channel: str) -> None:
    owner = _consumer(connect, topic, channel)
    other = _consumer(connect, topic, channel, rdy=0)
    connect().pub(topic, b"mine")
    msg = owner.read_message()
    other.touch(msg.id)
    other.expect_error(
        "E_TOUCH_FAILED", f"TOUCH {msg.id.decode()} failed client does not own message"
    )


def test_touch_insufficient_params_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.send(b"TOUCH\n")
    consumer.expect_fatal("E_INVALID", "TOUCH insufficient number of params")


def test_touch_malformed_id_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.send(b"TOUCH 12345\n")
    consumer.expect_fatal("E_INVALID", "invalid message ID")


# -- CLS ----------------------------------------------------------------------------------


def test_cls_stops_delivery_but_allows_fin(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel, rdy=10)
    producer = connect()
    producer.pub(topic, b"before")
    msg = consumer.read_message()
    consumer.cls()
    consumer.expect_response(b"CLOSE_WAIT")
    producer.mpub(topic, [b"after1", b"after2"])
    # RDY is ignored in the closing state: no error, no message
    consumer.rdy(5)
    consumer.expect_nothing(0.5)
    # in-flight messages can still be finished
    consumer.fin(msg.id)
    consumer.fin(msg.id)
    consumer.expect_error("E_FIN_FAILED", f"FIN {msg.id.decode()} failed ID not in flight")
    # the server does not close the connection; PUB still works in any state
    consumer.pub(topic, b"from closing")
    consumer.expect_nothing(0.2)
    # the messages published after CLS are still there for another consumer
    other = _consumer(connect, topic, channel, rdy=10)
    bodies = sorted(m.body for m in other.read_messages(3))
    assert bodies == [b"after1", b"after2", b"from closing"]


def test_cls_allows_req_and_touch(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel, rdy=2)
    connect().mpub(topic, [b"a", b"b"])
    first, second = consumer.read_messages(2)
    consumer.cls()
    consumer.expect_response(b"CLOSE_WAIT")
    consumer.touch(first.id)
    consumer.req(first.id, 0)
    consumer.fin(second.id)
    consumer.expect_nothing(0.4)
    other = _consumer(connect, topic, channel)
    again = other.read_message()
    assert (again.id, again.attempts) == (first.id, 2)


def test_cls_before_sub_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.cls()
    conn.expect_fatal("E_INVALID", "cannot CLS in current state")


def test_cls_twice_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    consumer.cls()
    consumer.expect_response(b"CLOSE_WAIT")
    consumer.cls()
    consumer.expect_fatal("E_INVALID", "cannot CLS in current state")
