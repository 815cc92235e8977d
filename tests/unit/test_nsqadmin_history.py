"""nsqadmin's chart history (`trionsq.nsqadmin.history`): sampling `/stats` answers into
bounded per-topic and per-channel series, rates from counts, the last hour only, and the same
answer read from graphite."""

from __future__ import annotations

from typing import Any

import trio

from trionsq.nsqadmin.history import History, graphite_history
from trionsq.nsqadmin.options import NSQAdminOptions


def _stats(*topics: tuple[str, int, int, dict[str, tuple[int, int]]]) -> dict[str, Any]:
    """One nsqd's /stats: (topic, message_count, depth, {channel: (message_count, depth)})."""
    return {
        "topics": [
            {
                "topic_name": name,
                "message_count": count,
                "depth": depth,
                "channels": [
                    {"channel_name": c, "message_count": cc, "depth": cd}
                    for c, (cc, cd) in channels.items()
                ],
            }
            for name, count, depth, channels in topics
        ]
    }


def test_rates_are_count_growth_per_second_summed_over_nsqds() -> None:
    now = [1000.0]
    history = History(10.0, clock=lambda: now[0])
    for t, (a, b) in enumerate([(0, 0), (100, 50), (300, 50), (310, 60)]):
        now[0] = 1000.0 + 10 * t
        history.record(
            [_stats(("t", a, 5, {"c": (a, 1)})), _stats(("t", b, 7, {"c": (b, 2)}))],
        )
    points = history.series("t")["points"]
    assert [p[1] for p in points] == [15.0, 20.0, 2.0]  # (150-0)/10, (350-150)/10, (370-350)/10
    assert [p[2] for p in points] == [12.0, 12.0, 12.0]  # depths summed over the nsqds
    assert [p[0] for p in points] == [1010.0, 1020.0, 1030.0]
    channel = history.series("t", "c")
    assert [p[1] for p in channel["points"]] == [15.0, 20.0, 2.0]
    assert [p[2] for p in channel["points"]] == [3.0, 3.0, 3.0]
    assert history.series("nope") == {"interval": 10.0, "source": "nsqadmin", "points": []}


def test_a_count_going_down_is_a_zero_rate_not_a_negative_one() -> None:
    now = [0.0]
    history = History(1.0, clock=lambda: now[0])
    for t, count in enumerate([500, 520, 3, 13]):  # the nsqd restarted between 2 and 3
        now[0] = float(t)
        history.record([_stats(("t", count, 0, {}))])
    assert [p[1] for p in history.series("t")["points"]] == [20.0, 0.0, 10.0]


def test_only_the_last_hour_is_kept_and_answered() -> None:
    now = [0.0]
    history = History(60.0, span=3600.0, clock=lambda: now[0])
    for t in range(200):  # 200 minutes of samples
        now[0] = 60.0 * t
        history.record([_stats(("t", 6 * t, 0, {}))])
    points = history.series("t")["points"]
    assert len(points) == 60
    assert points[0][0] == 60.0 * 140 and points[-1][0] == 60.0 * 199
    assert {p[1] for p in points} == {0.1}


def test_series_are_bounded_dropping_the_longest_unsampled() -> None:
    now = [0.0]
    history = History(1.0, max_series=3, clock=lambda: now[0])
    history.record([_stats(("old", 1, 0, {}))])
    now[0] = 0.5
    history.record([_stats(("old", 2, 0, {}))])
    assert history.series("old")["points"] == [[0.5, 2.0, 0.0]]
    now[0] = 1.0
    history.record([_stats(("a", 1, 0, {"x": (1, 0)}), ("b", 1, 0, {}))])
    assert len(history) == 3
    assert history.series("old")["points"] == []  # the longest unsampled went


async def test_graphite_history_sums_the_statsd_series_over_the_nsqds() -> None:
    asked: list[str] = []

    async def get_url_json(url: str) -> Any:
        asked.append(url)
        await trio.lowlevel.checkpoint()
        return [
            {"target": "counts", "datapoints": [[600, 100], [None, 110], [1200, 120]]},
            {"target": "depths", "datapoints": [[5, 100], [7, 120]]},
        ]

    options = NSQAdminOptions(graphite_url="http://graphite:8080", statsd_interval=60.0)
    answer = await graphite_history(options, get_url_json, "t", "c")
    assert answer == {
        "interval": 60.0,
        "source": "graphite",
        "points": [[100.0, 10.0, 5.0], [120.0, 20.0, 7.0]],
    }
    (url,) = asked
    assert url.startswith("http://graphite:8080/render?format=json&from=-3600sec&target=")
    assert "sumSeries%28stats.counters.nsq.%2A.topic.t.channel.c.message_count.count%29" in url
    assert "sumSeries%28stats.gauges.nsq.%2A.topic.t.channel.c.depth%29" in url
