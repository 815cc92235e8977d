"""nsqd's Prometheus exposition: a `/stats` snapshot rendered as text format 0.0.4 (``nsq_``
topic, channel and daemon metrics) plus the standard ``process_`` metrics read cheaply from
/proc, `os` and `resource`."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = [
    "CONTENT_TYPE",
    "ProcessMetrics",
    "read_process_metrics",
    "render_prometheus",
]

#: The Content-Type of a `render_prometheus` response.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Snapshot = Mapping[str, Any]
Labels = Sequence[tuple[str, str]]
Sample = tuple[Labels, float]


# --- process metrics ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessMetrics:
    """The standard ``process_`` metrics; ``None`` where the platform does not tell."""

    cpu_seconds: float
    start_time_seconds: float | None = None
    resident_memory_bytes: int | None = None
    virtual_memory_bytes: int | None = None
    open_fds: int | None = None
    max_fds: int | None = None


# Used when /proc cannot say when the process started: close enough for a daemon.
_IMPORT_TIME = time.time()


def _read_text(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


@cache
def _boot_time() -> float | None:
    text = _read_text("/proc/stat")
    for line in (text or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def _start_time_seconds() -> float:
    stat = _read_text("/proc/self/stat")
    boot = _boot_time()
    if stat is None or boot is None:
        return _IMPORT_TIME
    # the command name (field 2) may hold spaces and parentheses: split after the last ")"
    fields = stat.rpartition(")")[2].split()
    start_ticks = int(fields[19])  # field 22 overall
    return boot + start_ticks / os.sysconf("SC_CLK_TCK")


def _memory_bytes() -> tuple[int | None, int | None]:
    """(resident, virtual) from /proc/self/statm."""
    statm = _read_text("/proc/self/statm")
    if statm is None:
        return None, None
    pages = statm.split()
    page_size = os.sysconf("SC_PAGE_SIZE")
    return int(pages[1]) * page_size, int(pages[0]) * page_size


def _open_fds() -> int | None:
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(directory))
        except OSError:
            continue
    return None


def _max_fds() -> int | None:
    if sys.platform == "win32":
        return None
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def read_process_metrics() -> ProcessMetrics:
    """This process's CPU time, start time, memory and file descriptors (a few small reads)."""
    times = os.times()
    resident, virtual = _memory_bytes()
    return ProcessMetrics(
        cpu_seconds=times.user + times.system,
        start_time_seconds=_start_time_seconds(),
        resident_memory_bytes=resident,
        virtual_memory_bytes=virtual,
        open_fds=_open_fds(),
        max_fds=_max_fds(),
    )


# --- text format -------------------------------------------------------------------------


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{name}="{_escape_label_value(value)}"' for name, value in labels)
    return "{" + inner + "}"


def _family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> Iterator[str]:
    """HELP and TYPE lines then one line per sample (metadata even without samples)."""
    yield f"# HELP {name} {_escape_help(help_text)}"
    yield f"# TYPE {name} {kind}"
    for labels, value in samples:
        yield f"{name}{_format_labels(labels)} {_format_value(value)}"


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
    return ("quantile", _format_value(float(quantile)))


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
    yield from _family(
        "nsq_build_info", "gauge", "nsqd version, always 1.", [((("version", version),), 1)]
    )
    healthy = 1 if snapshot.get("health", "OK") == "OK" else 0
    yield from _family("nsq_healthy", "gauge", "1 if nsqd reports health OK.", [((), healthy)])
    if "start_time" in snapshot:
        start = [((), _number(snapshot["start_time"]))]
        yield from _family("nsq_start_time_seconds", "gauge", "nsqd start, unix time.", start)
    yield from _family("nsq_topics", "gauge", "Topics.", [((), len(topics))])
    yield from _family("nsq_channels", "gauge", "Channels over all topics.", [((), len(channels))])
    clients = sum(int(channel.get("client_count", 0)) for channel in channels)
    yield from _family("nsq_clients", "gauge", "Consumers over all channels.", [((), clients)])
    producers = snapshot.get("producers")
    if isinstance(producers, list):
        yield from _family(
            "nsq_producers", "gauge", "Connections that published.", [((), len(producers))]
        )


def _topic_lines(snapshot: Snapshot) -> Iterator[str]:
    for name, kind, help_text, field in _TOPIC_METRICS:
        yield from _family(name, kind, help_text, _topic_samples(snapshot, field))
    channel_counts = [
        ((("topic", topic["topic_name"]),), len(_channels(topic))) for topic in _topics(snapshot)
    ]
    yield from _family("nsq_topic_channels", "gauge", "Channels of the topic.", channel_counts)
    for name, kind, help_text, field in (*_BOUNDED_TOPIC_METRICS, *_TOPIC_OPTIONAL_METRICS):
        samples = [
            ((("topic", topic["topic_name"]),), _number(topic[field]))
            for topic in _topics(snapshot)
            if field in topic
        ]
        if samples:
            yield from _family(name, kind, help_text, samples)
    yield from _family(
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
    yield from _family(
        "nsq_topic_replication_role", "gauge", "This node's role for the topic (1: it).", roles
    )
    yield from _family(
        "nsq_topic_replication_epoch",
        "gauge",
        "The topic's epoch on this node (round x 1024 + node ID).",
        epochs,
    )
    yield from _family(
        "nsq_topic_replication_lag_messages",
        "gauge",
        "Messages the primary accepted that the member has not acknowledged.",
        lags,
    )
    yield from _family(
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
        yield from _family(name, kind, help_text, _channel_samples(snapshot, field))
    for name, kind, help_text, field in (*_BOUNDED_CHANNEL_METRICS, *_CHANNEL_OPTIONAL_METRICS):
        samples = [
            (_channel_labels(topic, channel), _number(channel[field]))
            for topic in _topics(snapshot)
            for channel in _channels(topic)
            if field in channel
        ]
        if samples:
            yield from _family(name, kind, help_text, samples)
    yield from _family(
        "nsq_channel_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency quantiles (publish to FIN) over the window.",
        _channel_latency_samples(snapshot),
    )


def _memory_lines(memory: Mapping[str, Any]) -> Iterator[str]:
    for key, (name, kind, help_text) in _MEMORY_METRICS.items():
        if key in memory:
            yield from _family(name, kind, help_text, [((), _number(memory[key]))])


_PROCESS_GAUGES = (
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds."),
    ("process_resident_memory_bytes", "Resident memory size in bytes."),
    ("process_virtual_memory_bytes", "Virtual memory size in bytes."),
    ("process_open_fds", "Number of open file descriptors."),
    ("process_max_fds", "Maximum number of open file descriptors."),
)


def _process_lines(process: ProcessMetrics) -> Iterator[str]:
    yield from _family(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        [((), process.cpu_seconds)],
    )
    values = (
        process.start_time_seconds,
        process.resident_memory_bytes,
        process.virtual_memory_bytes,
        process.open_fds,
        process.max_fds,
    )
    for (name, help_text), value in zip(_PROCESS_GAUGES, values, strict=True):
        if value is not None:
            yield from _family(name, "gauge", help_text, [((), value)])


def render_prometheus(snapshot: Snapshot, process: ProcessMetrics | None = None) -> str:
    """`snapshot` (the `/stats` JSON shape) in the Prometheus text format 0.0.4, followed by the
    ``process_`` metrics of `process` (read from this process when ``None``)."""
    lines = [
        *_daemon_lines(snapshot),
        *_topic_lines(snapshot),
        *_channel_lines(snapshot),
        *_memory_lines(snapshot.get("memory") or {}),
        *_process_lines(process if process is not None else read_process_metrics()),
    ]
    return "\n".join(lines) + "\n"
