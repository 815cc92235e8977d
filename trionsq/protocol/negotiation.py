"""IDENTIFY: validating a client's fields against nsqd's limits and building the reply (§1.3).

Pure functions: the daemon supplies its limits and capabilities, gets back the effective
settings for the connection, or a ProtocolError with nsqd's exact text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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


_FIELD_TYPES: dict[str, str] = {
    "client_id": "str",
    "hostname": "str",
    "user_agent": "str",
    "heartbeat_interval": "int",
    "output_buffer_size": "int",
    "output_buffer_timeout": "int",
    "feature_negotiation": "bool",
    "tls_v1": "bool",
    "deflate": "bool",
    "deflate_level": "int",
    "snappy": "bool",
    "sample_rate": "int32",
    "msg_timeout": "int",
    "topology_region": "str",
    "topology_zone": "str",
}
# Go's encoding/json matches keys to fields case-insensitively (Unicode simple folding, where
# U+017F folds to "s" and U+212A to "k"), an exact match preferred.
_FOLD = str.maketrans({"\u017f": "s", "\u212a": "k"})
_INT_RANGE = {"int": (-(1 << 63), (1 << 63) - 1), "int32": (-(1 << 31), (1 << 31) - 1)}


def _decode_error() -> ProtocolError:
    return ProtocolError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def _decode(body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decode an IDENTIFY body as Go's json.Unmarshal into nsqd's identifyDataV2 would.

    Returns (known fields, the whole top-level object). Go's rules: ``null`` (at the top or as
    a value) leaves things unchanged; keys match fields case-insensitively and the last one
    wins; ints must be integer literals within range; a type mismatch fails the decode.
    """
    objects: list[list[tuple[str, Any]]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        objects.append(pairs)  # the top-level object, if any, completes last
        return dict(pairs)

    try:
        # Go replaces invalid UTF-8 in strings with U+FFFD; elsewhere it is a syntax error.
        data = json.loads(
            body.decode("utf-8", "replace"),
            object_pairs_hook=hook,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError):
        raise _decode_error() from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise _decode_error()
    fields: dict[str, Any] = {}
    for key, value in objects[-1]:
        if value is None:
            continue
        field = key if key in _FIELD_TYPES else key.translate(_FOLD).lower()
        kind = _FIELD_TYPES.get(field)
        if kind is None:
            continue  # unknown keys are ignored
        if kind == "str":
            ok = isinstance(value, str)
        elif kind == "bool":
            ok = isinstance(value, bool)
        else:
            lo, hi = _INT_RANGE[kind]
            ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
        if not ok:
            raise _decode_error()
        fields[field] = value
    return fields, data


def negotiate(
    body: bytes,
    limits: IdentifyLimits,
    on_decoded: Callable[[dict[str, Any]], None] | None = None,
) -> IdentifyResult:
    """Validate an IDENTIFY body in nsqd's order; raise ProtocolError as nsqd would.
    `on_decoded` gets the known fields once the JSON is decoded, before they are checked
    (where nsqd logs them)."""
    fields, data = _decode(body)
    if on_decoded is not None:
        on_decoded(fields)
    client_id: str | None = fields.get("client_id")
    hostname: str | None = fields.get("hostname")
    user_agent: str = fields.get("user_agent", "")
    heartbeat: int = fields.get("heartbeat_interval", 0)
    obuf_timeout: int = fields.get("output_buffer_timeout", 0)
    obuf_size: int = fields.get("output_buffer_size", 0)
    sample_rate: int = fields.get("sample_rate", 0)
    msg_timeout: int = fields.get("msg_timeout", 0)
    deflate_level_req: int = fields.get("deflate_level", 0)
    feature_negotiation: bool = fields.get("feature_negotiation", False)
    want_tls: bool = fields.get("tls_v1", False)
    want_deflate: bool = fields.get("deflate", False)
    want_snappy: bool = fields.get("snappy", False)

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

    # nsqd's SetOutputBuffer checks the timeout first, then the size (and size -1 forces the
    # timeout to 0 whatever was asked).
    out_size = 16384
    out_timeout = limits.output_buffer_timeout_ms
    if obuf_timeout == -1:
        out_timeout = 0
    elif obuf_timeout == 0:
        pass
    elif limits.min_output_buffer_timeout_ms <= obuf_timeout <= limits.max_output_buffer_timeout_ms:
        out_timeout = obuf_timeout
    else:
        raise invalid("output buffer timeout", obuf_timeout)

    if obuf_size == -1:
        out_size, out_timeout = 1, 0
    elif obuf_size == 0:
        pass
    elif 64 <= obuf_size <= limits.max_output_buffer_size:
        out_size = obuf_size
    else:
        raise invalid("output buffer size", obuf_size)

    if not 0 <= sample_rate <= 99:
        raise invalid("sample rate", sample_rate)

    if msg_timeout == 0:
        msg_timeout_ms = limits.msg_timeout_ms
    elif 1000 <= msg_timeout <= limits.max_msg_timeout_ms:
        msg_timeout_ms = msg_timeout
    else:
        raise invalid("msg timeout", msg_timeout)

    # Without feature negotiation nothing is negotiated.
    tls = feature_negotiation and want_tls and limits.tls_available
    deflate = feature_negotiation and want_deflate and limits.deflate_available
    snappy = feature_negotiation and want_snappy and limits.snappy_available
    # The requested level counts only when deflate is granted; the result is reported anyway.
    deflate_level = deflate_level_req if deflate and deflate_level_req > 0 else 6
    deflate_level = min(deflate_level, limits.max_deflate_level)
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
