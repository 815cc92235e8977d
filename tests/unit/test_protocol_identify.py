"""IDENTIFY negotiation (docs/protocol.md §1.3, IDENTIFY): field rules, check order, reply."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trionsq.protocol import IdentifyLimits, ProtocolError, negotiate

LIMITS = IdentifyLimits(deflate_available=True, snappy_available=True)


def ident(fields: dict[str, Any], limits: IdentifyLimits = LIMITS) -> Any:
    return negotiate(json.dumps(fields).encode(), limits)


def failure(body: bytes | dict[str, Any], limits: IdentifyLimits = LIMITS) -> tuple[str, str]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(ProtocolError) as info:
        negotiate(raw, limits)
    assert info.value.fatal
    return info.value.code, info.value.text


def invalid(what: str, value: int) -> tuple[str, str]:
    return "E_BAD_BODY", f"IDENTIFY {what} ({value}) is invalid"


def test_defaults() -> None:
    r = ident({})
    assert r.client_id is None and r.hostname is None and r.user_agent == ""
    assert r.heartbeat_interval_ms == 30_000  # client timeout (60 s) / 2
    assert r.output_buffer_size == 16384
    assert r.output_buffer_timeout_ms == 250
    assert r.sample_rate == 0
    assert r.msg_timeout_ms == 60_000
    assert not r.feature_negotiation
    assert (r.tls_v1, r.deflate, r.snappy) == (False, False, False)


def test_identity_strings_stored() -> None:
    r = ident({"client_id": "c1", "hostname": "h.example", "user_agent": "go-nsq/1.1.0"})
    assert (r.client_id, r.hostname, r.user_agent) == ("c1", "h.example", "go-nsq/1.1.0")


# heartbeat_interval: -1 disables; 0 default; 1000..max; else error
@pytest.mark.parametrize(
    ("value", "ms"), [(-1, -1), (0, 30_000), (1000, 1000), (45_000, 45_000), (60_000, 60_000)]
)
def test_heartbeat_ok(value: int, ms: int) -> None:
    assert ident({"heartbeat_interval": value}).heartbeat_interval_ms == ms


@pytest.mark.parametrize("value", [-2, 1, 500, 999, 60_001, 10**9])
def test_heartbeat_invalid(value: int) -> None:
    assert failure({"heartbeat_interval": value}) == invalid("heartbeat interval", value)


def test_heartbeat_max_from_limits() -> None:
    limits = IdentifyLimits(max_heartbeat_interval_ms=5000)
    assert ident({"heartbeat_interval": 5000}, limits).heartbeat_interval_ms == 5000
    assert failure({"heartbeat_interval": 5001}, limits) == invalid("heartbeat interval", 5001)


# output_buffer_size: -1 -> size 1 and timeout 0; 0 default 16384; 64..max; else error
@pytest.mark.parametrize(("value", "size"), [(0, 16384), (64, 64), (1000, 1000), (65536, 65536)])
def test_output_buffer_size_ok(value: int, size: int) -> None:
    r = ident({"output_buffer_size": value})
    assert (r.output_buffer_size, r.output_buffer_timeout_ms) == (size, 250)


def test_output_buffer_size_minus_one_is_unbuffered() -> None:
    r = ident({"output_buffer_size": -1})
    assert (r.output_buffer_size, r.output_buffer_timeout_ms) == (1, 0)
    # Whatever timeout was asked for: nsqd applies the size after the timeout.
    r = ident({"output_buffer_size": -1, "output_buffer_timeout": 500})
    assert (r.output_buffer_size, r.output_buffer_timeout_ms) == (1, 0)


@pytest.mark.parametrize("value", [-2, 1, 63, 65537])
def test_output_buffer_size_invalid(value: int) -> None:
    assert failure({"output_buffer_size": value}) == invalid("output buffer size", value)


# output_buffer_timeout: -1 -> 0; 0 default 250; min(25)..max(30000); else error
@pytest.mark.parametrize(
    ("value", "ms"), [(-1, 0), (0, 250), (25, 25), (1000, 1000), (30_000, 30_000)]
)
def test_output_buffer_timeout_ok(value: int, ms: int) -> None:
    assert ident({"output_buffer_timeout": value}).output_buffer_timeout_ms == ms


@pytest.mark.parametrize("value", [-2, 1, 24, 30_001])
def test_output_buffer_timeout_invalid(value: int) -> None:
    assert failure({"output_buffer_timeout": value}) == invalid("output buffer timeout", value)


def test_output_buffer_limits_configurable() -> None:
    limits = IdentifyLimits(
        output_buffer_timeout_ms=100,
        min_output_buffer_timeout_ms=10,
        max_output_buffer_timeout_ms=50,
        max_output_buffer_size=128,
    )
    assert ident({}, limits).output_buffer_timeout_ms == 100
    assert ident({"output_buffer_timeout": 10}, limits).output_buffer_timeout_ms == 10
    assert failure({"output_buffer_timeout": 51}, limits) == invalid("output buffer timeout", 51)
    assert ident({"output_buffer_size": 128}, limits).output_buffer_size == 128
    assert failure({"output_buffer_size": 129}, limits) == invalid("output buffer size", 129)


# sample_rate: 0..99
@pytest.mark.parametrize("value", [0, 1, 50, 99])
def test_sample_rate_ok(value: int) -> None:
    assert ident({"sample_rate": value}).sample_rate == value


@pytest.mark.parametrize("value", [-1, 100, 1000])
def test_sample_rate_invalid(value: int) -> None:
    assert failure({"sample_rate": value}) == invalid("sample rate", value)


# msg_timeout: 0 default; 1000..max_msg_timeout; else error
@pytest.mark.parametrize(("value", "ms"), [(0, 60_000), (1000, 1000), (900_000, 900_000)])
def test_msg_timeout_ok(value: int, ms: int) -> None:
    assert ident({"msg_timeout": value}).msg_timeout_ms == ms


@pytest.mark.parametrize("value", [-1, 1, 999, 900_001])
def test_msg_timeout_invalid(value: int) -> None:
    assert failure({"msg_timeout": value}) == invalid("msg timeout", value)


def test_msg_timeout_limits_configurable() -> None:
    limits = IdentifyLimits(msg_timeout_ms=5000, max_msg_timeout_ms=10_000)
    assert ident({}, limits).msg_timeout_ms == 5000
    assert failure({"msg_timeout": 10_001}, limits) == invalid("msg timeout", 10_001)


def test_check_order() -> None:
    # nsqd: heartbeat interval, then output buffer timeout, then output buffer size (both in
    # SetOutputBuffer, timeout first), then sample rate, then msg timeout.
    bad = {
        "heartbeat_interval": 1,
        "output_buffer_timeout": 2,
        "output_buffer_size": 3,
        "sample_rate": 400,
        "msg_timeout": 5,
    }
    order = [
        ("heartbeat_interval", "heartbeat interval"),
        ("output_buffer_timeout", "output buffer timeout"),
        ("output_buffer_size", "output buffer size"),
        ("sample_rate", "sample rate"),
        ("msg_timeout", "msg timeout"),
    ]
    fields = dict(bad)
    for key, what in order:
        assert failure(fields) == invalid(what, bad[key])
        del fields[key]
    ident(fields)


# deflate_level: used only if deflate is granted and > 0 (else 6), then clamped to max
@pytest.mark.parametrize(
    ("fields", "max_level", "level"),
    [
        ({"deflate": True}, 6, 6),
        ({"deflate": True, "deflate_level": 3}, 6, 3),
        ({"deflate": True, "deflate_level": 9}, 6, 6),
        ({"deflate": True, "deflate_level": 9}, 9, 9),
        ({"deflate": True, "deflate_level": 0}, 9, 6),
        ({"deflate": True, "deflate_level": -4}, 9, 6),  # no lower-bound error
        ({"deflate": True, "deflate_level": 3}, 2, 2),
        ({"deflate": True}, 2, 2),
        # Not granted: the level is still reported, as min(6, max), ignoring the request.
        ({"deflate": False, "deflate_level": 3}, 6, 6),
        ({"deflate_level": 9}, 9, 6),
        ({"deflate_level": 9}, 4, 4),
    ],
)
def test_deflate_level(fields: dict[str, Any], max_level: int, level: int) -> None:
    limits = IdentifyLimits(deflate_available=True, max_deflate_level=max_level)
    r = ident({"feature_negotiation": True, **fields}, limits)
    assert r.deflate_level == level
    assert json.loads(r.reply(limits))["deflate_level"] == level


def test_deflate_level_needs_deflate_enabled_on_the_server() -> None:
    limits = IdentifyLimits(deflate_available=False, max_deflate_level=9)
    r = ident({"feature_negotiation": True, "deflate": True, "deflate_level": 3}, limits)
    assert (r.deflate, r.deflate_level) == (False, 6)


def test_feature_negotiation_false_replies_ok_and_negotiates_nothing() -> None:
    r = ident({"tls_v1": True, "deflate": True, "snappy": True})
    assert r.reply(LIMITS) == b"OK"
    assert (r.tls_v1, r.deflate, r.snappy) == (False, False, False)


def test_reply_json() -> None:
    limits = IdentifyLimits(
        version="1.3.0",
        max_rdy_count=2500,
        max_msg_timeout_ms=900_000,
        max_deflate_level=6,
        snappy_available=True,
        auth_required=True,
    )
    r = ident(
        {
            "feature_negotiation": True,
            "snappy": True,
            "msg_timeout": 5000,
            "sample_rate": 10,
            "output_buffer_size": 1024,
            "output_buffer_timeout": 100,
        },
        limits,
    )
    reply = json.loads(r.reply(limits))
    assert reply == {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "max_msg_timeout": 900_000,
        "msg_timeout": 5000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "max_deflate_level": 6,
        "snappy": True,
        "sample_rate": 10,
        "auth_required": True,
        "output_buffer_size": 1024,
        "output_buffer_timeout": 100,
    }


def test_capabilities_granted_only_when_available() -> None:
    fields = {"feature_negotiation": True, "tls_v1": True, "snappy": True}
    r = ident(fields, IdentifyLimits())
    assert (r.tls_v1, r.snappy) == (False, False)
    r = ident(fields, IdentifyLimits(tls_available=True, snappy_available=True))
    assert (r.tls_v1, r.snappy) == (True, True)
    assert json.loads(r.reply(IdentifyLimits()))["tls_v1"] is True


def test_deflate_and_snappy_both_granted_fails() -> None:
    fields = {"feature_negotiation": True, "deflate": True, "snappy": True}
    assert failure(fields) == (
        "E_IDENTIFY_FAILED",
        "cannot enable both deflate and snappy compression",
    )
    # Only when both are actually granted.
    r = ident(fields, IdentifyLimits(deflate_available=True, snappy_available=False))
    assert (r.deflate, r.snappy) == (True, False)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"not json",
        b"[]",
        b"42",
        b'"str"',
        b"{} {}",
        b'{"heartbeat_interval": NaN}',
        b'{"heartbeat_interval": Infinity}',
        b'{"heartbeat_interval": "1000"}',  # a string for an int
        b'{"heartbeat_interval": 1000.0}',  # Go refuses a float for an int
        b'{"heartbeat_interval": 1e3}',
        b'{"heartbeat_interval": 9223372036854775808}',  # beyond int64
        b'{"sample_rate": 2147483648}',  # beyond int32
        b'{"feature_negotiation": 1}',
        b'{"feature_negotiation": "true"}',
        b'{"client_id": 5}',
        b'{"client_id": ["a"]}',
        b"\xef\xbb\xbf{}",  # a byte-order mark
        b"[" * 100_000,
    ],
)
def test_bad_json(body: bytes) -> None:
    assert failure(body) == ("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


def test_unknown_keys_ignored() -> None:
    r = ident({"short_id": "x", "long_id": "y", "extra": {"nested": [1, 2.5, None]}})
    assert r.heartbeat_interval_ms == 30_000


def test_null_values_keep_defaults() -> None:
    # Go's json.Unmarshal leaves a field untouched for null, and accepts a null document.
    r = ident({"heartbeat_interval": None, "client_id": None, "feature_negotiation": None})
    assert (r.heartbeat_interval_ms, r.client_id, r.feature_negotiation) == (30_000, None, False)
    assert negotiate(b"null", LIMITS).reply(LIMITS) == b"OK"
    assert negotiate(b' {"msg_timeout": 2000}\n', LIMITS).msg_timeout_ms == 2000


def test_keys_match_case_insensitively_last_wins() -> None:
    # Go's encoding/json matches struct fields case-insensitively.
    r = negotiate(b'{"Heartbeat_Interval": 2000, "CLIENT_ID": "c"}', LIMITS)
    assert (r.heartbeat_interval_ms, r.client_id) == (2000, "c")
    r = negotiate(b'{"msg_timeout": 2000, "MSG_TIMEOUT": 3000}', LIMITS)
    assert r.msg_timeout_ms == 3000
    r = negotiate(b'{"msg_timeout": 2000, "msg_timeout": 4000}', LIMITS)
    assert r.msg_timeout_ms == 4000
    # Unicode folding: U+017F (long s) folds to "s".
    r = negotiate('{"\u017fample_rate": 7}'.encode(), LIMITS)
    assert r.sample_rate == 7


def test_raw_fields_kept() -> None:
    r = ident({"client_id": "c", "custom": 1})
    assert r.raw == {"client_id": "c", "custom": 1}
