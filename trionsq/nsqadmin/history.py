"""nsqadmin's chart history (beyond NSQ): from the moment it starts, every ``--history-interval``
it reads each nsqd's ``/stats`` and keeps, per topic and per channel (summed over the nsqds),
the message count and depth of the last hour, so that a page's charts open on that hour
instead of one dot. Bounded: a fixed ring of samples per series, and at most `MAX_SERIES`
series (the longest unsampled ones go first, e.g. deleted topics'). With ``--graphite-url``
the charts read graphite (`graphite_history`) and nothing is sampled here.

A series as the API answers it: ``{"interval": s, "points": [[unix time, msgs/s, depth],
...]}``, oldest first; the rate of a point is the count's growth since the point before it (0
where the count went down: an nsqd restarted, a topic deleted and made again)."""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import trio

from .cluster import TotalFailure
from .upstream import UpstreamError, quiet_upstream

if TYPE_CHECKING:
    from .cluster import ClusterInfo, Report
    from .options import NSQAdminOptions

__all__ = ["MAX_SERIES", "SPAN", "History", "graphite_history"]

log = logging.getLogger("trionsq.nsqadmin")

#: How far back a series reaches, in seconds.
SPAN = 3600.0
#: The most series kept (topics plus channels): about 8.6 KB each at a 10 s interval.
MAX_SERIES = 2000

Json = dict[str, Any]


class _Ring:
    """The last `size` samples (time, count, depth) of one series."""

    __slots__ = ("counts", "depths", "filled", "head", "times")

    def __init__(self, size: int) -> None:
        self.times = array("d", bytes(8 * size))
        self.counts = array("d", bytes(8 * size))
        self.depths = array("d", bytes(8 * size))
        self.head = 0  # where the next sample goes
        self.filled = 0

    def add(self, now: float, count: float, depth: float) -> None:
        i = self.head
        self.times[i], self.counts[i], self.depths[i] = now, count, depth
        self.head = (i + 1) % len(self.times)
        self.filled = min(self.filled + 1, len(self.times))

    def last_time(self) -> float:
        return self.times[(self.head - 1) % len(self.times)] if self.filled else -math.inf

    def points(self, since: float) -> list[list[float]]:
        size = len(self.times)
        order = [(self.head - self.filled + k) % size for k in range(self.filled)]
        out: list[list[float]] = []
        for previous, i in pairwise(order):
            if self.times[i] < since:
                continue
            dt = self.times[i] - self.times[previous]
            grown = self.counts[i] - self.counts[previous]
            rate = grown / dt if dt > 0 and grown >= 0 else 0.0
            out.append([round(self.times[i], 3), round(rate, 3), self.depths[i]])
        return out


class History:
    """The sampled series, keyed ``topic`` or ``topic/channel``."""

    def __init__(
        self,
        interval: float,
        span: float = SPAN,
        max_series: int = MAX_SERIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval
        # One sample more than the span holds: a span's worth of rates needs both ends.
        self.size = max(2, math.ceil(span / interval) + 1) if interval > 0 else 2
        self.span = span
        self.max_series = max_series
        self.clock = clock
        self._series: dict[str, _Ring] = {}

    def __len__(self) -> int:
        return len(self._series)

    def record(self, stats_answers: Iterable[Mapping[str, Any]], now: float | None = None) -> None:
        """One sample of every topic and channel in the nsqds' ``/stats`` answers."""
        now = self.clock() if now is None else now
        totals: dict[str, list[float]] = {}
        for stats in stats_answers:
            for topic in stats.get("topics") or ():
                name = str(topic.get("topic_name", ""))
                _add(totals, name, topic)
                for channel in topic.get("channels") or ():
                    _add(totals, f"{name}/{channel.get('channel_name', '')}", channel)
        for key, (count, depth) in totals.items():
            ring = self._series.get(key)
            if ring is None:
                ring = self._series[key] = _Ring(self.size)
            ring.add(now, count, depth)
        self._trim()

    def _trim(self) -> None:
        excess = len(self._series) - self.max_series
        if excess > 0:
            stale = sorted(self._series, key=lambda k: self._series[k].last_time())[:excess]
            for key in stale:
                del self._series[key]

    def series(self, topic: str, channel: str = "") -> Json:
        """The API's answer for a topic (or one of its channels): the last span's points."""
        ring = self._series.get(f"{topic}/{channel}" if channel else topic)
        since = self.clock() - self.span
        return {
            "interval": self.interval,
            "source": "nsqadmin",
            "points": ring.points(since) if ring is not None else [],
        }

    def topic_rates(self, last: int) -> Json:
        """Every topic's last `last` rates (msgs/s, oldest first): what the topics page's row
        charts open on."""
        since = self.clock() - self.span
        topics = {
            key: [point[1] for point in ring.points(since)[-last:]]
            for key, ring in self._series.items()
            if "/" not in key
        }
        return {"interval": self.interval, "source": "nsqadmin", "topics": topics}

    async def run(self, cluster: ClusterInfo, report: Callable[[], Report]) -> None:
        """Sample every `interval` seconds until cancelled (nsqadmin's nursery owns it)."""
        quiet_upstream.set(True)
        while True:
            started = trio.current_time()
            try:
                producers = await cluster.producers(report())
                answers = await cluster.nsqd_stats_answers(
                    producers, report(), include_clients=False
                )
                self.record(stats for _, stats in answers)
            except (UpstreamError, TotalFailure) as exc:  # unreachable now: try next time
                log.debug("history: %s", exc)
            except Exception as exc:
                log.warning("history: sampling failed: %s", exc)
            await trio.sleep_until(started + self.interval)


def _add(totals: dict[str, list[float]], key: str, stats: Mapping[str, Any]) -> None:
    entry = totals.setdefault(key, [0.0, 0.0])
    entry[0] += float(stats.get("message_count") or 0)
    entry[1] += float(stats.get("depth") or 0)


async def graphite_history(
    options: NSQAdminOptions,
    get_url_json: Callable[[str], Any],
    topic: str,
    channel: str = "",
    span: float = SPAN,
) -> Json:
    """The same answer from graphite (``--graphite-url``), as Go's nsqadmin reads statsd's
    series: the message count counter (per statsd interval, summed over the nsqds: ``%s`` of
    ``--statsd-prefix`` is every host) as msgs/s, and the depth gauge."""
    base = f"topic.{topic}" + (f".channel.{channel}" if channel else "")
    prefix = options.statsd_prefix.replace("%s", "*").rstrip(".")

    def key(fmt: str, stat: str) -> str:
        metric = f"{prefix}.{base}.{stat}" if prefix else f"{base}.{stat}"
        return fmt.replace("%s", metric) if fmt else metric

    interval = max(float(options.statsd_interval), 1.0)
    counts = f"sumSeries({key(options.statsd_counter_format, 'message_count')})"
    depths = f"sumSeries({key(options.statsd_gauge_format, 'depth')})"
    query = urlencode(
        [("format", "json"), ("from", f"-{int(span)}sec"), ("target", counts), ("target", depths)]
    )
    answer = await get_url_json(f"{options.graphite_url}/render?{query}")
    by_time: dict[float, list[float]] = {}
    for index, target in enumerate(answer[:2] if isinstance(answer, list) else ()):
        for value, stamp in target.get("datapoints") or ():
            if value is None:
                continue
            entry = by_time.setdefault(float(stamp), [0.0, 0.0])
            entry[index] = float(value) / interval if index == 0 else float(value)
    points = [[stamp, round(v[0], 3), v[1]] for stamp, v in sorted(by_time.items())]
    return {"interval": interval, "source": "graphite", "points": points}
