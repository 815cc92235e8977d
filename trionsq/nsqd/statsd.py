"""nsqd's statsd push: the lines NSQ sends for a stats snapshot (counters as deltas since the
previous push, gauges, e2e percentiles, memory stats), and beyond NSQ, in its naming, the
opt-in features' (bounded queues, dead letters, TTL, checksums, replication) for the topics
and channels that have them; their packing into UDP datagrams, the ``%s`` host expansion of
``--statsd-prefix`` and the Trio loop that pushes every interval."""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import trio

from ..net.addresses import split_host_port
from .options import NSQDOptions
from .stats import MEMORY_KEYS

__all__ = [
    "expand_statsd_prefix",
    "pack_statsd_packets",
    "render_statsd_lines",
    "statsd_host_key",
    "statsd_loop",
]

log = logging.getLogger("trionsq.nsqd")

#: A `/stats?format=json` snapshot (docs/protocol.md §4.1), as built by `trionsq.nsqd.stats`.
Snapshot = Mapping[str, Any]

_EPHEMERAL_SUFFIX = "#ephemeral"
# Go dials the statsd address with a 1 s timeout and spreads the datagrams over interval - 1 s.
_DIAL_TIMEOUT = 1.0
_SPREAD_MARGIN = 1.0

# Memory gauges in the order Go sends them; `gc_total_runs` goes out last, as the counter
# `mem.gc_runs`.
_MEM_GAUGES = tuple(key for key in MEMORY_KEYS if key != "gc_total_runs")


# --- prefix ------------------------------------------------------------------------------


def statsd_host_key(host_port: str) -> str:
    """Go's ``statsd.HostKey``: every ``.`` and ``:`` of ``host:port`` becomes ``_``."""
    return host_port.replace(".", "_").replace(":", "_")


def expand_statsd_prefix(prefix: str, broadcast_address: str, http_port: int) -> str:
    """``--statsd-prefix`` as Go's ``nsqd.New`` rewrites it: every ``%s`` becomes the host key
    of ``broadcast_address:http_port`` (IPv6 hosts bracketed, as ``net.JoinHostPort`` does) and
    a trailing ``.`` is added if missing. An empty prefix stays empty."""
    if not prefix:
        return ""
    host = f"[{broadcast_address}]" if ":" in broadcast_address else broadcast_address
    expanded = prefix.replace("%s", statsd_host_key(f"{host}:{http_port}"))
    return expanded if expanded.endswith(".") else expanded + "."


# --- rendering ---------------------------------------------------------------------------


def _counter(prefix: str, stat: str, delta: int) -> str:
    return f"{prefix}{stat}:{delta}|c"


def _gauge(prefix: str, stat: str, value: int) -> str:
    return f"{prefix}{stat}:{value}|g"


def _topics(snapshot: Snapshot | None) -> Sequence[Mapping[str, Any]]:
    return (snapshot or {}).get("topics") or ()


def _channels(topic: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return topic.get("channels") or ()


def _find(items: Iterable[Mapping[str, Any]], key: str, name: str) -> Mapping[str, Any]:
    """The item called `name` in the previous snapshot, or an empty one (all counters 0)."""
    return next((item for item in items if item.get(key) == name), {})


def _delta(current: Mapping[str, Any], previous: Mapping[str, Any], field: str) -> int:
    # Go subtracts uint64s and casts to int64, so a counter that went backwards (topic deleted
    # and recreated) is sent as a negative delta, not clamped.
    return int(current.get(field, 0)) - int(previous.get(field, 0))


def _percentile_lines(prefix: str, stat_base: str, stats: Mapping[str, Any]) -> Iterator[str]:
    latency = stats.get("e2e_processing_latency") or {}
    for item in latency.get("percentiles") or ():
        # `%.0f` of quantile x 100 (0.99 -> 99, 0.999 -> 100); the ns value truncated to int
        name = f"{stat_base}.e2e_processing_latency_{float(item['quantile']) * 100.0:.0f}"
        yield _gauge(prefix, name, math.trunc(float(item["value"])))


# Beyond NSQ, in NSQ's naming: sent only for topics and channels whose stats have the field
# (those with the feature on), so that a daemon without them sends exactly Go's lines.
# (snapshot field, statsd stat, counter?)
_OPTIONAL_STATS = (
    ("dropped_count", "dropped_count", True),  # bounded queues: drop-oldest
    ("rejected_count", "rejected_count", True),  # bounded queues: refused when full
    ("backend_bytes", "backend_bytes", False),
    ("max_depth", "max_depth", False),
    ("max_bytes", "max_bytes", False),
    ("dead_letter_count", "dead_letter_count", True),  # --max-attempts, TTL
    ("expired_count", "expired_count", True),  # --message-ttl
    ("corrupt_count", "corrupt_count", True),  # disk-queue records failing their checksum
)
_REPLICATION_ROLES = ("primary", "replica", "candidate")


def _optional_lines(
    prefix: str, base: str, stats: Mapping[str, Any], last: Mapping[str, Any]
) -> Iterator[str]:
    for field, stat, is_counter in _OPTIONAL_STATS:
        if field not in stats:
            continue
        if is_counter:
            yield _counter(prefix, f"{base}.{stat}", _delta(stats, last, field))
        else:
            yield _gauge(prefix, f"{base}.{stat}", int(stats[field]))


def _replication_lines(
    prefix: str, base: str, topic: Mapping[str, Any], last: Mapping[str, Any]
) -> Iterator[str]:
    """A replicated topic: this node's role (a 0/1 gauge per role), epoch, failovers (a
    counter) and each member's lag in messages (members named as statsd names hosts)."""
    info = topic.get("replication")
    if not info:
        return
    base = f"{base}.replication"
    for role in _REPLICATION_ROLES:
        yield _gauge(prefix, f"{base}.role.{role}", int(info.get("role") == role))
    yield _gauge(prefix, f"{base}.epoch", int(info.get("epoch", 0)))
    previous = last.get("replication") or {}
    yield _counter(prefix, f"{base}.failovers", _delta(info, previous, "failovers"))
    for member in info.get("members") or ():
        if member.get("lag_messages") is not None:
            member_key = statsd_host_key(str(member["address"]))
            yield _gauge(prefix, f"{base}.lag_messages.{member_key}", int(member["lag_messages"]))


def _channel_lines(
    prefix: str, topic_name: str, channel: Mapping[str, Any], last: Mapping[str, Any]
) -> Iterator[str]:
    base = f"topic.{topic_name}.channel.{channel['channel_name']}"
    yield _counter(prefix, f"{base}.message_count", _delta(channel, last, "message_count"))
    yield _gauge(prefix, f"{base}.depth", int(channel.get("depth", 0)))
    yield _gauge(prefix, f"{base}.backend_depth", int(channel.get("backend_depth", 0)))
    yield _gauge(prefix, f"{base}.in_flight_count", int(channel.get("in_flight_count", 0)))
    yield _gauge(prefix, f"{base}.deferred_count", int(channel.get("deferred_count", 0)))
    yield _counter(prefix, f"{base}.requeue_count", _delta(channel, last, "requeue_count"))
    yield _counter(prefix, f"{base}.timeout_count", _delta(channel, last, "timeout_count"))
    yield _gauge(prefix, f"{base}.clients", int(channel.get("client_count", 0)))
    yield from _percentile_lines(prefix, base, channel)
    yield from _optional_lines(prefix, base, channel, last)


def _topic_lines(
    prefix: str, topic: Mapping[str, Any], last: Mapping[str, Any], exclude_ephemeral: bool
) -> Iterator[str]:
    name = topic["topic_name"]
    base = f"topic.{name}"
    yield _counter(prefix, f"{base}.message_count", _delta(topic, last, "message_count"))
    yield _counter(prefix, f"{base}.message_bytes", _delta(topic, last, "message_bytes"))
    yield _gauge(prefix, f"{base}.depth", int(topic.get("depth", 0)))
    yield _gauge(prefix, f"{base}.backend_depth", int(topic.get("backend_depth", 0)))
    yield from _percentile_lines(prefix, base, topic)
    yield from _optional_lines(prefix, base, topic, last)
    yield from _replication_lines(prefix, base, topic, last)
    for channel in _channels(topic):
        channel_name = channel["channel_name"]
        if exclude_ephemeral and channel_name.endswith(_EPHEMERAL_SUFFIX):
            continue
        last_channel = _find(_channels(last), "channel_name", channel_name)
        yield from _channel_lines(prefix, name, channel, last_channel)


def _memory_lines(prefix: str, memory: Mapping[str, Any], last: Mapping[str, Any]) -> Iterator[str]:
    for field in _MEM_GAUGES:
        yield _gauge(prefix, f"mem.{field}", int(memory.get(field, 0)))
    yield _counter(prefix, "mem.gc_runs", _delta(memory, last, "gc_total_runs"))


def render_statsd_lines(
    previous: Snapshot | None, current: Snapshot, prefix: str, options: NSQDOptions
) -> list[str]:
    """The statsd lines (no trailing newline) nsqd sends for `current`, in Go's order.

    Counters are deltas against `previous` (``None`` on the first push: totals); a topic or
    channel missing from `previous` counts from 0. `prefix` is already expanded (see
    `expand_statsd_prefix`). Honours ``statsd_exclude_ephemeral`` and ``statsd_mem_stats``;
    memory stats come from the snapshot's ``memory`` object and are skipped when it is absent.
    """
    exclude_ephemeral = options.statsd_exclude_ephemeral
    lines: list[str] = []
    for topic in _topics(current):
        if exclude_ephemeral and topic["topic_name"].endswith(_EPHEMERAL_SUFFIX):
            continue
        last_topic = _find(_topics(previous), "topic_name", topic["topic_name"])
        lines.extend(_topic_lines(prefix, topic, last_topic, exclude_ephemeral))
    memory = current.get("memory")
    if options.statsd_mem_stats and memory is not None:
        last_memory = (previous or {}).get("memory") or {}
        lines.extend(_memory_lines(prefix, memory, last_memory))
    return lines


# --- packing -----------------------------------------------------------------------------


def pack_statsd_packets(lines: Iterable[str], packet_size: int) -> list[bytes]:
    """Pack newline-terminated `lines` into datagrams of at most `packet_size` bytes, never
    splitting a line (Go's BoundaryBufferedWriter over a bufio.Writer). A single line longer
    than `packet_size` goes out alone in an oversized datagram, as bufio writes it through."""
    packets: list[bytes] = []
    buffer = bytearray()
    for line in lines:
        data = line.encode() + b"\n"
        if buffer and len(buffer) + len(data) > packet_size:
            packets.append(bytes(buffer))
            buffer.clear()
        if len(data) > packet_size:
            packets.append(data)
        else:
            buffer += data
    if buffer:
        packets.append(bytes(buffer))
    return packets


# --- the loop ----------------------------------------------------------------------------


async def _dial_udp(address: str) -> trio.socket.SocketType:
    """A UDP socket connected to `address` (resolution bounded by Go's 1 s dial timeout)."""
    host, port = split_host_port(address)
    with trio.fail_after(_DIAL_TIMEOUT):
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    family, kind, proto, _, sockaddr = infos[0]
    sock = trio.socket.socket(family, kind, proto)
    try:
        await sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


async def _send_spread(sock: trio.socket.SocketType, packets: list[bytes], spread: float) -> None:
    """Send `packets` evenly over `spread` seconds, as Go's SpreadWriter does; a failed send
    is logged once per push and the rest still go out (Go ignores these errors)."""
    pause = spread / len(packets) if packets else spread
    failed = False
    for packet in packets:
        try:
            await sock.send(packet)
        except OSError as exc:
            if not failed:
                log.error("STATSD: failed to send to statsd - %s", exc)
            failed = True
        await trio.sleep(pause)
    if not packets:
        await trio.sleep(spread)


async def _push(
    get_snapshot: Callable[[], Snapshot],
    previous: Snapshot | None,
    prefix: str,
    options: NSQDOptions,
) -> Snapshot | None:
    """One push; returns the snapshot the next push diffs against."""
    address = options.statsd_address
    try:
        sock = await _dial_udp(address)
    except (OSError, ValueError, trio.TooSlowError):
        # like Go, skip this push without taking a snapshot: the next deltas cover both
        log.error("failed to create UDP socket to statsd(%s)", address)  # Go's words
        return previous
    with sock:
        log.info("STATSD: pushing stats to %s", address)
        current = get_snapshot()
        lines = render_statsd_lines(previous, current, prefix, options)
        packets = pack_statsd_packets(lines, options.statsd_udp_packet_size)
        spread = max(options.statsd_interval - _SPREAD_MARGIN, 0.0)
        await _send_spread(sock, packets, spread)
    return current


def _next_deadline(deadline: float, interval: float, now: float) -> float:
    # a ticker: keep to the grid and drop the ticks a slow push overran
    deadline += interval
    while deadline <= now:
        deadline += interval
    return deadline


async def statsd_loop(
    get_snapshot: Callable[[], Snapshot],
    options: NSQDOptions,
    *,
    http_port: int | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Push `get_snapshot()` to ``options.statsd_address`` every ``statsd_interval`` seconds
    (first push one interval after start, as Go's ticker) until cancelled.

    `get_snapshot` should return the `/stats` JSON shape with ``memory`` included (clients may
    be left out). The prefix's ``%s`` uses ``options.broadcast_http_port``, or `http_port` (the
    port actually listened on) when that option is 0. Errors are logged, never raised.
    """
    interval = options.statsd_interval
    port = options.broadcast_http_port or http_port or 0
    prefix = expand_statsd_prefix(options.statsd_prefix, options.broadcast_address, port)
    task_status.started()
    if interval <= 0:
        log.error("STATSD: statsd-interval must be positive, got %ss; not pushing", interval)
        return
    previous: Snapshot | None = None
    deadline = trio.current_time() + interval
    while True:
        await trio.sleep_until(deadline)
        try:
            previous = await _push(get_snapshot, previous, prefix, options)
        except Exception:
            log.exception("STATSD: push failed")
        deadline = _next_deadline(deadline, interval, trio.current_time())
