"""HTTP /pub and /mpub: delivery over TCP, defer, text and binary /mpub, limits and every
error path, in Go's order of checks (docs/protocol.md §4; Go's doPUB / doMPUB in nsqd/http.go)."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import httpx
import pytest

from .conftest import SCAN_LATENESS, Connect
from .nsq_conn import NSQConn
from .nsq_http import (
    eventually,
    expect_error,
    expect_raw_error,
    expect_text,
    mpub_binary,
    raw_request,
    topic_stats,
)

MAX_MSG_SIZE = 1_048_576
MAX_BODY_SIZE = 5_242_880
MAX_REQ_TIMEOUT_MS = 3_600_000


def _consumer(connect: Connect, topic: str, channel: str, rdy: int = 100) -> NSQConn:
    conn = connect()
    conn.sub(topic, channel)
    conn.rdy(rdy)
    return conn


def _pub(api: httpx.Client, topic: str, body: bytes, **params: str) -> httpx.Response:
    return api.post("/pub", params={"topic": topic, **params}, content=body)


def _chunked(data: bytes, size: int = 256 * 1024) -> Iterator[bytes]:
    """A body httpx sends chunked (no Content-Length): nsqd must count what it reads."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


# -- /pub ---------------------------------------------------------------------------------


def test_pub_is_delivered_over_tcp(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = _consumer(connect, topic, channel)
    body = b"http \x00 body\nwith newline\r\n\xff"
    before = time.time_ns()
    expect_text(_pub(api, topic, body), "OK")
    msg = consumer.read_message()
    assert msg.body == body
    assert msg.attempts == 1
    assert before - 1_000_000_000 <= msg.timestamp <= time.time_ns() + 1_000_000_000
    consumer.expect_nothing(0.2)


def test_pub_before_any_channel_waits_for_the_first(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    for body in (b"one", b"two"):
        expect_text(_pub(api, topic, body), "OK")
    consumer = _consumer(connect, topic, channel)
    assert sorted(m.body for m in consumer.read_messages(2)) == [b"one", b"two"]


def test_pub_max_size_is_delivered_intact(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = _consumer(connect, topic, channel)
    body = bytes(range(256)) * (MAX_MSG_SIZE // 256)
    expect_text(_pub(api, topic, body), "OK")
    assert consumer.read_message(timeout=10).body == body


def test_pub_too_big_by_content_length(nsqd_http: tuple[str, int], topic: str) -> None:
    """Content-Length is checked before the body is read (and before the topic): the
    answer comes without the body ever being sent."""
    for target in (f"/pub?topic={topic}", "/pub", "/pub?topic=bad!topic"):
        head = (
            f"POST {target} HTTP/1.1\r\nHost: nsqd\r\nContent-Length: {MAX_MSG_SIZE + 1}\r\n\r\n"
        ).encode()
        expect_raw_error(raw_request(nsqd_http, head), 413, "MSG_TOO_BIG")


def test_pub_too_big_chunked(api: httpx.Client, topic: str) -> None:
    body = _chunked(b"x" * (MAX_MSG_SIZE + 1))
    expect_error(_pub(api, topic, body), 413, "MSG_TOO_BIG")  # type: ignore[arg-type]
    assert topic_stats(api, topic) is None


def test_pub_empty_body(api: httpx.Client, topic: str) -> None:
    expect_error(_pub(api, topic, b""), 400, "MSG_EMPTY")
    assert topic_stats(api, topic) is None


@pytest.mark.parametrize("target", ["/pub", "/pub?topic=bad!topic", "/pub?defer=abc"])
def test_pub_empty_body_is_checked_before_params(api: httpx.Client, target: str) -> None:
    expect_error(api.post(target, content=b""), 400, "MSG_EMPTY")


def test_pub_missing_topic(api: httpx.Client) -> None:
    expect_error(api.post("/pub", content=b"x"), 400, "MISSING_ARG_TOPIC")
    expect_error(api.post("/pub?Topic=x", content=b"x"), 400, "MISSING_ARG_TOPIC")


@pytest.mark.parametrize(
    "name", ["", "bad!topic", "a" * 65, "with.colon:x", "sp ace", "t#ephemeral#ephemeral"]
)
def test_pub_invalid_topic(api: httpx.Client, name: str) -> None:
    expect_error(_pub(api, name, b"x"), 400, "INVALID_TOPIC")


@pytest.mark.parametrize("suffix", ["", "#ephemeral"])
def test_pub_longest_valid_topic_name(api: httpx.Client, suffix: str) -> None:
    name = "conf.-_" + "h" * (64 - 7 - len(suffix)) + suffix
    assert len(name) == 64
    try:
        expect_text(_pub(api, name, b"x"), "OK")
    finally:
        api.post("/topic/delete", params={"topic": name})


def test_pub_defer(api: httpx.Client, connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    start = time.monotonic()
    expect_text(_pub(api, topic, b"later", defer="1000"), "OK")

    def deferred() -> None:
        stats = topic_stats(api, topic)
        assert stats is not None
        assert stats["channels"][0]["deferred_count"] == 1, stats
        assert stats["channels"][0]["depth"] == 0, stats

    eventually(deferred, timeout=0.5)
    consumer.expect_nothing(max(0.0, 0.8 - (time.monotonic() - start)))
    msg = consumer.read_message(timeout=1.0 + SCAN_LATENESS)
    elapsed = time.monotonic() - start
    assert (msg.body, msg.attempts) == (b"later", 1)
    assert 0.95 <= elapsed <= 1.0 + SCAN_LATENESS, elapsed


@pytest.mark.parametrize("value", ["0", "+0", "00"])
def test_pub_defer_zero_is_immediate(
    api: httpx.Client, connect: Connect, topic: str, channel: str, value: str
) -> None:
    consumer = _consumer(connect, topic, channel)
    expect_text(_pub(api, topic, b"now", defer=value), "OK")
    assert consumer.read_message(timeout=1.0).body == b"now"


def test_pub_defer_max_is_accepted(api: httpx.Client, topic: str) -> None:
    expect_text(_pub(api, topic, b"in an hour", defer=str(MAX_REQ_TIMEOUT_MS)), "OK")


@pytest.mark.parametrize(
    "value", ["", "abc", "-1", "1.5", "1e3", " 5", "0x10", str(MAX_REQ_TIMEOUT_MS + 1), "9" * 20]
)
def test_pub_invalid_defer(api: httpx.Client, topic: str, value: str) -> None:
    expect_error(_pub(api, topic, b"x", defer=value), 400, "INVALID_DEFER")
    # Go looks the topic up (creating it) before it parses `defer`; nothing is published.
    stats = topic_stats(api, topic)
    assert stats is not None
    assert stats["message_count"] == 0


def test_pub_counts_messages_and_bytes(api: httpx.Client, topic: str) -> None:
    for body in (b"abc", b"hello", b"\x00"):
        expect_text(_pub(api, topic, body), "OK")
    stats = topic_stats(api, topic)
    assert stats is not None
    assert (stats["message_count"], stats["message_bytes"], stats["depth"]) == (3, 9, 3)


# -- /mpub, text mode ---------------------------------------------------------------------


def _mpub(api: httpx.Client, topic: str, body: object, **params: str) -> httpx.Response:
    return api.post("/mpub", params={"topic": topic, **params}, content=body)  # type: ignore[arg-type]


@pytest.mark.parametrize("params", [{}, {"binary": "false"}, {"binary": "0"}])
def test_mpub_text_lines(
    api: httpx.Client, connect: Connect, topic: str, channel: str, params: dict[str, str]
) -> None:
    """One message per line; the ``\\n`` goes, a ``\\r`` stays, empty lines are skipped."""
    consumer = _consumer(connect, topic, channel)
    body = b"one\ntwo\r\n\n\nthree\x00\n"
    expect_text(_mpub(api, topic, body, **params), "OK")
    msgs = consumer.read_messages(3)
    assert sorted(m.body for m in msgs) == [b"one", b"three\x00", b"two\r"]
    assert len({m.id for m in msgs}) == 3
    consumer.expect_nothing(0.2)


def test_mpub_text_without_trailing_newline(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = _consumer(connect, topic, channel)
    expect_text(_mpub(api, topic, b"a\nb"), "OK")
    assert sorted(m.body for m in consumer.read_messages(2)) == [b"a", b"b"]


@pytest.mark.parametrize("body", [b"", b"\n", b"\n\n\n"])
def test_mpub_text_nothing_to_publish_is_ok(api: httpx.Client, topic: str, body: bytes) -> None:
    expect_text(_mpub(api, topic, body), "OK")
    stats = topic_stats(api, topic)
    assert stats is not None, "the topic is created before the body is read"
    assert stats["message_count"] == 0


def test_mpub_text_max_size_line(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = _consumer(connect, topic, channel)
    line = b"m" * MAX_MSG_SIZE
    expect_text(_mpub(api, topic, line + b"\nshort\n"), "OK")
    bodies = sorted(m.body for m in consumer.read_messages(2, timeout=10))
    assert bodies == [line, b"short"]


def test_mpub_text_line_too_big_publishes_nothing(api: httpx.Client, topic: str) -> None:
    body = b"fine\n" + b"m" * (MAX_MSG_SIZE + 1) + b"\nfine too\n"
    expect_error(_mpub(api, topic, body), 413, "MSG_TOO_BIG")
    stats = topic_stats(api, topic)
    assert stats is not None
    assert stats["message_count"] == 0


def test_mpub_body_too_big_by_content_length(nsqd_http: tuple[str, int], topic: str) -> None:
    """Checked before anything else, the topic included."""
    for target in (f"/mpub?topic={topic}", "/mpub", f"/mpub?topic={topic}&binary=true"):
        head = (
            f"POST {target} HTTP/1.1\r\nHost: nsqd\r\nContent-Length: {MAX_BODY_SIZE + 1}\r\n\r\n"
        ).encode()
        expect_raw_error(raw_request(nsqd_http, head), 413, "BODY_TOO_BIG")


def test_mpub_text_body_too_big_chunked(api: httpx.Client, topic: str) -> None:
    line = b"l" * (MAX_MSG_SIZE - 1) + b"\n"
    body = line * (MAX_BODY_SIZE // len(line)) + b"x"
    assert len(body) == MAX_BODY_SIZE + 1
    expect_error(_mpub(api, topic, _chunked(body)), 413, "BODY_TOO_BIG")
    stats = topic_stats(api, topic)
    assert stats is not None
    assert stats["message_count"] == 0


def test_mpub_missing_topic(api: httpx.Client) -> None:
    expect_error(api.post("/mpub", content=b"x"), 400, "MISSING_ARG_TOPIC")


@pytest.mark.parametrize("name", ["", "bad!topic", "a" * 65])
def test_mpub_invalid_topic(api: httpx.Client, name: str) -> None:
    expect_error(_mpub(api, name, b"x"), 400, "INVALID_TOPIC")


# -- /mpub, binary mode -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "1", "yes", "", "TRUE"])
def test_mpub_binary(
    api: httpx.Client, connect: Connect, topic: str, channel: str, value: str
) -> None:
    """``binary`` true/1 (and, deprecated, any value other than false/0) is binary mode."""
    consumer = _consumer(connect, topic, channel)
    bodies = [b"first\nline", b"\x00\x01", b"x" * 1000]
    expect_text(_mpub(api, topic, mpub_binary(bodies), binary=value), "OK")
    msgs = consumer.read_messages(3)
    assert sorted(m.body for m in msgs) == sorted(bodies)
    assert all(m.attempts == 1 for m in msgs)
    consumer.expect_nothing(0.2)


def test_mpub_binary_ignores_bytes_after_the_messages(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = _consumer(connect, topic, channel)
    body = mpub_binary([b"a", b"b"]) + b"trailing garbage"
    expect_text(_mpub(api, topic, body, binary="true"), "OK")
    assert sorted(m.body for m in consumer.read_messages(2)) == [b"a", b"b"]
    consumer.expect_nothing(0.2)


def _size(n: int) -> bytes:
    return struct.pack(">i", n)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "BAD_BODY"),  # no message count
        (b"\x00\x00", "BAD_BODY"),  # short message count
        (_size(0), "BAD_BODY"),
        (_size(-1), "BAD_BODY"),
        (_size((MAX_BODY_SIZE - 4) // 5 + 1), "BAD_BODY"),
        (_size(1), "BAD_MESSAGE"),  # no message size
        (_size(2) + _size(1) + b"a", "BAD_MESSAGE"),  # second message missing
        (_size(1) + _size(0), "BAD_MESSAGE"),
        (_size(1) + _size(-3) + b"abc", "BAD_MESSAGE"),
        (_size(1) + _size(MAX_MSG_SIZE + 1), "BAD_MESSAGE"),
        (_size(1) + _size(10) + b"short", "BAD_MESSAGE"),
        (_size(2) + _size(1) + b"a" + _size(0), "BAD_MESSAGE"),
    ],
)
def test_mpub_binary_malformed(
    api: httpx.Client, connect: Connect, topic: str, channel: str, body: bytes, message: str
) -> None:
    """The TCP MPUB parser's errors, all 413, code without its ``E_``; all or nothing."""
    consumer = _consumer(connect, topic, channel)
    expect_error(_mpub(api, topic, body, binary="true"), 413, message)
    consumer.expect_nothing(0.1)
    stats = topic_stats(api, topic)
    assert stats is not None
    assert stats["message_count"] == 0


def test_mpub_counts_messages_and_bytes(api: httpx.Client, topic: str) -> None:
    expect_text(_mpub(api, topic, b"abc\nhello\n"), "OK")
    expect_text(_mpub(api, topic, mpub_binary([b"12", b"3"]), binary="1"), "OK")

    def counted() -> None:
        stats = topic_stats(api, topic)
        assert stats is not None
        assert (stats["message_count"], stats["message_bytes"]) == (4, 11), stats

    eventually(counted)
