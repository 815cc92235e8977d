"""nsqd's Prometheus exposition: a `/stats` snapshot rendered as text format 0.0.4 (``nsq_``
topic, channel and daemon metrics) plus the standard ``process_`` metrics
(`trionsq.prometheus_text`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trionsq.prometheus_text import (
    CONTENT_TYPE,
    Labels,
    ProcessMetrics,
    Sample,
    family,
    format_value,
    read_process_metrics,
    render,
)

__all__ = [
    "CONTENT_TYPE",
    "ProcessMetrics",
    "read_process_metrics",
    "render_prometheus",
]

Snapshot = Mapping[str, Any]


# --- snapshot walking --------------------------------------------------------------------


def _topics(snapshot: Snapshot) -> Sequence[Mapping[str, Any]]:
    return snapshot.get("topics") or ()


def _channels(topic: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return topic.get("channels") or ()


def _topic_samples(snapshot: Snapshot, field: str) -> list[Sample]:
    return [
        ((("topic", topic["topic_name"]),), _number(topic.get(field, 0)))
        for topic in _topics(snapshot)
    ]


def _channel_labels(topic: Mapping[str, Any], channel: Mapping[str, Any]) -> Labels:
    return (("topic", topic["topic_name"]), ("channel", channel["channel_name"]))


def _channel_samples(snapshot: Snapshot, field: str) -> list[Sample]:
    return [
        (_channel_labels(topic, channel), _number(channel.get(field, 0)))
        for topic in _topics(snapshot)
        for channel in _channels(topic)
    ]


def _percentiles(stats: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return (stats.get("e2e_processing_latency") or {}).get("percentiles") or ()


def _quantile_label(quantile: float) -> tuple[str, str]:
    return ("quantile", format_value(float(quantile)))


def _topic_latency_samples(snapshot: Snapshot) -> list[Sample]:
    return [
        (
            (("topic", topic["topic_name"]), _quantile_label(item["quantile"])),
            float(item["value"]) / 1e9,
        )
        for topic in _topics(snapshot)
        for item in _percentiles(topic)
    ]


def _channel_latency_samples(snapshot: Snapshot) -> list[Sample]:
    return [
        (
            (*_channel_labels(topic, channel), _quantile_label(item["quantile"])),
            float(item["value"]) / 1e9,
        )
        for topic in _topics(snapshot)
        for channel in _channels(topic)
        for item in _percentiles(channel)
    ]


def _number(value: Any) -> float:
    """Snapshot values as sample values: bools as 0/1, ints kept exact."""
    if isinstance(value, bool):
        return int(value)
    return value if isinstance(value, int | float) else float(value)


# --- families ----------------------------------------------------------------------------

# (metric name, type, help, snapshot field)
_TOPIC_METRICS = (
    ("nsq_topic_messages_total", "counter", "Messages published to the topic.", "message_count"),
    ("nsq_topic_message_bytes_total", "counter", "Bytes published to the topic.", "message_bytes"),
    ("nsq_topic_depth", "gauge", "Messages queued in the topic (memory and disk).", "depth"),
    ("nsq_topic_backend_depth", "gauge", "Messages queued in the topic on disk.", "backend_depth"),
    ("nsq_topic_paused", "gauge", "1 if the topic is paused.", "paused"),
)
_CHANNEL_METRICS = (
    ("nsq_channel_messages_total", "counter", "Messages put to the channel.", "message_count"),
    ("nsq_channel_depth", "gauge", "Messages queued in the channel (memory and disk).", "depth"),
    ("nsq_channel_backend_depth", "gauge", "Messages queued on disk.", "backend_depth"),
    ("nsq_channel_in_flight", "gauge", "Messages sent and not yet finished.", "in_flight_count"),
    ("nsq_channel_deferred", "gauge", "Messages deferred for later delivery.", "deferred_count"),
    ("nsq_channel_requeues_total", "counter", "Messages requeued.", "requeue_count"),
    ("nsq_channel_timeouts_total", "counter", "In-flight messages timed out.", "timeout_count"),
    ("nsq_channel_clients", "gauge", "Consumers subscribed to the channel.", "client_count"),
    ("nsq_channel_paused", "gauge", "1 if the channel is paused.", "paused"),
)
# Bounded queues (beyond NSQ): only topics and channels whose stats have these keys (those
# with limits) have samples, and a family without samples is left out.
_BOUNDED_TOPIC_METRICS = (
    ("nsq_topic_max_depth", "gauge", "Queue depth limit (0: none).", "max_depth"),
    ("nsq_topic_max_bytes", "gauge", "Disk queue bytes limit (0: none).", "max_bytes"),
    ("nsq_topic_backend_bytes", "gauge", "Bytes queued in the disk queue.", "backend_bytes"),
    ("nsq_topic_dropped_total", "counter", "Messages dropped by drop-oldest.", "dropped_count"),
    ("nsq_topic_rejected_total", "counter", "Messages refused: queue full.", "rejected_count"),
)
_BOUNDED_CHANNEL_METRICS = tuple(
    (name.replace("nsq_topic_", "nsq_channel_"), kind, help_text, field)
    for name, kind, help_text, field in _BOUNDED_TOPIC_METRICS
)
# memory object key -> (metric name, type, help)
_MEMORY_METRICS = {
    "heap_objects": ("nsq_memory_heap_objects", "gauge", "Allocated heap objects."),
    "heap_idle_bytes": ("nsq_memory_heap_idle_bytes", "gauge", "Idle heap bytes."),
    "heap_in_use_bytes": ("nsq_memory_heap_in_use_bytes", "gauge", "In-use heap bytes."),
    "heap_released_bytes": ("nsq_memory_heap_released_bytes", "gauge", "Released heap bytes."),
    "gc_pause_usec_100": ("nsq_memory_gc_pause_usec_100", "gauge", "Longest GC pause (us)."),
    "gc_pause_usec_99": ("nsq_memory_gc_pause_usec_99", "gauge", "99th percentile GC pause."),
    "gc_pause_usec_95": ("nsq_memory_gc_pause_usec_95", "gauge", "95th percentile GC pause."),
    "next_gc_bytes": ("nsq_memory_next_gc_bytes", "gauge", "Heap size of the next GC."),
    "gc_total_runs": ("nsq_memory_gc_runs_total", "counter", "Garbage collections run."),
}


def _daemon_lines(snapshot: Snapshot) -> Iterator[str]:
    topics = _topics(snapshot)
    channels = [channel for topic in topics for channel in _channels(topic)]
    version = str(snapshot.get("version", ""))
    yield from family(
        "nsq_build_info", "gauge", "nsqd version, always 1.", [((("version", version),), 1)]
    )
    healthy = 1 if snapshot.get("health", "OK") == "OK" else 0
    yield from family("nsq_healthy", "gauge", "1 if nsqd reports health OK.", [((), healthy)])
    if "start_time" in snapshot:
        start = [((), _number(snapshot["start_time"]))]
        yield from family("nsq_start_time_seconds", "gauge", "nsqd start, unix time.", start)
    yield from family("nsq_topics", "gauge", "Topics.", [((), len(topics))])
    yield from family("nsq_channels", "gauge", "Channels over all topics.", [((), len(channels))])
    clients = sum(int(channel.get("client_count", 0)) for channel in channels)
    yield from family("nsq_clients", "gauge", "Consumers over all channels.", [((), clients)])
    producers = snapshot.get("producers")
    if isinstance(producers, list):
        yield from family(
            "nsq_producers", "gauge", "Connections that published.", [((), len(producers))]
        )


def _topic_lines(snapshot: Snapshot) -> Iterator[str]:
    for name, kind, help_text, field in _TOPIC_METRICS:
        yield from family(name, kind, help_text, _topic_samples(snapshot, field))
    channel_counts = [
        ((("topic", topic["topic_name"]),), len(_channels(topic))) for topic in _topics(snapshot)
    ]
    yield from family("nsq_topic_channels", "gauge", "Channels of the topic.", channel_counts)
    for name, kind, help_text, field in (*_BOUNDED_TOPIC_METRICS, *_TOPIC_OPTIONAL_METRICS):
        samples = [
            ((("topic", topic["topic_name"]),), _number(topic[field]))
            for topic in _topics(snapshot)
            if field in topic
        ]
        if samples:
            yield from family(name, kind, help_text, samples)
    yield from family(
        "nsq_topic_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency quantiles over the window, merged over channels.",
        _topic_latency_samples(snapshot),
    )
    yield from _replication_lines(snapshot)


_ROLES = ("primary", "replica", "candidate")


def _replication_lines(snapshot: Snapshot) -> Iterator[str]:
    """Replicated topics only (replication/topic.py): a daemon without them has none of
    these families."""
    replicated = [t for t in _topics(snapshot) if t.get("replication")]
    if not replicated:
        return
    roles: list[Sample] = []
    epochs: list[Sample] = []
    lags: list[Sample] = []
    failovers: list[Sample] = []
    for topic in replicated:
        info = topic["replication"]
        name = topic["topic_name"]
        for role in _ROLES:
            roles.append(((("topic", name), ("role", role)), 1.0 if info["role"] == role else 0.0))
        epochs.append(((("topic", name),), _number(info["epoch"])))
        failovers.append(((("topic", name),), _number(info["failovers"])))
        for member in info["members"]:
            if member.get("lag_messages") is not None:
                labels = (("topic", name), ("member", str(member["address"])))
                lags.append((labels, _number(member["lag_messages"])))
    yield from family(
        "nsq_topic_replication_role", "gauge", "This node's role for the topic (1: it).", roles
    )
    yield from family(
        "nsq_topic_replication_epoch",
        "gauge",
        "The topic's epoch on this node (round x 1024 + node ID).",
        epochs,
    )
    yield from family(
        "nsq_topic_replication_lag_messages",
        "gauge",
        "Messages the primary accepted that the member has not acknowledged.",
        lags,
    )
    yield from family(
        "nsq_topic_replication_failovers_total",
        "counter",
        "Times this node took office for the topic.",
        failovers,
    )


# Beyond NSQ (dead-lettering and TTL): only channels whose stats have the field have a sample,
# and a family with no sample is left out (a daemon without the feature exposes NSQ's set).
_CHANNEL_OPTIONAL_METRICS = (
    (
        "nsq_channel_dead_lettered_total",
        "counter",
        "Messages moved to the channel's dead-letter topic (past --max-attempts or their TTL).",
        "dead_letter_count",
    ),
    (
        "nsq_channel_expired_total",
        "counter",
        "Messages past their TTL when they would have been delivered (dropped or dead-lettered).",
        "expired_count",
    ),
    (
        "nsq_channel_corrupt_records_total",
        "counter",
        "Disk queue records that failed their checksum, moved to <name>.diskqueue.bad.",
        "corrupt_count",
    ),
)
# Beyond NSQ (checksum side files): only topics whose stats have the field.
_TOPIC_OPTIONAL_METRICS = (
    (
        "nsq_topic_corrupt_records_total",
        "counter",
        "Disk queue records that failed their checksum, moved to <name>.diskqueue.bad.",
        "corrupt_count",
    ),
)


def _channel_lines(snapshot: Snapshot) -> Iterator[str]:
    for name, kind, help_text, field in _CHANNEL_METRICS:
        yield from family(name, kind, help_text, _channel_samples(snapshot, field))
    for name, kind, help_text, field in (*_BOUNDED_CHANNEL_METRICS, *_CHANNEL_OPTIONAL_METRICS):
        samples = [
            (_channel_labels(topic, channel), _number(channel[field]))
            for topic in _topics(snapshot)
            for channel in _channels(topic)
            if field in channel
        ]
        if samples:
            yield from family(name, kind, help_text, samples)
    yield from family(
        "nsq_channel_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency quantiles (publish to FIN) over the window.",
        _channel_latency_samples(snapshot),
    )


def _memory_lines(memory: Mapping[str, Any]) -> Iterator[str]:
    for key, (name, kind, help_text) in _MEMORY_METRICS.items():
        if key in memory:
            yield from family(name, kind, help_text, [((), _number(memory[key]))])


def render_prometheus(snapshot: Snapshot, process: ProcessMetrics | None = None) -> str:
    """`snapshot` (the `/stats` JSON shape) in the Prometheus text format 0.0.4, followed by the
    ``process_`` metrics of `process` (read from this process when ``None``)."""
    lines = [
        *_daemon_lines(snapshot),
        *_topic_lines(snapshot),
        *_channel_lines(snapshot),
        *_memory_lines(snapshot.get("memory") or {}),
    ]
    return render(lines, process)
