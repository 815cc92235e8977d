"""IDENTIFY: validating a client's fields against nsqd's limits and building the reply (§1.3).

Pure functions: the daemon supplies its limits and capabilities, gets back the effective
settings for the connection, or a ProtocolError with nsqd's exact text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import E_BAD_BODY, E_IDENTIFY_FAILED, ProtocolError


@dataclass(frozen=True, slots=True)
class IdentifyLimits:
    """What nsqd allows and offers; times in milliseconds."""

    version: str = "1.3.0"
    client_timeout_ms: int = 60_000
    max_heartbeat_interval_ms: int = 60_000
    output_buffer_timeout_ms: int = 250
    min_output_buffer_timeout_ms: int = 25
    max_output_buffer_timeout_ms: int = 30_000
    max_output_buffer_size: int = 65536
    msg_timeout_ms: int = 60_000
    max_msg_timeout_ms: int = 900_000
    max_rdy_count: int = 2500
    tls_available: bool = False
    deflate_available: bool = False
    snappy_available: bool = False
    max_deflate_level: int = 6
    auth_required: bool = False


@dataclass(slots=True)
class IdentifyResult:
    """The effective settings of a connection after IDENTIFY."""

    client_id: str | None
    hostname: str | None
    user_agent: str
    heartbeat_interval_ms: int  # -1: disabled
    output_buffer_size: int
    output_buffer_timeout_ms: int  # 0: no timed flush
    sample_rate: int
    msg_timeout_ms: int
    feature_negotiation: bool
    tls_v1: bool
    deflate: bool
    deflate_level: int
    snappy: bool
    raw: dict[str, Any]

    def reply(self, limits: IdentifyLimits) -> bytes:
        """The response frame's data: ``OK`` or the negotiation JSON."""
        if not self.feature_negotiation:
            return b"OK"
        return json.dumps(
            {
                "max_rdy_count": limits.max_rdy_count,
                "version": limits.version,
                "max_msg_timeout": limits.max_msg_timeout_ms,
                "msg_timeout": self.msg_timeout_ms,
                "tls_v1": self.tls_v1,
                "deflate": self.deflate,
                "deflate_level": self.deflate_level,
                "max_deflate_level": limits.max_deflate_level,
                "snappy": self.snappy,
                "sample_rate": self.sample_rate,
                "auth_required": limits.auth_required,
                "output_buffer_size": self.output_buffer_size,
                "output_buffer_timeout": self.output_buffer_timeout_ms,
            },
            separators=(",", ":"),
        ).encode()


def _int_field(data: dict[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")
    if isinstance(value, float) and not value.is_integer():
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")
    return int(value)


def _str_field(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")
    return value


def _bool_field(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")
    return value


def negotiate(body: bytes, limits: IdentifyLimits) -> IdentifyResult:
    """Validate an IDENTIFY body in nsqd's order; raise ProtocolError as nsqd would."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
    if not isinstance(data, dict):
        raise ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")
    # Type-check every known field first, as Go's JSON decoding does.
    client_id = _str_field(data, "client_id")
    hostname = _str_field(data, "hostname")
    user_agent = _str_field(data, "user_agent") or ""
    heartbeat = _int_field(data, "heartbeat_interval")
    obuf_timeout = _int_field(data, "output_buffer_timeout")
    obuf_size = _int_field(data, "output_buffer_size")
    sample_rate = _int_field(data, "sample_rate")
    msg_timeout = _int_field(data, "msg_timeout")
    deflate_level_req = _int_field(data, "deflate_level")
    feature_negotiation = _bool_field(data, "feature_negotiation")
    want_tls = _bool_field(data, "tls_v1")
    want_deflate = _bool_field(data, "deflate")
    want_snappy = _bool_field(data, "snappy")

    def invalid(what: str, value: int) -> ProtocolError:
        return ProtocolError(E_BAD_BODY, f"IDENTIFY {what} ({value}) is invalid")

    if heartbeat == -1:
        heartbeat_ms = -1
    elif heartbeat == 0:
        heartbeat_ms = limits.client_timeout_ms // 2
    elif 1000 <= heartbeat <= limits.max_heartbeat_interval_ms:
        heartbeat_ms = heartbeat
    else:
        raise invalid("heartbeat interval", heartbeat)

    out_size = 16384
    out_timeout = limits.output_buffer_timeout_ms
    if obuf_size == -1:
        out_size, out_timeout = 1, 0
    elif obuf_size == 0:
        pass
    elif 64 <= obuf_size <= limits.max_output_buffer_size:
        out_size = obuf_size
    else:
        raise invalid("output buffer size", obuf_size)

    if obuf_timeout == -1:
        out_timeout = 0
    elif obuf_timeout == 0:
        pass
    elif (
        limits.min_output_buffer_timeout_ms <= obuf_timeout <= limits.max_output_buffer_timeout_ms
    ):
        out_timeout = obuf_timeout
    else:
        raise invalid("output buffer timeout", obuf_timeout)

    if not 0 <= sample_rate <= 99:
        raise invalid("sample rate", sample_rate)

    if msg_timeout == 0:
        msg_timeout_ms = limits.msg_timeout_ms
    elif 1000 <= msg_timeout <= limits.max_msg_timeout_ms:
        msg_timeout_ms = msg_timeout
    else:
        raise invalid("msg timeout", msg_timeout)

    deflate_level = deflate_level_req if deflate_level_req > 0 else 6
    deflate_level = min(deflate_level, limits.max_deflate_level)

    # Without feature negotiation nothing is negotiated.
    tls = feature_negotiation and want_tls and limits.tls_available
    deflate = feature_negotiation and want_deflate and limits.deflate_available
    snappy = feature_negotiation and want_snappy and limits.snappy_available
    if deflate and snappy:
        raise ProtocolError(E_IDENTIFY_FAILED, "cannot enable both deflate and snappy compression")

    return IdentifyResult(
        client_id=client_id,
        hostname=hostname,
        user_agent=user_agent,
        heartbeat_interval_ms=heartbeat_ms,
        output_buffer_size=out_size,
        output_buffer_timeout_ms=out_timeout,
        sample_rate=sample_rate,
        msg_timeout_ms=msg_timeout_ms,
        feature_negotiation=feature_negotiation,
        tls_v1=tls,
        deflate=deflate,
        deflate_level=deflate_level,
        snappy=snappy,
        raw=data,
    )
