"""IDENTIFY: negotiation reply, validation of each field, body errors, state
(docs/protocol.md §1.3 IDENTIFY). Only nsqd's default flags are assumed."""

from __future__ import annotations

import json
import struct

import pytest

from .conftest import Connect

# nsqd defaults (§3) the reply reflects.
MAX_RDY_COUNT = 2500
MAX_MSG_TIMEOUT_MS = 900_000
DEFAULT_MSG_TIMEOUT_MS = 60_000
DEFAULT_OUTPUT_BUFFER_SIZE = 16384
DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS = 250
MAX_BODY_SIZE = 5_242_880

SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"


def test_feature_negotiation_reply(connect: Connect) -> None:
    conn = connect()
    reply = conn.negotiate(client_id="conformance", hostname="localhost", user_agent="conf/1.0")
    assert reply["max_rdy_count"] == MAX_RDY_COUNT
    assert isinstance(reply["version"], str) and reply["version"]
    assert reply["max_msg_timeout"] == MAX_MSG_TIMEOUT_MS
    assert reply["msg_timeout"] == DEFAULT_MSG_TIMEOUT_MS
    assert reply["tls_v1"] is False
    assert reply["deflate"] is False
    assert reply["snappy"] is False
    assert reply["deflate_level"] == 6
    assert reply["max_deflate_level"] == 6
    assert reply["sample_rate"] == 0
    assert reply["auth_required"] is False
    assert reply["output_buffer_size"] == DEFAULT_OUTPUT_BUFFER_SIZE
    assert reply["output_buffer_timeout"] == DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS
    # the connection stays in a usable state
    conn.nop()
    conn.expect_nothing(0.1)


def test_negotiated_values_are_echoed(connect: Connect) -> None:
    conn = connect()
    reply = conn.negotiate(
        heartbeat_interval=5000,
        output_buffer_size=1024,
        output_buffer_timeout=100,
        sample_rate=50,
        msg_timeout=5000,
    )
    assert reply["msg_timeout"] == 5000
    assert reply["output_buffer_size"] == 1024
    assert reply["output_buffer_timeout"] == 100
    assert reply["sample_rate"] == 50


@pytest.mark.parametrize(
    ("fields", "size", "timeout"),
    [
        ({"output_buffer_size": -1}, 1, 0),
        ({"output_buffer_timeout": -1}, DEFAULT_OUTPUT_BUFFER_SIZE, 0),
        ({"output_buffer_size": 64, "output_buffer_timeout": 25}, 64, 25),
        ({"output_buffer_size": 65536, "output_buffer_timeout": 30000}, 65536, 30000),
        ({"output_buffer_size": 0, "output_buffer_timeout": 0}, 16384, 250),
    ],
)
def test_output_buffer_settings(
    connect: Connect, fields: dict[str, int], size: int, timeout: int
) -> None:
    reply = connect().negotiate(**fields)
    assert reply["output_buffer_size"] == size
    assert reply["output_buffer_timeout"] == timeout


@pytest.mark.parametrize("value", [1000, 60000, 0, -1])
def test_heartbeat_interval_accepted(connect: Connect, value: int) -> None:
    connect().negotiate(heartbeat_interval=value)


@pytest.mark.parametrize(("value", "expected"), [(1000, 1000), (900000, 900000), (0, 60000)])
def test_msg_timeout_accepted(connect: Connect, value: int, expected: int) -> None:
    assert connect().negotiate(msg_timeout=value)["msg_timeout"] == expected


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"heartbeat_interval": 500}, "IDENTIFY heartbeat interval (500) is invalid"),
        ({"heartbeat_interval": 999}, "IDENTIFY heartbeat interval (999) is invalid"),
        ({"heartbeat_interval": 60001}, "IDENTIFY heartbeat interval (60001) is invalid"),
        ({"heartbeat_interval": -2}, "IDENTIFY heartbeat interval (-2) is invalid"),
        ({"output_buffer_timeout": 24}, "IDENTIFY output buffer timeout (24) is invalid"),
        ({"output_buffer_timeout": 30001}, "IDENTIFY output buffer timeout (30001) is invalid"),
        ({"output_buffer_size": 63}, "IDENTIFY output buffer size (63) is invalid"),
        ({"output_buffer_size": 65537}, "IDENTIFY output buffer size (65537) is invalid"),
        ({"sample_rate": 100}, "IDENTIFY sample rate (100) is invalid"),
        ({"sample_rate": -1}, "IDENTIFY sample rate (-1) is invalid"),
        ({"msg_timeout": 999}, "IDENTIFY msg timeout (999) is invalid"),
        ({"msg_timeout": 900001}, "IDENTIFY msg timeout (900001) is invalid"),
        ({"msg_timeout": -1}, "IDENTIFY msg timeout (-1) is invalid"),
        # validation order: heartbeat, output buffer, sample rate, msg timeout
        (
            {"heartbeat_interval": 1, "msg_timeout": 1, "sample_rate": 1000},
            "IDENTIFY heartbeat interval (1) is invalid",
        ),
        (
            {"output_buffer_size": 1, "sample_rate": 1000, "msg_timeout": 1},
            "IDENTIFY output buffer size (1) is invalid",
        ),
        ({"sample_rate": 1000, "msg_timeout": 1}, "IDENTIFY sample rate (1000) is invalid"),
    ],
)
def test_invalid_field_is_fatal_E_BAD_BODY(
    connect: Connect, fields: dict[str, int], text: str
) -> None:
    conn = connect()
    conn.identify(feature_negotiation=True, **fields)
    conn.expect_fatal("E_BAD_BODY", text)


def test_feature_negotiation_false_replies_plain_OK(connect: Connect) -> None:
    conn = connect()
    conn.identify(feature_negotiation=False, client_id="x", msg_timeout=5000)
    conn.expect_response(b"OK")


def test_no_feature_negotiation_replies_plain_OK(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.identify(client_id="x", hostname="h")
    conn.expect_response(b"OK")
    conn.pub(topic, b"after identify")


def test_unknown_keys_are_ignored(connect: Connect) -> None:
    reply = connect().negotiate(short_id="a", long_id="a.example", no_such_key=[1, 2])
    assert reply["max_rdy_count"] == MAX_RDY_COUNT


def test_invalid_json_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.command(b"IDENTIFY", body=b"{not json")
    conn.expect_fatal("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


@pytest.mark.parametrize("size", [0, -1])
def test_invalid_body_size_is_fatal(connect: Connect, size: int) -> None:
    conn = connect()
    conn.send(b"IDENTIFY\n" + struct.pack(">i", size))
    conn.expect_fatal("E_BAD_BODY", f"IDENTIFY invalid body size {size}")


def test_body_too_big_is_fatal(connect: Connect) -> None:
    conn = connect()
    size = MAX_BODY_SIZE + 1
    # only the size is sent: nsqd checks it before reading the body
    conn.send(b"IDENTIFY\n" + struct.pack(">i", size))
    conn.expect_fatal("E_BAD_BODY", f"IDENTIFY body too big {size} > {MAX_BODY_SIZE}")


def test_identify_after_sub_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    conn = connect()
    conn.sub(topic, channel)
    conn.identify(feature_negotiation=True)
    conn.expect_fatal("E_INVALID", "cannot IDENTIFY in current state")


def test_tls_not_granted_without_certificate(connect: Connect, topic: str) -> None:
    conn = connect()
    reply = conn.negotiate(tls_v1=True)
    assert reply["tls_v1"] is False
    # no TLS handshake follows: the connection goes on in plaintext
    conn.pub(topic, b"plaintext")


def test_compression_keys_are_booleans(connect: Connect) -> None:
    reply = connect().negotiate(snappy=False, deflate=False, tls_v1=False)
    for key in ("snappy", "deflate", "tls_v1"):
        assert isinstance(reply[key], bool), key
        assert reply[key] is False, key


def test_deflate_and_snappy_together(connect: Connect) -> None:
    """Go nsqd grants both by default and then refuses the pair; an nsqd without one of
    them may grant the other, never both."""
    conn = connect()
    conn.identify(feature_negotiation=True, deflate=True, snappy=True)
    frame_type, data = conn.read_frame_exact()
    if frame_type == 1:
        assert data == b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
        conn.expect_closed()
        return
    assert frame_type == 0, data
    reply = json.loads(data)
    assert isinstance(reply["deflate"], bool) and isinstance(reply["snappy"], bool)
    assert not (reply["deflate"] and reply["snappy"])


def test_deflate_when_granted(connect: Connect, topic: str) -> None:
    """When nsqd grants deflate, everything after the (plaintext) JSON reply is raw
    DEFLATE in both directions, starting with an OK response."""
    conn = connect()
    conn.identify(feature_negotiation=True, deflate=True, deflate_level=3)
    frame_type, data = conn.read_frame_exact()
    assert frame_type == 0, data
    reply = json.loads(data)
    assert isinstance(reply["deflate"], bool)
    assert reply["snappy"] is False
    if not reply["deflate"]:
        conn.pub(topic, b"uncompressed")
        return
    assert reply["deflate_level"] == 3
    conn.start_deflate(reply["deflate_level"])
    conn.expect_response(b"OK")
    conn.pub(topic, b"compressed")


def test_deflate_level_is_clamped_to_max(connect: Connect) -> None:
    reply = connect().negotiate(deflate=False, deflate_level=9)
    # computed even when deflate is not granted: min(6 when not deflating, max)
    assert reply["deflate_level"] == 6
    assert reply["max_deflate_level"] == 6


def test_snappy_when_granted(connect: Connect, topic: str) -> None:
    """When nsqd grants snappy, the stream after the JSON reply is in snappy framing
    format in both directions, starting with the stream identifier chunk, then an OK."""
    conn = connect()
    conn.identify(feature_negotiation=True, snappy=True)
    frame_type, data = conn.read_frame_exact()
    assert frame_type == 0, data
    reply = json.loads(data)
    assert isinstance(reply["snappy"], bool)
    assert reply["deflate"] is False
    if not reply["snappy"]:
        conn.pub(topic, b"uncompressed")
        return
    assert conn.recv_exact(len(SNAPPY_STREAM_IDENTIFIER)) == SNAPPY_STREAM_IDENTIFIER
    conn.start_snappy()
    conn.expect_response(b"OK")
    conn.pub(topic, b"compressed")
