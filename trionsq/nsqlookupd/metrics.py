"""nsqlookupd's ``/metrics`` (beyond NSQ): the registration map (nsqds, topics, channels, each
topic's nsqds, tombstones), the V1 connections and commands, the HTTP requests by route and
status, in the Prometheus text format with the standard ``process_`` metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trionsq import NSQ_VERSION
from trionsq.prometheus_text import Sample, family, render

from .registration_db import CHANNEL, CLIENT, TOPIC

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

__all__ = ["render_metrics"]


def _registration_lines(lookupd: NSQLookupd) -> Iterator[str]:
    db, opts = lookupd.db, lookupd.options
    categories: Counter[str] = Counter()
    topic_producers: list[Sample] = []
    nsqds = tombstoned = 0
    for key, producers in db.items():
        categories[key.category] += 1
        if key.category == CLIENT:
            nsqds = len(producers)
        if key.category == TOPIC:
            topic_producers.append(((("topic", key.key),), len(producers)))
            tombstoned += sum(db.is_tombstoned(p, opts.tombstone_lifetime) for p in producers)
    yield from family(
        "nsqlookupd_build_info",
        "gauge",
        "nsqlookupd version, always 1.",
        [((("version", NSQ_VERSION),), 1)],
    )
    yield from family("nsqlookupd_producers", "gauge", "nsqds registered.", [((), nsqds)])
    yield from family("nsqlookupd_topics", "gauge", "Topics registered.", [((), categories[TOPIC])])
    yield from family(
        "nsqlookupd_channels", "gauge", "Channels registered.", [((), categories[CHANNEL])]
    )
    yield from family(
        "nsqlookupd_registrations",
        "gauge",
        "Registration keys (nsqds, topics, channels).",
        [((), len(db))],
    )
    yield from family(
        "nsqlookupd_topic_producers",
        "gauge",
        "nsqds registered for the topic.",
        sorted(topic_producers),
    )
    yield from family(
        "nsqlookupd_tombstoned_producers",
        "gauge",
        "Topic registrations tombstoned (hidden from /lookup) now.",
        [((), tombstoned)],
    )


def _protocol_lines(lookupd: NSQLookupd) -> Iterator[str]:
    protocol = lookupd.protocol
    yield from family(
        "nsqlookupd_tcp_connections",
        "gauge",
        "V1 connections (nsqds) open.",
        [((), protocol.connections)],
    )
    yield from family(
        "nsqlookupd_tcp_commands_total",
        "counter",
        "V1 commands received, by command.",
        [((("command", name),), n) for name, n in sorted(protocol.commands.items())],
    )


def render_metrics(lookupd: NSQLookupd) -> str:
    """The text-format body of nsqlookupd's ``/metrics``."""
    lines = [
        *_registration_lines(lookupd),
        *_protocol_lines(lookupd),
        *lookupd.requests.lines(
            "nsqlookupd_http_requests_total", "HTTP requests answered, by route and status."
        ),
    ]
    return render(lines)
