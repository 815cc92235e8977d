"""trionsq's dead-lettering and TTL in nsqadmin, in a real browser against a real cluster: the
topic and channel pages show a channel's dead-lettered and expired counts with a link to its
dead-letter topic, and nothing for a channel without the feature."""

from __future__ import annotations

import re
import time
from typing import Any

from playwright.sync_api import expect

from .cluster import Cluster


def tid(testid: str, **data: str) -> str:
    return f'[data-testid="{testid}"]' + "".join(f'[data-{k}="{v}"]' for k, v in data.items())


def _dead_lettered(cluster: Cluster, topic: str, channel: str, count: int) -> None:
    """Channel `channel` of `topic` on the first nsqd dead-letters every message (max attempts 1,
    a TTL of 1 ms); `count` messages expire and are moved to ``<topic>.dead``."""
    node = cluster.nodes[0]
    node.create_channel(topic, channel)
    node.create_channel(topic, "plain")
    node.post("/channel/config", topic=topic, channel=channel, max_attempts="1", message_ttl="1ms")
    node.mpub(topic, count)
    time.sleep(0.05)
    cluster.consumers.add(topic, channel, [node.tcp])
    deadline = time.monotonic() + 10
    while (node.channel_stats(topic, channel) or {}).get("dead_letter_count") != count:
        assert time.monotonic() < deadline, node.channel_stats(topic, channel)
        time.sleep(0.05)


def test_topic_page_shows_dead_letters_and_links_the_dead_letter_topic(
    cluster: Cluster, page: Any
) -> None:
    topic = "pages_dead"
    _dead_lettered(cluster, topic, "work", 3)
    page.goto(cluster.admin.page(f"/topics/{topic}"))
    work = page.locator(tid("channel-row", channel="work"))
    expect(work.get_by_test_id("dead-letter-count")).to_have_text("3")
    expect(work.get_by_test_id("expired-count")).to_have_text("3")
    expect(work.get_by_test_id("dead-letter-link")).to_have_text(f"{topic}.dead")
    plain = page.locator(tid("channel-row", channel="plain"))
    expect(plain.get_by_test_id("channel-link")).to_be_visible()
    expect(plain.get_by_test_id("dead-letters")).to_have_count(0)

    work.get_by_test_id("dead-letter-link").click()
    expect(page).to_have_url(re.compile(rf"/topics/{topic}\.dead$"))
    expect(page.get_by_test_id("page-title")).to_contain_text(f"{topic}.dead")
    expect(
        page.locator(tid("node-row", node=cluster.nodes[0].http)).get_by_test_id("messages")
    ).to_have_text("3")


def test_channel_page_shows_the_counts_only_where_they_apply(cluster: Cluster, page: Any) -> None:
    topic = "pages_dead_channel"
    _dead_lettered(cluster, topic, "work", 2)
    page.goto(cluster.admin.page(f"/topics/{topic}/work"))
    summary = page.get_by_test_id("dead-letters")
    expect(summary.get_by_test_id("dead-letter-count")).to_have_text("2")
    expect(summary.get_by_test_id("expired-count")).to_have_text("2")
    expect(summary.get_by_test_id("dead-letter-link")).to_have_attribute(
        "href", re.compile(rf"/topics/{topic}\.dead$")
    )
    page.goto(cluster.admin.page(f"/topics/{topic}/plain"))
    expect(page.get_by_test_id("channel-nodes")).to_be_visible()
    expect(page.get_by_test_id("dead-letters")).to_have_count(0)
