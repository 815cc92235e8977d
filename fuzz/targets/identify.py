"""IDENTIFY negotiation (trionsq.protocol.negotiation.negotiate) over arbitrary bodies and a
choice of `IdentifyLimits` (the first byte picks TLS/snappy/deflate availability and limits).

What must hold:
* only `ProtocolError` escapes (``E_BAD_BODY`` or ``E_IDENTIFY_FAILED``);
* an accepted IDENTIFY has settings within nsqd's limits: heartbeat -1 or within
  [1000, max] (or the default), output buffer size 1, 16384 or within [64, max], timeout 0 or
  within [min, max] (or the default), sample rate 0-99, msg timeout within [1000, max] (or the
  default), deflate level at most the max, never both snappy and deflate, nothing granted that
  is not available or without feature negotiation;
* `reply()` works and is ``OK`` or a JSON object.
"""

from __future__ import annotations

import json

from trionsq.protocol.errors import E_BAD_BODY, E_IDENTIFY_FAILED, ProtocolError
from trionsq.protocol.negotiation import IdentifyLimits, negotiate

from ..common import check


def _limits(selector: int) -> IdentifyLimits:
    return IdentifyLimits(
        tls_available=bool(selector & 1),
        snappy_available=bool(selector & 2),
        deflate_available=bool(selector & 4),
        max_deflate_level=1 + (selector >> 3) % 9,
        auth_required=bool(selector & 0x80),
        max_heartbeat_interval_ms=60_000 if selector & 0x40 else 2_000,
    )


def test_one_input(data: bytes) -> None:
    if not data:
        return
    limits = _limits(data[0])
    try:
        r = negotiate(data[1:], limits)
    except ProtocolError as err:
        check(err.code in (E_BAD_BODY, E_IDENTIFY_FAILED), f"code {err.code}")
        return
    check(
        r.heartbeat_interval_ms == -1
        or r.heartbeat_interval_ms == limits.client_timeout_ms // 2
        or 1000 <= r.heartbeat_interval_ms <= limits.max_heartbeat_interval_ms,
        f"heartbeat {r.heartbeat_interval_ms}",
    )
    check(
        r.output_buffer_size in (1, 16384)
        or 64 <= r.output_buffer_size <= limits.max_output_buffer_size,
        f"output buffer size {r.output_buffer_size}",
    )
    check(
        r.output_buffer_timeout_ms in (0, limits.output_buffer_timeout_ms)
        or limits.min_output_buffer_timeout_ms
        <= r.output_buffer_timeout_ms
        <= limits.max_output_buffer_timeout_ms,
        f"output buffer timeout {r.output_buffer_timeout_ms}",
    )
    check(0 <= r.sample_rate <= 99, "sample rate")
    check(
        r.msg_timeout_ms == limits.msg_timeout_ms
        or 1000 <= r.msg_timeout_ms <= limits.max_msg_timeout_ms,
        "msg timeout",
    )
    check(r.deflate_level <= limits.max_deflate_level, "deflate level")
    check(not (r.snappy and r.deflate), "both compressions")
    check(not r.tls_v1 or (limits.tls_available and r.feature_negotiation), "tls granted")
    check(not r.snappy or (limits.snappy_available and r.feature_negotiation), "snappy granted")
    check(not r.deflate or (limits.deflate_available and r.feature_negotiation), "deflate")
    reply = r.reply(limits)
    if reply != b"OK":
        check(isinstance(json.loads(reply), dict), "reply is not a JSON object")


def seeds() -> list[bytes]:
    bodies = [
        {
            "client_id": "c",
            "hostname": "h",
            "user_agent": "go-nsq/1.1",
            "feature_negotiation": True,
        },
        {"heartbeat_interval": -1, "output_buffer_size": -1, "output_buffer_timeout": -1},
        {"heartbeat_interval": 1000, "output_buffer_size": 64, "output_buffer_timeout": 25},
        {"feature_negotiation": True, "tls_v1": True, "snappy": True, "deflate": True},
        {"feature_negotiation": True, "deflate": True, "deflate_level": 9, "sample_rate": 50},
        {"msg_timeout": 1000, "Client_ID": "k", "HOSTNAME": None, "\u017fample_rate": 1},
    ]
    out = [bytes([sel]) + json.dumps(b).encode() for b in bodies for sel in (0, 7, 0x45)]
    out += [b"\x00null", b"\x00[]", b'\x00{"heartbeat_interval": 1e3}', b'\x00{"a":NaN}']
    return out
