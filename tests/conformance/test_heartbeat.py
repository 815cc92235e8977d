"""Heartbeats (docs/protocol.md §1.7): `_heartbeat_` every interval in any state; a client that
answers nothing for two intervals is disconnected without an error frame."""

from __future__ import annotations

import itertools
import time

from trionsq.protocol import FRAME_TYPE_RESPONSE, HEARTBEAT

from .conftest import Connect
from .nsq_conn import ConnectionClosed, NSQConn, describe


def _heartbeat_times(conn: NSQConn, seconds: float, answer: bool) -> list[float]:
    """Times (since start) of heartbeats received during `seconds`; fails on other frames."""
    start = time.monotonic()
    times = []
    while (remaining := seconds - (time.monotonic() - start)) > 0:
        try:
            frame = conn.read_raw_frame(remaining)
        except TimeoutError:
            break
        assert frame == (FRAME_TYPE_RESPONSE, HEARTBEAT), describe(frame)
        times.append(time.monotonic() - start)
        if answer:
            conn.nop()
    return times


def test_producer_gets_heartbeats_and_stays_when_answering(connect: Connect, topic: str) -> None:
    conn = connect(answer_heartbeats=False)
    conn.negotiate(heartbeat_interval=1000)
    times = _heartbeat_times(conn, 3.4, answer=True)
    # about one per second: 3 (allow scheduling slack), and evenly spaced
    assert 2 <= len(times) <= 4, times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(0.6 <= gap <= 1.5 for gap in gaps), times
    # still connected after more than two intervals
    conn.pub(topic, b"still here")


def test_subscribed_consumer_gets_heartbeats(connect: Connect, topic: str, channel: str) -> None:
    conn = connect(answer_heartbeats=False)
    conn.negotiate(heartbeat_interval=1000)
    conn.sub(topic, channel)
    conn.rdy(1)
    times = _heartbeat_times(conn, 2.6, answer=True)
    assert len(times) >= 2, times
    producer = connect()
    producer.pub(topic, b"after heartbeats")
    assert conn.read_message().body == b"after heartbeats"


def test_silent_client_is_disconnected_without_error(connect: Connect) -> None:
    conn = connect(answer_heartbeats=False)
    conn.negotiate(heartbeat_interval=1000)
    start = time.monotonic()
    heartbeats = 0
    while True:
        try:
            frame = conn.read_raw_frame(6.0 - (time.monotonic() - start))
        except ConnectionClosed:
            break
        except TimeoutError:
            raise AssertionError("a client answering no heartbeat was not disconnected") from None
        # nothing but heartbeats, in particular no error frame, before the close
        assert frame == (FRAME_TYPE_RESPONSE, HEARTBEAT), describe(frame)
        heartbeats += 1
    elapsed = time.monotonic() - start
    # read deadline = 2 x heartbeat interval after the last command (IDENTIFY)
    assert 1.5 <= elapsed <= 4.0, elapsed
    assert heartbeats >= 1


def test_any_command_resets_the_read_deadline(connect: Connect, topic: str) -> None:
    conn = connect(answer_heartbeats=False)
    conn.negotiate(heartbeat_interval=1000)
    # PUBs (not NOPs) every 0.5 s keep the connection open past two intervals
    start = time.monotonic()
    while time.monotonic() - start < 3.0:
        conn.pub(topic, b"keepalive")
        time.sleep(0.5)
    conn.pub(topic, b"still here")
