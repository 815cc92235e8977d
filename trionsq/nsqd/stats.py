"""nsqd's statistics: one snapshot of the daemon in the exact shape of NSQ's `/stats?format=json`
(docs/protocol.md §4.1), and NSQ's human text rendering of it. The HTTP API, statsd and
Prometheus all read `snapshot`.

`snapshot` walks the daemon once, reading counters the daemon keeps anyway; it allocates one
dict per topic, channel and client, and sorts topic and channel names, so calling it every
second on a daemon with thousands of topics and clients is cheap. With e2e percentiles enabled
it also sorts each channel's latency buckets (see trionsq.nsqd.e2e_latency).

``memory`` maps Go's runtime.MemStats to the closest CPython figures (`memory_stats`):

- ``heap_objects``: memory blocks allocated by the interpreter (``sys.getallocatedblocks``);
- ``heap_in_use_bytes``: the process's resident set size (``/proc/self/statm``; the peak RSS
  from ``getrusage`` where /proc is missing);
- ``heap_idle_bytes``, ``heap_released_bytes``, ``next_gc_bytes``: 0 (CPython's allocator does
  not expose idle or released arenas, and its collector is triggered by allocation counts, not
  a heap size);
- ``gc_pause_usec_100/99/95``: percentiles, in µs, of the durations of the last 256 garbage
  collections (all generations; timed by a ``gc.callbacks`` hook installed when this module is
  imported), computed as Go nsqd does;
- ``gc_total_runs``: collections so far, all generations (``gc.get_stats``).
"""

from __future__ import annotations

import gc
import math
import os
import resource
import sys
import time
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import NSQ_VERSION
from ..net.transport import tls_stats
from ..version import version_string
from .bounds import stats_fields
from .e2e_latency import disabled_result, merged_result

if TYPE_CHECKING:
    from .channel import Channel
    from .client_v2 import ClientV2
    from .nsqd import NSQD
    from .topic import Topic

__all__ = ["client_stats", "format_text", "go_duration", "memory_stats", "snapshot"]

#: A `/stats?format=json` snapshot (or one of its objects), JSON-ready.
Stats = dict[str, Any]


def snapshot(
    nsqd: NSQD,
    topic: str | None = None,
    channel: str | None = None,
    include_clients: bool = True,
    include_mem: bool = True,
) -> Stats:
    """The `/stats?format=json` object.

    `topic` / `channel` filter as nsqd does (empty or None: no filter): a topic that does not
    exist gives ``topics: null``; with a channel filter, topics without that channel are left
    out. Without clients, ``clients`` and ``producers`` are null (as ``producers`` also is when
    nobody has published); without memory, ``memory`` is absent.
    """
    topic_filter = topic or ""
    result: Stats = {
        "version": NSQ_VERSION,
        "health": str(getattr(nsqd, "health", "OK")),
        "start_time": int(nsqd.start_time),
        "topics": _topics_stats(nsqd, topic_filter, channel or "", include_clients),
    }
    if include_mem:
        result["memory"] = memory_stats()
    result["producers"] = _producers_stats(nsqd, topic_filter) if include_clients else None
    return result


def _topics_stats(
    nsqd: NSQD, topic_filter: str, channel_filter: str, include_clients: bool
) -> list[Stats] | None:
    if topic_filter:
        found = nsqd.topics.get(topic_filter)
        if found is None:
            return None
        topics: Iterable[Topic] = [found]
    else:
        topics = [nsqd.topics[name] for name in sorted(nsqd.topics)]
    stats = []
    for topic in topics:
        if channel_filter:
            only = topic.channels.get(channel_filter)
            if only is None:
                continue
            channels = [only]
        else:
            channels = [topic.channels[name] for name in sorted(topic.channels)]
        clients_filter = topic_filter if include_clients else None
        stats.append(_topic_stats(topic, [_channel_stats(c, clients_filter) for c in channels]))
    return stats


def _topic_stats(topic: Topic, channels: list[Stats]) -> Stats:
    stats = _topic_fields(topic, channels)
    # A replicated topic's role, epoch and lag (replication/topic.py): only those have it.
    replication = topic.replication_stats()
    if replication is not None:
        stats["replication"] = replication
    return stats


def _topic_fields(topic: Topic, channels: list[Stats]) -> Stats:
    return {
        "topic_name": topic.name,
        "channels": channels,
        # DPUB messages wait outside the memory queue until a channel takes them; nsqd counts
        # them in the topic's depth.
        "depth": topic.depth + len(topic.deferred),
        "backend_depth": topic.backend.depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        # Like nsqd, a topic's latency covers all its channels, whatever the channel filter.
        "e2e_processing_latency": merged_result(c.e2e for c in topic.channels.values()),
        # Bounded queues (beyond NSQ): only for a topic that has limits or used them.
        **stats_fields(topic),
        **_corrupt_fields(topic.backend),
    }


def _corrupt_fields(backend: object) -> Stats:
    """Beyond NSQ, only once it happened: records of the disk queue that failed their
    checksum (trionsq/diskqueue/checksums.py) and were moved to ``<name>.diskqueue.bad``."""
    count = getattr(backend, "corrupt_records", 0)
    return {"corrupt_count": count} if count else {}


def _channel_stats(channel: Channel, clients_topic_filter: str | None) -> Stats:
    """`clients_topic_filter` None: clients not included; else the topic filter for the
    clients' pub_counts."""
    clients = (
        None
        if clients_topic_filter is None
        else [client_stats(c, clients_topic_filter) for c in channel.clients]
    )
    stats: Stats = {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": channel.backend.depth,
        "in_flight_count": channel.in_flight_count,
        "deferred_count": len(channel.deferred),
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(channel.clients),
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": (
            disabled_result() if channel.e2e is None else channel.e2e.result()
        ),
        **stats_fields(channel),
        **_corrupt_fields(channel.backend),
    }
    screen = channel.screen
    if screen is not None or channel.dead_letter_count or channel.expired_count:
        # Beyond NSQ (dead_letter.py), only on a channel with a limit or a count.
        stats["dead_letter_count"] = channel.dead_letter_count
        stats["expired_count"] = channel.expired_count
        stats["max_attempts"] = 0 if screen is None else screen.max_attempts
        stats["message_ttl"] = 0 if screen is None else screen.ttl_ns
        dead_letter_topic = None if screen is None else screen.dead_letter_topic
        stats["dead_letter_topic"] = dead_letter_topic or ""
    return stats


def _producers_stats(nsqd: NSQD, topic_filter: str) -> list[Stats] | None:
    # nsqd collects producers into a nil slice: none yet serializes as null, not [].
    producers = [client_stats(c, topic_filter) for c in nsqd.producers.values()]
    return producers or None


def _auth_stats(client: ClientV2) -> Stats:
    """Go's omitempty auth fields: present once the client has authorizations."""
    state = client.auth_state
    if state is None or not state.authorizations:
        return {}
    stats: Stats = {"authed": True}
    if state.identity:
        stats["auth_identity"] = state.identity
    if state.identity_url:
        stats["auth_identity_url"] = state.identity_url
    return stats


def client_stats(client: ClientV2, topic_filter: str = "") -> Stats:
    """ClientV2Stats of one connection; `topic_filter` restricts its pub_counts."""
    stats: Stats = {
        "client_id": client.client_id,
        "hostname": client.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": client.state,
        "ready_count": client.rdy,
        "in_flight_count": len(client.in_flight),
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_ts,
        "sample_rate": client.sample_rate,
        "deflate": client.deflate,
        "snappy": client.snappy,
        "user_agent": client.user_agent,
        **_auth_stats(client),
        "topology_zone": "",
        "topology_region": "",
    }
    pub_counts = _pub_counts(client.pub_counts, topic_filter)
    if pub_counts:
        stats["pub_counts"] = pub_counts
    stats.update(tls_stats(client.tls))
    return stats


def _pub_counts(counts: Mapping[str, int], topic_filter: str) -> list[Stats]:
    """NSQ's quirk: at most one entry (its loop breaks after the first topic it keeps); with a
    topic filter, that topic's entry if the client published to it."""
    if topic_filter:
        count = counts.get(topic_filter)
        return [] if count is None else [{"topic": topic_filter, "count": count}]
    for topic, count in counts.items():
        return [{"topic": topic, "count": count}]
    return []


# -- memory -------------------------------------------------------------------------------

#: How many recent GC pauses nsqd's percentiles cover (Go's MemStats.PauseNs ring).
_GC_PAUSES_KEPT = 256
_gc_pauses_ns: deque[int] = deque(maxlen=_GC_PAUSES_KEPT)
_gc_started_ns = 0


def _time_gc(phase: str, info: Mapping[str, Any]) -> None:
    global _gc_started_ns
    if phase == "start":
        _gc_started_ns = time.perf_counter_ns()
    else:
        _gc_pauses_ns.append(time.perf_counter_ns() - _gc_started_ns)


if _time_gc not in gc.callbacks:
    gc.callbacks.append(_time_gc)


def memory_stats() -> Stats:
    """The `memory` object of `/stats` (see the module docstring for what each figure is)."""
    pauses = sorted(_gc_pauses_ns)
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": _resident_bytes(),
        "heap_released_bytes": 0,
        "gc_pause_usec_100": _percentile(100.0, pauses) // 1000,
        "gc_pause_usec_99": _percentile(99.0, pauses) // 1000,
        "gc_pause_usec_95": _percentile(95.0, pauses) // 1000,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(generation["collections"] for generation in gc.get_stats()),
    }


def _percentile(percent: float, ascending: list[int]) -> int:
    """nsqd's GC pause percentile: the element at floor(percent% * n + 0.5), capped at n - 1."""
    if not ascending:
        return 0
    index = min(math.floor(percent / 100.0 * len(ascending) + 0.5), len(ascending) - 1)
    return ascending[index]


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


# -- the text format ----------------------------------------------------------------------

#: The `memory` keys of a snapshot, in Go's order.
MEMORY_KEYS = (
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
    "gc_total_runs",
)


def format_text(stats: Stats, now: float | None = None) -> str:
    """`/stats` without ``format=json``: nsqd's text rendering of a snapshot, byte for byte
    (but the build in the first line). `now` (unix seconds) is for the uptime and the clients'
    connected durations."""
    if now is None:
        now = time.time()
    start = stats["start_time"]
    # Written as nsqd's printStats writes it, chunk for chunk: the blank lines fall out of it.
    out = [
        f"{version_string('nsqd')}\n",
        f"start_time {_rfc3339(start)}\n",
        f"uptime {go_duration(round((now - start) * 1e9))}\n",
        f"\nHealth: {stats['health']}\n",
    ]
    memory = stats.get("memory")
    if memory is not None:
        out.append("\nMemory:\n")
        out += [f"   {key:<25}\t{memory[key]}\n" for key in MEMORY_KEYS]
    topics = stats["topics"]
    out.append("\nTopics:" if topics else "\nTopics: None\n")
    for topic in topics or ():
        out += _topic_chunks(topic, now)
    producers = stats["producers"]
    if not producers:
        out.append("\nProducers: None\n")
    else:
        out.append("\nProducers:\n")
        out += [f"   {_client_line(p, now)}\n" for p in producers]
    return "".join(out)


def _topic_chunks(topic: Stats, now: float) -> list[str]:
    paused = "*P " if topic["paused"] else "   "
    out = [
        f"\n{paused}[{topic['topic_name']:<15}] depth: {topic['depth']:<5} "
        f"be-depth: {topic['backend_depth']:<5} msgs: {topic['message_count']:<8} "
        f"e2e%: {_latency_text(topic['e2e_processing_latency'])}\n"
    ]
    for channel in topic["channels"]:
        paused = "   *P " if channel["paused"] else "      "
        out.append(
            f"{paused}[{channel['channel_name']:<25}] depth: {channel['depth']:<5} "
            f"be-depth: {channel['backend_depth']:<5} inflt: {channel['in_flight_count']:<4} "
            f"def: {channel['deferred_count']:<4} re-q: {channel['requeue_count']:<5} "
            f"timeout: {channel['timeout_count']:<5} msgs: {channel['message_count']:<8} "
            f"e2e%: {_latency_text(channel['e2e_processing_latency'])}\n"
        )
        out += [f"        {_client_line(c, now)}\n" for c in channel["clients"] or ()]
    return out


def _client_line(client: Stats, now: float) -> str:
    """ClientV2Stats.String(): a producer line when it has pub_counts, else a consumer line."""
    name = f"{client['hostname']}:{_port(client['remote_address'])} {client['user_agent']}"
    connected = go_duration(int(now - client["connect_ts"]) * 1_000_000_000)
    pub_counts = client.get("pub_counts")
    if pub_counts:
        total = sum(p["count"] for p in pub_counts)
        topics = ",".join(f"{p['topic']}={p['count']}" for p in pub_counts)
        return (
            f"[{client['version']} {name:<21}] msgs: {total:<8} topics: {topics} "
            f"connected: {connected}"
        )
    return (
        f"[{client['version']} {name:<21}] state: {client['state']} "
        f"inflt: {client['in_flight_count']:<4} rdy: {client['ready_count']:<4} "
        f"fin: {client['finish_count']:<8} re-q: {client['requeue_count']:<8} "
        f"msgs: {client['message_count']:<8} connected: {connected}"
    )


def _latency_text(latency: Stats) -> str:
    """quantile.Result.String(): the values only, human-scaled, comma-separated."""
    return ", ".join(_human_ns(p["value"]) for p in latency["percentiles"] or ())


def _human_ns(value: float) -> str:
    """Go's stringy.NanoSecondToHuman."""
    for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value > scale:
            return f"{value / scale:.1f}{suffix}"
    return f"{value:.1f}ns"


def _port(address: str) -> str:
    """The port of net.SplitHostPort(address), "" where Go fails (in-memory or unix peers)."""
    host, sep, port = address.rpartition(":")
    if not sep:
        return ""
    if host.startswith("["):
        return port if host.endswith("]") else ""
    return "" if ":" in host else port


def _rfc3339(unix_seconds: int) -> str:
    """Go's time.RFC3339 in the local zone ("Z" for UTC)."""
    local = datetime.fromtimestamp(unix_seconds).astimezone()
    text = local.isoformat(timespec="seconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def go_duration(nanoseconds: int) -> str:
    """Go's time.Duration.String(): "1h2m3.5s", "1m0s", "250ms", "1.5µs", "0s"."""
    sign = "-" if nanoseconds < 0 else ""
    ns = abs(nanoseconds)
    if ns < 1_000_000_000:
        if ns == 0:
            return "0s"
        if ns < 1_000:
            return f"{sign}{ns}ns"
        if ns < 1_000_000:
            return f"{sign}{_decimal(ns, 3)}µs"
        return f"{sign}{_decimal(ns, 6)}ms"
    seconds, fraction = divmod(ns, 1_000_000_000)
    text = f"{_decimal(seconds % 60 * 1_000_000_000 + fraction, 9)}s"
    minutes = seconds // 60
    if minutes:
        text = f"{minutes % 60}m{text}"
        if minutes >= 60:
            text = f"{minutes // 60}h{text}"
    return sign + text


def _decimal(value: int, digits: int) -> str:
    """value / 10**digits without trailing zeros (Go's fmtFrac + fmtInt)."""
    whole, fraction = divmod(value, 10**digits)
    decimals = f"{fraction:0{digits}d}".rstrip("0")
    return f"{whole}.{decimals}" if decimals else str(whole)
