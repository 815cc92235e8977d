"""Pure aggregation of nsqlookupd and nsqd answers into nsqadmin's JSON shapes (Go's
``internal/clusterinfo`` types and merges): producers unioned over lookupds, per-node and
cluster-wide topic / channel / client stats, e2e latency percentiles, the counter, and the
per-topic summary of ``/api/topics?stats=true``. No I/O: every function takes decoded JSON.

Objects are plain dicts built in Go's struct field order (so the JSON keys come out in Go's
order); lists that Go may leave ``null`` (``nodes``, ``channels``, ``clients``, ``percentiles``)
are always lists here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "Json",
    "NodeStats",
    "aggregate_channel",
    "aggregate_topic",
    "channel_stats",
    "client_stats",
    "collect_stats",
    "counter_stats",
    "e2e_add",
    "e2e_from_nsqd",
    "join_host_port",
    "lookupd_producer",
    "nsqd_producer",
    "parse_semver",
    "producer_http_address",
    "producer_tcp_address",
    "sort_clients_by_node_topology",
    "topic_stats",
    "topics_summary",
    "union_lookupd_producers",
    "union_topic_producers",
    "unreachable_producer",
]

Json = dict[str, Any]
#: One nsqd's decoded ``/stats?format=json`` answer with the producer it came from.
NodeStats = tuple[Json, Json]


# -- small helpers --------------------------------------------------------------------------


def _int(value: Any) -> int:
    """A JSON number as Go's int64 field would decode it (missing/null: 0)."""
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _bool(value: Any) -> bool:
    return value is True


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def join_host_port(host: str, port: int | str) -> str:
    """Go's net.JoinHostPort: IPv6 hosts in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def parse_semver(text: str) -> tuple[Any, ...]:
    """A sortable key of a semantic version; anything unparsable is ``0.0.0`` (as Go's
    nsqadmin does). A pre-release sorts before its release, numeric identifiers before
    alphanumeric ones."""
    m = _SEMVER.fullmatch(text or "")
    if m is None:
        return (0, 0, 0, 1, ())
    pre = m.group(4)
    identifiers = tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in (pre or "").split(".")
    )
    return (
        int(m.group(1)),
        int(m.group(2)),
        int(m.group(3)),
        0 if pre else 1,
        identifiers if pre else (),
    )


# -- producers ------------------------------------------------------------------------------


def producer_http_address(producer: Mapping[str, Any]) -> str:
    """``broadcast_address:http_port`` (the node's name in nsqadmin's URLs)."""
    return join_host_port(_str(producer.get("broadcast_address")), _int(producer.get("http_port")))


def producer_tcp_address(producer: Mapping[str, Any]) -> str:
    return join_host_port(_str(producer.get("broadcast_address")), _int(producer.get("tcp_port")))


def _producer(
    *,
    remote_address: str,
    hostname: str,
    broadcast_address: str,
    tcp_port: int,
    http_port: int,
    version: str,
    topology_zone: str,
    topology_region: str,
    topics: list[Json],
) -> Json:
    """Go's clusterinfo.Producer in its field order (omitempty topology fields)."""
    producer: Json = {
        "remote_addresses": [],
        "remote_address": remote_address,
        "hostname": hostname,
        "broadcast_address": broadcast_address,
        "tcp_port": tcp_port,
        "http_port": http_port,
        "version": version,
    }
    if topology_zone:
        producer["topology_zone"] = topology_zone
    if topology_region:
        producer["topology_region"] = topology_region
    producer["topics"] = topics
    producer["out_of_date"] = False
    producer["unreachable"] = False
    return producer


def lookupd_producer(raw: Mapping[str, Any]) -> Json:
    """A producer as nsqlookupd's ``/nodes`` or ``/lookup`` lists it (``topics`` paired with
    ``tombstones``)."""
    names = [_str(t) for t in _list(raw.get("topics"))]
    tombstones = _list(raw.get("tombstones"))
    topics = [
        {"topic": name, "tombstoned": _bool(tombstones[i]) if i < len(tombstones) else False}
        for i, name in enumerate(names)
    ]
    return _producer(
        remote_address=_str(raw.get("remote_address")),
        hostname=_str(raw.get("hostname")),
        broadcast_address=_str(raw.get("broadcast_address")),
        tcp_port=_int(raw.get("tcp_port")),
        http_port=_int(raw.get("http_port")),
        version=_str(raw.get("version")),
        topology_zone=_str(raw.get("topology_zone")),
        topology_region=_str(raw.get("topology_region")),
        topics=topics,
    )


def nsqd_producer(address: str, info: Mapping[str, Any], topic_names: Iterable[str]) -> Json:
    """A producer built from an nsqd's ``/info`` and the topic names of its ``/stats``; a
    missing broadcast address / hostname falls back to `address` (Go's backwards
    compatibility)."""
    broadcast = _str(info.get("broadcast_address"))
    http_port = _int(info.get("http_port"))
    hostname = _str(info.get("hostname"))
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not broadcast:
        broadcast = host
        http_port = int(port) if port.isdigit() else 0
    if not hostname:
        hostname = host
    return _producer(
        remote_address="",
        hostname=hostname,
        broadcast_address=broadcast,
        tcp_port=_int(info.get("tcp_port")),
        http_port=http_port,
        version=_str(info.get("version")),
        topology_zone=_str(info.get("topology_zone")),
        topology_region=_str(info.get("topology_region")),
        topics=[{"topic": name, "tombstoned": False} for name in topic_names],
    )


def unreachable_producer(address: str) -> Json:
    """An ``--nsqd-http-address`` node that did not answer (extension (c)): listed under its
    address, ``version: ""``, ``unreachable: true``."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    producer = _producer(
        remote_address="",
        hostname=host,
        broadcast_address=host,
        tcp_port=0,
        http_port=int(port) if port.isdigit() else 0,
        version="",
        topology_zone="",
        topology_region="",
        topics=[],
    )
    producer["unreachable"] = True
    return producer


def union_lookupd_producers(answers: Sequence[tuple[str, Sequence[Any]]]) -> list[Json]:
    """Go's GetLookupdProducers merge: `answers` are ``(lookupd address, /nodes producers)``
    of the lookupds that answered. Producers are keyed by TCP address, each collects
    ``"<lookupd>/<remote_address>"`` in ``remote_addresses``; those older than the newest
    version are ``out_of_date``; sorted by hostname."""
    by_address: dict[str, Json] = {}
    for lookupd, raw_producers in answers:
        for raw in raw_producers:
            if not isinstance(raw, Mapping):
                continue
            producer = lookupd_producer(raw)
            key = producer_tcp_address(producer)
            known = by_address.get(key)
            if known is None:
                producer["topics"].sort(key=lambda t: t["topic"])
                by_address[key] = known = producer
            remote = producer["remote_address"] or "N/A"
            known["remote_addresses"].append(f"{lookupd}/{remote}")
    producers = list(by_address.values())
    if producers:
        newest = max(parse_semver(p["version"]) for p in producers)
        for p in producers:
            p["out_of_date"] = parse_semver(p["version"]) < newest
    producers.sort(key=lambda p: p["hostname"])
    return producers


def union_topic_producers(answers: Sequence[Sequence[Any]]) -> list[Json]:
    """Go's GetLookupdTopicProducers merge: the ``/lookup`` producers of every lookupd that
    answered, first occurrence of each HTTP address kept."""
    seen: set[str] = set()
    producers: list[Json] = []
    for raw_producers in answers:
        for raw in raw_producers:
            if not isinstance(raw, Mapping):
                continue
            producer = lookupd_producer(raw)
            key = producer_http_address(producer)
            if key not in seen:
                seen.add(key)
                producers.append(producer)
    return producers


# -- e2e processing latency -----------------------------------------------------------------


def e2e_from_nsqd(raw: Any) -> Json:
    """One node's ``e2e_processing_latency`` as Go's nsqadmin decodes it: each percentile's
    ``value`` copied into ``min``, ``max`` and ``average``, ``count`` the node's count."""
    raw = raw if isinstance(raw, Mapping) else {}
    count = _int(raw.get("count"))
    percentiles = []
    for p in _list(raw.get("percentiles")):
        if not isinstance(p, Mapping):
            continue
        entry = {k: v for k, v in p.items() if isinstance(v, int | float)}
        value = entry.get("value", 0)
        entry.update(min=value, max=value, average=value, count=count)
        percentiles.append(dict(sorted(entry.items())))
    return {
        "count": count,
        "percentiles": percentiles,
        "topic": _str(raw.get("topic")),
        "channel": _str(raw.get("channel")),
        "host": _str(raw.get("host")),
    }


def e2e_add(total: Json, other: Json) -> None:
    """Go's E2eProcessingLatencyAggregate.Add: counts summed; per quantile the max of the
    maxima, ``min`` as Go computes it, the count-weighted running average."""
    total["host"] = "*"
    total["count"] += other["count"]
    percentiles: list[dict[str, float]] = total["percentiles"]
    for value in other["percentiles"]:
        quantile = value.get("quantile", 0)
        entry = next((p for p in percentiles if p.get("quantile", 0) == quantile), None)
        if entry is None:
            entry = {"quantile": quantile}
            percentiles.append(entry)
        entry["max"] = max(value.get("max", 0), entry.get("max", 0))
        # Go takes min(value.max, max) -- i.e. this node's max -- not a minimum of minima.
        entry["min"] = min(value.get("max", 0), entry["max"])
        entry["count"] = entry.get("count", 0) + value.get("count", 0)
        if entry["count"] == 0:
            entry["average"] = 0
        else:
            delta = value.get("average", 0) - entry.get("average", 0)
            entry["average"] = (
                entry.get("average", 0) + delta * value.get("count", 0) / entry["count"]
            )
        entry_sorted = dict(sorted(entry.items()))
        entry.clear()
        entry.update(entry_sorted)


def _new_e2e(topic: str, channel: str) -> Json:
    return {"count": 0, "percentiles": [], "topic": topic, "channel": channel, "host": "*"}


# -- per-node stats -------------------------------------------------------------------------


def client_stats(
    raw: Mapping[str, Any], node: str, producer: Mapping[str, Any], now: float
) -> Json:
    """Go's clusterinfo.ClientStats of one nsqd client (``connected`` in ns since
    ``connect_ts``, the node's topology added)."""
    connect_ts = _int(raw.get("connect_ts"))
    stats: Json = {
        "node": node,
        "remote_address": _str(raw.get("remote_address")),
        "version": _str(raw.get("version")),
        "client_id": _str(raw.get("client_id")),
        "hostname": _str(raw.get("hostname")),
        "user_agent": _str(raw.get("user_agent")),
        "connect_ts": connect_ts,
        "connected": (int(now) - connect_ts) * 1_000_000_000,
        "in_flight_count": _int(raw.get("in_flight_count")),
        "ready_count": _int(raw.get("ready_count")),
        "finish_count": _int(raw.get("finish_count")),
        "requeue_count": _int(raw.get("requeue_count")),
        "message_count": _int(raw.get("message_count")),
        "sample_rate": _int(raw.get("sample_rate")),
        "deflate": _bool(raw.get("deflate")),
        "snappy": _bool(raw.get("snappy")),
        "authed": _bool(raw.get("authed")),
        "auth_identity": _str(raw.get("auth_identity")),
        "auth_identity_url": _str(raw.get("auth_identity_url")),
    }
    for key, value in (
        ("node_topology_region", _str(producer.get("topology_region"))),
        ("node_topology_zone", _str(producer.get("topology_zone"))),
        ("topology_region", _str(raw.get("topology_region"))),
        ("topology_zone", _str(raw.get("topology_zone"))),
    ):
        if value:
            stats[key] = value
    stats.update(
        tls=_bool(raw.get("tls")),
        tls_cipher_suite=_str(raw.get("tls_cipher_suite")),
        tls_version=_str(raw.get("tls_version")),
        tls_negotiated_protocol=_str(raw.get("tls_negotiated_protocol")),
        tls_negotiated_protocol_is_mutual=_bool(raw.get("tls_negotiated_protocol_is_mutual")),
    )
    return stats


def _locality_counts(raw: Mapping[str, Any]) -> tuple[int, int, int]:
    return (
        _int(raw.get("zone_local_msg_count")),
        _int(raw.get("region_local_msg_count")),
        _int(raw.get("global_msg_count")),
    )


def channel_stats(
    raw: Mapping[str, Any],
    topic_name: str,
    node: str,
    producer: Mapping[str, Any],
    now: float,
) -> Json:
    """Go's clusterinfo.ChannelStats of one channel on one nsqd."""
    depth = _int(raw.get("depth"))
    backend = _int(raw.get("backend_depth"))
    zone, region, glob = _locality_counts(raw)
    stats: Json = {
        "node": node,
        "hostname": _str(producer.get("hostname")),
        "topic_name": topic_name,
        "channel_name": _str(raw.get("channel_name")),
        "depth": depth,
        "memory_depth": depth - backend,
        "backend_depth": backend,
        "in_flight_count": _int(raw.get("in_flight_count")),
        "deferred_count": _int(raw.get("deferred_count")),
        "requeue_count": _int(raw.get("requeue_count")),
        "timeout_count": _int(raw.get("timeout_count")),
        "message_count": _int(raw.get("message_count")),
    }
    _put_locality(stats, zone, region, glob, delivery_omitempty=True)
    stats["client_count"] = _int(raw.get("client_count"))
    stats["nodes"] = []
    stats["clients"] = [
        client_stats(c, node, producer, now)
        for c in _list(raw.get("clients"))
        if isinstance(c, Mapping)
    ]
    stats["paused"] = _bool(raw.get("paused"))
    stats["e2e_processing_latency"] = e2e_from_nsqd(raw.get("e2e_processing_latency"))
    if "dead_letter_count" in raw:
        # trionsq's dead-lettering and TTL (only from an nsqd where it applies to the channel).
        stats["dead_letter_count"] = _int(raw.get("dead_letter_count"))
        stats["expired_count"] = _int(raw.get("expired_count"))
        stats["dead_letter_topic"] = _str(raw.get("dead_letter_topic"))
    return stats


def _put_dead_letters(stats: Json, per_node: Sequence[Json]) -> None:
    """Sum trionsq's dead-letter counts over the nodes that report them (none: no keys, as
    Go's nsqadmin answers); the dead-letter topic is the first node's that has one."""
    reporting = [n for n in per_node if "dead_letter_count" in n]
    if not reporting:
        return
    stats["dead_letter_count"] = sum(n["dead_letter_count"] for n in reporting)
    stats["expired_count"] = sum(n["expired_count"] for n in reporting)
    stats["dead_letter_topic"] = next(
        (n["dead_letter_topic"] for n in reporting if n["dead_letter_topic"]), ""
    )


def _put_locality(
    stats: Json, zone: int, region: int, glob: int, *, delivery_omitempty: bool
) -> None:
    delivery = zone + region + glob
    if delivery or not delivery_omitempty:
        stats["delivery_msg_count"] = delivery
    for key, value in (
        ("zone_local_msg_count", zone),
        ("region_local_msg_count", region),
        ("global_msg_count", glob),
    ):
        if value:
            stats[key] = value


def topic_stats(raw: Mapping[str, Any], node: str, producer: Mapping[str, Any], now: float) -> Json:
    """Go's clusterinfo.TopicStats of one topic on one nsqd, its channels included."""
    name = _str(raw.get("topic_name"))
    depth = _int(raw.get("depth"))
    backend = _int(raw.get("backend_depth"))
    zone, region, glob = _locality_counts(raw)
    stats: Json = {
        "node": node,
        "hostname": _str(producer.get("hostname")),
        "topic_name": name,
        "depth": depth,
        "memory_depth": depth - backend,
        "backend_depth": backend,
        "message_count": _int(raw.get("message_count")),
    }
    _put_locality(stats, zone, region, glob, delivery_omitempty=False)
    stats["nodes"] = []
    stats["channels"] = [
        channel_stats(c, name, node, producer, now)
        for c in _list(raw.get("channels"))
        if isinstance(c, Mapping)
    ]
    stats["paused"] = _bool(raw.get("paused"))
    stats["e2e_processing_latency"] = e2e_from_nsqd(raw.get("e2e_processing_latency"))
    replication = raw.get("replication")
    if isinstance(replication, Mapping):
        # trionsq's replicated topics (docs/replication.md): this node's role, epoch and lag.
        stats["replication"] = replication_stats(replication)
    return stats


def replication_stats(raw: Mapping[str, Any]) -> Json:
    """One node's ``replication`` object of a topic, for the topic page: role, epoch, the
    primary it knows, and its members' lag (the largest, as the primary counts it)."""
    members = [m for m in _list(raw.get("members")) if isinstance(m, Mapping)]
    lags = [_int(m.get("lag_messages")) for m in members if m.get("lag_messages") is not None]
    return {
        "role": _str(raw.get("role")),
        "epoch": _int(raw.get("epoch")),
        "epoch_text": _str(raw.get("epoch_text")),
        "primary": _str(raw.get("primary")),
        "max_lag_messages": max(lags) if lags else None,
        "members_connected": sum(1 for m in members if m.get("connected")),
        "members": len(members),
        "under_replicated": _int(raw.get("under_replicated")),
        "failovers": _int(raw.get("failovers")),
    }


# -- cluster-wide aggregates ----------------------------------------------------------------

_SUMMED_CHANNEL = (
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
)


def aggregate_channel(topic_name: str, channel_name: str, per_node: Sequence[Json]) -> Json:
    """Go's ChannelStats.Add over every node's stats of one channel: sums, ``paused`` if any
    node's is, ``nodes`` (sorted by hostname), every client (sorted by hostname)."""
    stats: Json = {
        "node": "*" if per_node else "",
        "hostname": "",
        "topic_name": topic_name,
        "channel_name": channel_name,
    }
    for key in _SUMMED_CHANNEL:
        stats[key] = sum(n[key] for n in per_node)
    zone = sum(n.get("zone_local_msg_count", 0) for n in per_node)
    region = sum(n.get("region_local_msg_count", 0) for n in per_node)
    glob = sum(n.get("global_msg_count", 0) for n in per_node)
    _put_locality(stats, zone, region, glob, delivery_omitempty=True)
    stats["client_count"] = sum(n["client_count"] for n in per_node)
    stats["nodes"] = sorted(per_node, key=lambda n: n["hostname"])
    clients = [c for n in per_node for c in n["clients"]]
    stats["clients"] = sorted(clients, key=lambda c: c["hostname"])
    stats["paused"] = any(n["paused"] for n in per_node)
    e2e = _new_e2e(topic_name, channel_name)
    for n in per_node:
        e2e_add(e2e, n["e2e_processing_latency"])
    stats["e2e_processing_latency"] = e2e
    _put_dead_letters(stats, per_node)
    return stats


def aggregate_topic(topic_name: str, per_node: Sequence[Json]) -> Json:
    """Go's TopicStats.Add over every node's stats of one topic: sums, ``nodes`` (sorted by
    hostname), ``channels`` aggregated across the nodes (in order of first appearance)."""
    stats: Json = {
        "node": "*" if per_node else "",
        "hostname": "",
        "topic_name": topic_name,
    }
    for key in ("depth", "memory_depth", "backend_depth", "message_count"):
        stats[key] = sum(n[key] for n in per_node)
    zone = sum(n.get("zone_local_msg_count", 0) for n in per_node)
    region = sum(n.get("region_local_msg_count", 0) for n in per_node)
    glob = sum(n.get("global_msg_count", 0) for n in per_node)
    _put_locality(stats, zone, region, glob, delivery_omitempty=False)
    stats["nodes"] = sorted(per_node, key=lambda n: n["hostname"])
    by_channel: dict[str, list[Json]] = {}
    for n in per_node:
        for channel in n["channels"]:
            by_channel.setdefault(channel["channel_name"], []).append(channel)
    stats["channels"] = [
        aggregate_channel(topic_name, name, channels) for name, channels in by_channel.items()
    ]
    stats["paused"] = any(n["paused"] for n in per_node)
    e2e = _new_e2e(topic_name, "")
    for n in per_node:
        e2e_add(e2e, n["e2e_processing_latency"])
    stats["e2e_processing_latency"] = e2e
    return stats


def collect_stats(
    answers: Sequence[NodeStats],
    selected_topic: str,
    selected_channel: str,
    now: float,
) -> tuple[list[Json], dict[str, Json]]:
    """Go's GetNSQDStats on the answers (``(producer, /stats JSON)``): the per-node topic
    stats (sorted by hostname) and the channels aggregated across nodes, keyed by channel
    name when `selected_topic` is set, else by ``topic:channel``."""
    del selected_channel  # the nsqds already filtered on it
    topics: list[Json] = []
    channels: dict[str, list[Json]] = {}
    for producer, stats in answers:
        node = producer_http_address(producer)
        for raw in _list(stats.get("topics")):
            if not isinstance(raw, Mapping):
                continue
            topic = topic_stats(raw, node, producer, now)
            if selected_topic and topic["topic_name"] != selected_topic:
                continue
            topics.append(topic)
            for channel in topic["channels"]:
                key = channel["channel_name"]
                if not selected_topic:
                    key = f"{topic['topic_name']}:{key}"
                channels.setdefault(key, []).append(channel)
    topics.sort(key=lambda t: t["hostname"])
    aggregated = {
        key: aggregate_channel(per_node[0]["topic_name"], per_node[0]["channel_name"], per_node)
        for key, per_node in channels.items()
    }
    return topics, aggregated


def _topology_compare(a: Json, b: Json) -> int:
    """Go's ClientStatsByNodeTopology.Less as a comparison: by node, then clients in the
    node's zone, then its region, then by region and zone."""

    def less(i: Json, j: Json) -> bool:
        if i["node"] != j["node"]:
            return bool(i["node"] < j["node"])
        region = i.get("node_topology_region", "")
        zone = i.get("node_topology_zone", "")
        i_region, i_zone = i.get("topology_region", ""), i.get("topology_zone", "")
        j_region, j_zone = j.get("topology_region", ""), j.get("topology_zone", "")
        if i_region == region and i_zone == zone:
            return True
        if j_region == region and j_zone == zone:
            return False
        if i_region == region:
            return True
        if j_region == region:
            return False
        if i_region == j_region:
            return bool(i_zone < j_zone)
        return bool(i_region < j_region)

    if less(a, b) and not less(b, a):
        return -1
    if less(b, a) and not less(a, b):
        return 1
    return 0


def sort_clients_by_node_topology(clients: list[Json]) -> None:
    """Sort a channel's clients as Go's channel page does (stable)."""
    clients.sort(key=functools.cmp_to_key(_topology_compare))


def counter_stats(channels: Mapping[str, Json]) -> Json:
    """``/api/counter``'s ``stats``: message counts per ``topic:channel:node``."""
    result: Json = {}
    for channel in channels.values():
        for node_stats in channel["nodes"]:
            key = f"{channel['topic_name']}:{channel['channel_name']}:{node_stats['node']}"
            entry = result.get(key)
            if entry is None:
                entry = result[key] = {
                    "node": node_stats["node"],
                    "topic_name": channel["topic_name"],
                    "channel_name": channel["channel_name"],
                    "message_count": 0,
                }
            entry["message_count"] += node_stats["message_count"]
    return dict(sorted(result.items()))


def _empty_summary() -> Json:
    return {
        "depth": 0,
        "memory_depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "channel_depth": 0,
        "channel_count": 0,
        "node_count": 0,
        "paused": False,
    }


def topics_summary(topic_names: Iterable[str], stats_answers: Iterable[Json]) -> Json:
    """Extension (b), ``/api/topics?stats=true``: per topic, sums over the nsqds' ``/stats``
    answers (`stats_answers`, one per nsqd); every name of `topic_names` gets an entry.
    ``channel_depth`` is the backlog summed over the topic's channels (a topic whose channels
    took its messages has depth 0)."""
    summary: dict[str, Json] = {name: _empty_summary() for name in topic_names}
    channel_names: dict[str, set[str]] = {}
    for stats in stats_answers:
        for raw in _list(stats.get("topics")):
            if not isinstance(raw, Mapping):
                continue
            name = _str(raw.get("topic_name"))
            entry = summary.get(name)
            if entry is None:
                entry = summary[name] = _empty_summary()
            depth = _int(raw.get("depth"))
            backend = _int(raw.get("backend_depth"))
            entry["depth"] += depth
            entry["memory_depth"] += depth - backend
            entry["backend_depth"] += backend
            entry["message_count"] += _int(raw.get("message_count"))
            entry["node_count"] += 1
            entry["paused"] = entry["paused"] or _bool(raw.get("paused"))
            names = channel_names.setdefault(name, set())
            for channel in _list(raw.get("channels")):
                if not isinstance(channel, Mapping):
                    continue
                entry["in_flight_count"] += _int(channel.get("in_flight_count"))
                entry["deferred_count"] += _int(channel.get("deferred_count"))
                entry["channel_depth"] += _int(channel.get("depth"))
                names.add(_str(channel.get("channel_name")))
    for name, names in channel_names.items():
        summary[name]["channel_count"] = len(names)
    return dict(sorted(summary.items()))
