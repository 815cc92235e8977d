"""nsqadmin's charts open on history (beyond NSQ): an nsqadmin sampling every 0.2 s while a
topic is published to, then a fresh page: its "Last hour" charts already hold the past points
on their first load, before the page polled a second time."""

from __future__ import annotations

import time
from typing import Any

from .cluster import Cluster, Publisher
from .test_pages import tid


def _history_points(admin_url: str, path: str) -> int:
    from .cluster import get_json

    return len(get_json(f"{admin_url}/api/history/{path}")["points"])


def test_topic_and_channel_charts_show_past_points_on_first_load(
    cluster: Cluster, page: Any
) -> None:
    from playwright.sync_api import expect

    n1, n2 = cluster.nodes
    topic = "history_topic"
    n1.create_channel(topic, "archive")
    admin = cluster.start_admin("--history-interval=0.2s")
    with Publisher([n1, n2], topic, per_second=100):
        deadline = time.monotonic() + 15
        while _history_points(admin.url, f"{topic}/archive") < 10:
            assert time.monotonic() < deadline, "nsqadmin sampled no history"
            time.sleep(0.1)
    # A long refresh: whatever the charts show on load came from the history, not from polls.
    page.goto(admin.page(f"/topics/{topic}", refresh_ms=60_000))
    chart = page.get_by_test_id("history-chart")
    expect(chart).to_be_visible()
    assert int(chart.get_attribute("data-points") or 0) >= 10
    assert chart.get_attribute("data-source") == "nsqadmin"
    expect(chart.locator("polyline.chart-line")).to_have_count(1)
    expect(chart.locator("polyline.chart-depth")).to_have_count(1)
    expect(page.locator("figure.history figcaption")).to_contain_text("/s now")

    page.goto(admin.page(f"/topics/{topic}/archive", refresh_ms=60_000))
    channel_chart = page.get_by_test_id("history-chart")
    expect(channel_chart).to_be_visible()
    assert int(channel_chart.get_attribute("data-points") or 0) >= 10


def test_without_history_the_chart_says_it_is_collecting(cluster: Cluster, page: Any) -> None:
    from playwright.sync_api import expect

    n1, _ = cluster.nodes
    n1.pub("history_none")
    admin = cluster.start_admin("--history-interval=0")
    page.goto(admin.page("/topics/history_none", refresh_ms=60_000))
    chart = page.get_by_test_id("history-chart")
    expect(chart).to_have_attribute("data-points", "0")
    expect(page.locator("figure.history figcaption")).to_contain_text("collecting")


def test_the_topics_rows_open_on_their_history(cluster: Cluster, page: Any) -> None:
    from playwright.sync_api import expect

    n1, _ = cluster.nodes
    topic = "history_rows"
    admin = cluster.start_admin("--history-interval=0.2s")
    with Publisher([n1], topic, per_second=50):
        deadline = time.monotonic() + 15
        while _history_points(admin.url, topic) < 8:
            assert time.monotonic() < deadline, "nsqadmin sampled no history"
            time.sleep(0.1)
    page.goto(admin.page("/topics", refresh_ms=60_000))
    row_chart = page.locator(tid("topic-row", topic=topic)).get_by_test_id("rate-chart")
    expect(row_chart).to_be_visible()
    assert int(row_chart.get_attribute("data-points") or 0) >= 7  # before a second poll
