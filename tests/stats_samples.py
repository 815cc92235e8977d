"""Hand-made stats snapshots in nsqd's `/stats?format=json` shape, for the tests of the
renderers that consume one (statsd, Prometheus)."""

from __future__ import annotations

from typing import Any

from trionsq.nsqd.stats import MEMORY_KEYS


def latency(*pairs: tuple[float, float], count: int = 10) -> dict[str, Any]:
    """An e2e_processing_latency value: disabled without pairs, else (quantile, ns) pairs."""
    if not pairs:
        return {"count": 0, "percentiles": None}
    return {"count": count, "percentiles": [{"quantile": q, "value": v} for q, v in pairs]}


def channel_stats(name: str, **fields: Any) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "channel_name": name,
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "clients": None,
        "paused": False,
        "e2e_processing_latency": latency(),
    }
    channel.update(fields)
    return channel


def topic_stats(name: str, *channels: dict[str, Any], **fields: Any) -> dict[str, Any]:
    topic: dict[str, Any] = {
        "topic_name": name,
        "channels": list(channels),
        "depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "message_bytes": 0,
        "paused": False,
        "e2e_processing_latency": latency(),
    }
    topic.update(fields)
    return topic


def memory_stats(**values: int) -> dict[str, int]:
    memory = dict.fromkeys(MEMORY_KEYS, 0)
    memory.update(values)
    return memory
