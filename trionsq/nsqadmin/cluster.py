"""Reading and changing the cluster (Go's ``clusterinfo.ClusterInfo``): which nsqlookupd and nsqd
HTTP endpoints to ask, concurrently, and how their answers are unioned (via `.aggregate`).

Every call returns its value and appends the upstreams that failed to a `Report`; when no
upstream at all could answer (Go's non-partial errors) it raises `TotalFailure` instead, which
the API answers with 502 ``UPSTREAM_ERROR``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any
from urllib.parse import quote_plus

from . import aggregate
from .aggregate import Json, NodeStats
from .options import NSQAdminOptions
from .upstream import UpstreamClient, UpstreamError, gather

__all__ = ["ClusterInfo", "Report", "TotalFailure"]

log = logging.getLogger("trionsq.nsqadmin")


class TotalFailure(Exception):
    """No upstream of a kind answered (Go: ``failed to query any nsqlookupd: ...``)."""

    def __init__(self, kind: str, errors: Sequence[UpstreamError]) -> None:
        text = "\n".join(e.go_text for e in errors)
        super().__init__(f"failed to query any {kind}: {text}")
        self.errors = list(errors)
        #: The step that failed, in Go's handlers' words (``failed to get topics``).
        self.what = ""


class Report:
    """What went wrong while answering one request: Go's ``message`` parts (one per failed
    step) and the failed upstreams (the ``errors`` extension)."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.errors: list[UpstreamError] = []

    def add(self, errors: Sequence[UpstreamError]) -> None:
        """Record the failures of one step (nothing when `errors` is empty)."""
        if errors:
            text = "\n".join(e.go_text for e in errors)
            log.warning("%s", text)
            self.messages.append(text)
            self.errors.extend(errors)

    @property
    def message(self) -> str:
        """Go's maybeWarnMsg."""
        return "WARNING: " + "; ".join(self.messages) if self.messages else ""

    def errors_json(self) -> list[dict[str, str]]:
        """The ``errors`` list, one entry per failed upstream address."""
        seen: set[tuple[str, str]] = set()
        out = []
        for err in self.errors:
            key = (err.address, err.words)
            if key not in seen:
                seen.add(key)
                out.append(err.to_json())
        return out


def _qs(**params: str) -> str:
    """A query string in the given order (Go's url.QueryEscape on each value)."""
    return "&".join(f"{k}={quote_plus(v)}" for k, v in params.items())


def _split(
    results: Sequence[Any | UpstreamError],
) -> tuple[list[Any], list[UpstreamError]]:
    ok = [r for r in results if not isinstance(r, UpstreamError)]
    failed = [r for r in results if isinstance(r, UpstreamError)]
    return ok, failed


class ClusterInfo:
    """The cluster as nsqadmin sees it through the addresses in the (live) options."""

    def __init__(
        self,
        client: UpstreamClient,
        options: Callable[[], NSQAdminOptions],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self._options = options
        self._clock = clock

    @property
    def lookupd_addresses(self) -> list[str]:
        return list(self._options().nsqlookupd_http_addresses)

    @property
    def nsqd_addresses(self) -> list[str]:
        return list(self._options().nsqd_http_addresses)

    # -- lookupd reads --------------------------------------------------------------------

    async def _lookupd_get(self, path: str, report: Report) -> list[tuple[str, Any]]:
        """GET `path` on every lookupd: the ``(address, JSON)`` of those that answered."""
        addresses = self.lookupd_addresses
        get = partial(self.client.get_json, ci="nsqlookupd")
        results = await gather([partial(get, a, path) for a in addresses])
        answered = [
            (a, r)
            for a, r in zip(addresses, results, strict=True)
            if not isinstance(r, UpstreamError)
        ]
        _, failed = _split(results)
        # as Go's: with no lookupd at all nothing answered either (creating a channel in nsqd
        # mode needs the topic's producers from the lookupds: 502)
        if len(failed) == len(addresses):
            raise TotalFailure("nsqlookupd", failed)
        report.add(failed)
        return answered

    async def lookupd_topics(self, report: Report) -> list[str]:
        """The sorted union of every lookupd's ``/topics``."""
        answers = await self._lookupd_get("/topics", report)
        return sorted({t for _, a in answers for t in _strings(a, "topics")})

    async def lookupd_topic_channels(self, topic: str, report: Report) -> list[str]:
        answers = await self._lookupd_get(f"/channels?{_qs(topic=topic)}", report)
        return sorted({c for _, a in answers for c in _strings(a, "channels")})

    async def lookupd_producers(self, report: Report) -> list[Json]:
        """Every nsqd known to the lookupds (``/nodes``), unioned."""
        answers = await self._lookupd_get("/nodes", report)
        return aggregate.union_lookupd_producers(
            [(address, _objects(answer, "producers")) for address, answer in answers]
        )

    async def lookupd_topic_producers(self, topic: str, report: Report) -> list[Json]:
        """The producers of `topic` per the lookupds (``/lookup``)."""
        answers = await self._lookupd_get(f"/lookup?{_qs(topic=topic)}", report)
        return aggregate.union_topic_producers([_objects(a, "producers") for _, a in answers])

    # -- nsqd reads -----------------------------------------------------------------------

    async def nsqd_stats_by_address(
        self, addresses: Sequence[str], report: Report
    ) -> list[tuple[str, Json]]:
        """``/stats?format=json&include_clients=false`` of each nsqd that answered."""
        path = "/stats?format=json&include_clients=false"
        get = partial(self.client.get_json, ci="nsqd")
        results = await gather([partial(get, a, path) for a in addresses])
        _, failed = _split(results)
        if addresses and len(failed) == len(addresses):
            raise TotalFailure("nsqd", failed)
        report.add(failed)
        return [
            (a, r if isinstance(r, dict) else {})
            for a, r in zip(addresses, results, strict=True)
            if not isinstance(r, UpstreamError)
        ]

    async def nsqd_topics(self, report: Report) -> tuple[list[str], list[tuple[str, Json]]]:
        """The sorted union of the configured nsqds' topics, with their ``/stats``."""
        answers = await self.nsqd_stats_by_address(self.nsqd_addresses, report)
        topics = {
            t.get("topic_name", "") for _, stats in answers for t in _objects(stats, "topics")
        }
        return sorted(topics), answers

    async def _nsqd_producer(self, address: str, topic: str | None) -> Json | None:
        """Go's per-address step of GetNSQDProducers (`topic` None) or GetNSQDTopicProducers:
        ``/stats`` then ``/info``; None when the nsqd does not have `topic`."""
        get = partial(self.client.get_json, ci="nsqd")
        if topic is None:
            info = await get(address, "/info")
            stats = await get(address, "/stats?format=json&include_clients=false")
        else:
            path = f"/stats?format=json&{_qs(topic=topic)}&include_clients=false"
            stats = await get(address, path)
            if not any(t.get("topic_name") == topic for t in _objects(stats, "topics")):
                return None
            info = await get(address, "/info")
        names = [str(t.get("topic_name", "")) for t in _objects(stats, "topics")]
        return aggregate.nsqd_producer(address, info if isinstance(info, dict) else {}, names)

    async def nsqd_producers(
        self, addresses: Sequence[str], report: Report, *, keep_unreachable: bool = False
    ) -> list[Json]:
        """The given nsqds as producers (``/info`` and ``/stats``); with `keep_unreachable`,
        those that did not answer are listed too (extension (c))."""
        results = await gather([partial(self._nsqd_producer, a, None) for a in addresses])
        _, failed = _split(results)
        if addresses and len(failed) == len(addresses):
            raise TotalFailure("nsqd", failed)
        report.add(failed)
        producers = []
        for address, result in zip(addresses, results, strict=True):
            if isinstance(result, UpstreamError):
                if keep_unreachable:
                    producers.append(aggregate.unreachable_producer(address))
            elif result is not None:
                producers.append(result)
        return producers

    async def nsqd_topic_producers(self, topic: str, report: Report) -> list[Json]:
        addresses = self.nsqd_addresses
        results = await gather([partial(self._nsqd_producer, a, topic) for a in addresses])
        ok, failed = _split(results)
        if addresses and len(failed) == len(addresses):
            raise TotalFailure("nsqd", failed)
        report.add(failed)
        return [p for p in ok if p is not None]

    # -- either mode ----------------------------------------------------------------------

    async def producers(self, report: Report, *, keep_unreachable: bool = False) -> list[Json]:
        """Go's GetProducers: every nsqd of the cluster."""
        if self.lookupd_addresses:
            return await self.lookupd_producers(report)
        return await self.nsqd_producers(
            self.nsqd_addresses, report, keep_unreachable=keep_unreachable
        )

    async def topic_producers(self, topic: str, report: Report) -> list[Json]:
        """Go's GetTopicProducers: the nsqds that have `topic`."""
        if self.lookupd_addresses:
            return await self.lookupd_topic_producers(topic, report)
        return await self.nsqd_topic_producers(topic, report)

    async def nsqd_stats(
        self,
        producers: Sequence[Json],
        report: Report,
        topic: str = "",
        channel: str = "",
        include_clients: bool = True,
    ) -> tuple[list[Json], dict[str, Json]]:
        """Go's GetNSQDStats: per-node topic stats and channels aggregated across nodes (see
        `aggregate.collect_stats`). No producers is not a failure here (Go answers 502)."""
        answers = await self.nsqd_stats_answers(producers, report, topic, channel, include_clients)
        return aggregate.collect_stats(answers, topic, channel, self._clock())

    async def nsqd_stats_answers(
        self,
        producers: Sequence[Json],
        report: Report,
        topic: str = "",
        channel: str = "",
        include_clients: bool = True,
    ) -> list[NodeStats]:
        """Each producer's ``/stats`` answer (those that answered), with the producer; raises
        `TotalFailure` when none did."""
        path = "/stats?format=json"
        if topic:
            path += f"&{_qs(topic=topic)}"
            if channel:
                path += f"&{_qs(channel=channel)}"
        if not include_clients:
            path += "&include_clients=false"
        addresses = [aggregate.producer_http_address(p) for p in producers]
        get = partial(self.client.get_json, ci="nsqd")
        results = await gather([partial(get, a, path) for a in addresses])
        _, failed = _split(results)
        if producers and len(failed) == len(producers):
            raise TotalFailure("nsqd", failed)
        report.add(failed)
        return [
            (p, r if isinstance(r, dict) else {})
            for p, r in zip(producers, results, strict=True)
            if not isinstance(r, UpstreamError)
        ]

    async def peek_channel(
        self, producers: Sequence[Json], topic: str, channel: str, n: str
    ) -> list[Json]:
        """Beyond NSQ: ``/channel/peek`` on each producer of `topic`, in producer order: its
        answer with ``node`` added, or ``{"node", "error"}`` in plain words for a node that
        failed (a Go nsqd has no such route: 404; a node without the channel: 404 too). Such
        failures are the page's to show per node, not banner errors."""
        addresses = [aggregate.producer_http_address(p) for p in producers]
        path = f"/channel/peek?{_qs(topic=topic, channel=channel, n=n)}"
        get = partial(self.client.get_json, ci="nsqd")
        results = await gather([partial(get, a, path) for a in addresses])
        nodes: list[Json] = []
        for address, result in zip(addresses, results, strict=True):
            if isinstance(result, UpstreamError):
                nodes.append({"node": address, "error": result.words})
            elif isinstance(result, dict):
                nodes.append({"node": address, **result})
            else:
                nodes.append({"node": address, "error": "invalid JSON answer"})
        return nodes

    async def probe(self, producers: Sequence[Json], report: Report) -> None:
        """Extension (c): ``/ping`` every producer not already known to be unreachable, mark
        those that do not answer ``unreachable``."""
        targets = [p for p in producers if not p.get("unreachable")]
        results = await gather(
            [
                partial(
                    self.client.get_text, aggregate.producer_http_address(p), "/ping", ci="nsqd"
                )
                for p in targets
            ]
        )
        failed = []
        for producer, result in zip(targets, results, strict=True):
            if isinstance(result, UpstreamError):
                producer["unreachable"] = True
                failed.append(result)
        report.add(failed)

    # -- actions --------------------------------------------------------------------------

    async def _post_all(self, addresses: Iterable[str], path: str, report: Report, ci: str) -> None:
        """POST to each address (`ci`: ``nsqlookupd`` or ``nsqd``); failures are partial (Go's
        nsqlookupdPOST/producersPOST)."""
        addresses = list(addresses)
        results = await gather([partial(self.client.post, a, path, ci=ci) for a in addresses])
        report.add(_split(results)[1])

    async def lookupds_post(self, uri: str, query: str, report: Report) -> None:
        await self._post_all(self.lookupd_addresses, f"/{uri}?{query}", report, "nsqlookupd")

    async def producers_post(
        self, producers: Sequence[Json], uri: str, query: str, report: Report
    ) -> None:
        addresses = [aggregate.producer_http_address(p) for p in producers]
        await self._post_all(addresses, f"/{uri}?{query}", report, "nsqd")

    async def tombstone_node_for_topic(self, topic: str, node: str, report: Report) -> None:
        """Tombstone `node` for `topic` in every lookupd, then delete the topic on it."""
        await self.lookupds_post("topic/tombstone", _qs(topic=topic, node=node), report)
        producers = await self.nsqd_producers([node], report)
        await self.producers_post(producers, "topic/delete", _qs(topic=topic), report)

    async def create_topic_channel(self, topic: str, channel: str, report: Report) -> None:
        """Create `topic` (and `channel`) in every lookupd, the channel also on the nsqds that
        have the topic."""
        await self.lookupds_post("topic/create", _qs(topic=topic), report)
        if channel:
            query = _qs(topic=topic, channel=channel)
            await self.lookupds_post("channel/create", query, report)
            producers = await self.lookupd_topic_producers(topic, report)
            await self.producers_post(producers, "channel/create", query, report)

    async def delete_topic(self, topic: str, report: Report) -> None:
        producers = await self.topic_producers(topic, report)
        query = _qs(topic=topic)
        await self.lookupds_post("topic/delete", query, report)
        await self.producers_post(producers, "topic/delete", query, report)

    async def delete_channel(self, topic: str, channel: str, report: Report) -> None:
        producers = await self.topic_producers(topic, report)
        query = _qs(topic=topic, channel=channel)
        await self.lookupds_post("channel/delete", query, report)
        await self.producers_post(producers, "channel/delete", query, report)

    async def topic_channel_action(
        self, action: str, topic: str, channel: str, report: Report
    ) -> None:
        """pause / unpause / empty `topic` (or its `channel`) on every nsqd that has it."""
        producers = await self.topic_producers(topic, report)
        if channel:
            uri, query = f"channel/{action}", _qs(topic=topic, channel=channel)
        else:
            uri, query = f"topic/{action}", _qs(topic=topic)
        await self.producers_post(producers, uri, query, report)


def _objects(answer: Any, key: str) -> list[dict[str, Any]]:
    """The JSON objects of list `key` of an answer (anything malformed is skipped)."""
    if not isinstance(answer, dict):
        return []
    value = answer.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _strings(answer: Any, key: str) -> list[str]:
    if not isinstance(answer, dict):
        return []
    value = answer.get(key)
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
