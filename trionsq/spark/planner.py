"""Planning a micro-batch of the staged source without the data (driver side): which nsqds
there are (the ``nsqd`` option, plus every producer lookupd returns for the topic, re-asked
between batches), how many messages wait on each (nsqd's ``/stats`` channel depth), and the
resulting partitions: ``[nsqd, limit]`` pairs, up to ``numPartitions`` per nsqd, whose limits sum
to at most the batch's row limit."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from ..client.connection import parse_address
from .options import SourceOptions

__all__ = ["NsqdDepth", "Planner", "split_plan"]

log = logging.getLogger("trionsq.spark")


@dataclass
class NsqdDepth:
    """One nsqd as the planner sees it: ``depth`` None when unknown (no HTTP address, or the
    channel missing), 0 when /stats failed; ``in_flight`` held by other consumers (e.g. a
    crashed run's)."""

    tcp: str
    http: str | None
    depth: int | None
    in_flight: int = 0


def split_plan(depths: list[NsqdDepth], max_rows: int, partitions_per_nsqd: int) -> list[list[Any]]:
    """``[[nsqd, limit], ...]`` for the next batch: every nsqd with messages waiting (or an
    unknown depth) gets a share of `max_rows` in proportion to its depth (an unknown depth counts
    as an even share), cut into at most `partitions_per_nsqd` partitions."""
    active = [d for d in depths if d.depth is None or d.depth > 0]
    if not active or max_rows <= 0:
        return []
    even = max(1, max_rows // len(active))
    want = [d.depth if d.depth is not None else even for d in active]
    total = sum(want)
    if total > max_rows:
        scaled = [w * max_rows // total for w in want]
        # Hand out what flooring left over, largest remainders first; no nsqd left at zero.
        rest = max_rows - sum(scaled)
        order = sorted(range(len(want)), key=lambda i: -(want[i] * max_rows % total))
        for i in order[:rest]:
            scaled[i] += 1
        want = scaled
    plan: list[list[Any]] = []
    for d, w in zip(active, want, strict=True):
        if w <= 0:
            continue
        parts = max(1, min(partitions_per_nsqd, w))
        size = math.ceil(w / parts)
        left = w
        while left > 0:
            plan.append([d.tcp, min(size, left)])
            left -= size
    return plan


def _get_json(url: str, timeout: float, context: ssl.SSLContext | None = None) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.nsq; version=1.0"})
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        body = json.load(response)
    if isinstance(body, dict) and "data" in body and "status_code" in body:
        return body["data"]
    return body


def _url(address: str) -> str:
    return (address if "://" in address else "http://" + address).rstrip("/")


class Planner:
    """Discovery and depth for one query's planning process (no connections held)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._lookup_at = -math.inf
        self._found: list[tuple[str, str]] = []
        self._created: set[str] = set()
        #: An nsqd's HTTP API answers within this, or it is planned nothing this batch.
        self._timeout = min(5.0, options.read_timeout)
        #: For https:// addresses: the source's tlsCaFile (and client certificate).
        self._ssl: ssl.SSLContext | None = None
        if options.security.tls_cafile or options.security.tls_certfile:
            self._ssl = options.connection_options().ssl_context_for_client()

    def nsqds(self) -> list[tuple[str, str | None]]:
        """(TCP address, HTTP address or None) of every nsqd to read: the ``nsqd`` option's,
        then what lookupd knows (asked again after ``lookupdPollInterval``, at most every 1 s
        when it knew none)."""
        opts = self.options
        out: dict[str, str | None] = {}
        for i, address in enumerate(opts.nsqd):
            host, port = parse_address(address)
            out[f"{host}:{port}"] = opts.nsqd_http[i] if opts.nsqd_http else None
        if opts.lookupd:
            now = time.monotonic()
            wait = opts.lookupd_poll_interval if self._found else 1.0
            if now - self._lookup_at >= wait:
                self._lookup_at = now
                self._found = self._lookup()
            for tcp, http in self._found:
                out.setdefault(tcp, http)
        return list(out.items())

    def refresh_lookup(self) -> None:
        """Ask lookupd again at the next `nsqds` call."""
        self._lookup_at = -math.inf

    def _lookup(self) -> list[tuple[str, str]]:
        found: dict[str, str] = {}
        topic = urllib.parse.quote(self.options.topic)
        for lookupd in self.options.lookupd:
            try:
                data = _get_json(f"{_url(lookupd)}/lookup?topic={topic}", 5.0)
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # 404: the topic is not registered (yet)
                    log.warning("lookupd %s: %s", lookupd, exc)
                continue
            except (OSError, ValueError) as exc:
                log.warning("lookupd %s: %s", lookupd, exc)
                continue
            for producer in data.get("producers") or []:
                host = producer.get("broadcast_address") or producer.get("address")
                if host and producer.get("tcp_port"):
                    found[f"{host}:{producer['tcp_port']}"] = f"{host}:{producer['http_port']}"
        return sorted(found.items())

    def depths(self) -> list[NsqdDepth]:
        """Each nsqd's channel depth from its /stats (creating the channel, as a SUB would,
        when the topic has no such channel yet, so it collects the topic's messages). The
        nsqds are asked at once: one that does not answer (frozen) delays the plan by one
        timeout, whatever the number of nsqds, and is planned nothing."""
        nsqds = self.nsqds()
        if len(nsqds) <= 1:
            return [self._depth(tcp, http) for tcp, http in nsqds]
        with concurrent.futures.ThreadPoolExecutor(min(len(nsqds), 16)) as pool:
            return list(pool.map(lambda pair: self._depth(*pair), nsqds))

    def _depth(self, tcp: str, http: str | None) -> NsqdDepth:
        if http is None:
            return NsqdDepth(tcp, None, None)
        opts = self.options
        topic = urllib.parse.quote(opts.topic)
        channel = urllib.parse.quote(opts.channel)
        try:
            if tcp not in self._created:
                request = urllib.request.Request(
                    f"{_url(http)}/channel/create?topic={topic}&channel={channel}", method="POST"
                )
                urllib.request.urlopen(request, timeout=self._timeout, context=self._ssl).close()
                self._created.add(tcp)
            stats = _get_json(
                f"{_url(http)}/stats?format=json&topic={topic}&channel={channel}",
                self._timeout,
                self._ssl,
            )
        except urllib.error.HTTPError as exc:
            self._created.discard(tcp)
            if exc.code == 404:  # the topic does not exist there (yet): nothing waits
                return NsqdDepth(tcp, http, 0)
            log.warning("nsqd %s (%s): /stats: %s", tcp, http, exc)
            return NsqdDepth(tcp, http, 0)
        except (OSError, ValueError) as exc:
            # Unreachable (stopped, or gone and lookupd not told yet): nothing to plan on it.
            log.warning("nsqd %s (%s): /stats: %s", tcp, http, exc)
            self._created.discard(tcp)
            return NsqdDepth(tcp, http, 0)
        for t in stats.get("topics") or []:
            if t.get("topic_name") != opts.topic:
                continue
            for c in t.get("channels") or []:
                if c.get("channel_name") == opts.channel:
                    return NsqdDepth(tcp, http, int(c["depth"]), int(c.get("in_flight_count", 0)))
        # The channel is gone (deleted, or nsqd restarted without it): create it again.
        self._created.discard(tcp)
        return NsqdDepth(tcp, http, None)
