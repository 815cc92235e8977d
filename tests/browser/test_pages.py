"""Every nsqadmin page in a real browser against a real cluster: what an operator sees on
the topics, topic, channel, nodes, node, lookup and counter pages, and the live charts."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from .cluster import Cluster, Publisher, http


def tid(testid: str, **data: str) -> str:
    """A CSS selector for data-testid plus data-* attributes."""
    return f'[data-testid="{testid}"]' + "".join(f'[data-{k}="{v}"]' for k, v in data.items())


def test_topics_page_lists_topics_with_depth(cluster: Cluster, page: Any) -> None:
    n1, n2 = cluster.nodes
    n1.mpub("pages_depth", 3)
    n2.mpub("pages_depth", 1200)
    page.goto(cluster.admin.page("/"))
    expect(page.get_by_test_id("page-title")).to_have_text("Topics")
    expect(page.locator("[data-nav='topics']")).to_have_class(re.compile(r"\bactive\b"))
    row = page.locator(tid("topic-row", topic="pages_depth"))
    expect(row.get_by_test_id("topic-depth")).to_have_text("1,203")
    expect(row.get_by_test_id("topic-messages")).to_have_text("1,203")
    expect(row.get_by_test_id("topic-nodes")).to_have_text("2")
    expect(page.get_by_test_id("header")).to_contain_text("v1.3.0")
    # Through the link to the topic page, without reloading the app.
    page.evaluate("window.__sameApp = true")
    row.get_by_test_id("topic-link").click()
    expect(page).to_have_url(re.compile(r"/topics/pages_depth$"))
    expect(page.get_by_test_id("page-title")).to_contain_text("pages_depth")
    assert page.evaluate("window.__sameApp") is True


def test_topics_page_shows_the_channels_backlog(cluster: Cluster, page: Any) -> None:
    n1, n2 = cluster.nodes
    for node, count in ((n1, 4), (n2, 5)):
        node.create_channel("pages_backlog", "a")
        node.create_channel("pages_backlog", "b")
        node.mpub("pages_backlog", count)
    page.goto(cluster.admin.page("/topics"))
    row = page.locator(tid("topic-row", topic="pages_backlog"))
    # The channels took every message: the topic's own depth is 0, their backlog is not.
    expect(row.get_by_test_id("topic-backlog")).to_have_text("18")
    expect(row.get_by_test_id("topic-depth")).to_have_text("0")
    expect(row.get_by_test_id("topic-channels")).to_have_text("2")


def test_topics_page_inactive_topics_switch(cluster: Cluster, page: Any) -> None:
    # A topic only nsqlookupd knows (created through its own /topic/create): no nsqd produces it.
    lookupd = f"http://{cluster.lookupd_http}"
    assert http("POST", f"{lookupd}/topic/create?topic=pages_inactive")[0] == 200
    assert http("POST", f"{lookupd}/channel/create?topic=pages_inactive&channel=idle")[0] == 200
    cluster.nodes[0].pub("pages_active")
    page.goto(cluster.admin.page("/topics"))
    expect(page.locator(tid("topic-row", topic="pages_active"))).to_be_visible()
    switch = page.get_by_test_id("show-inactive")
    expect(switch).not_to_be_checked()
    expect(page.get_by_test_id("inactive-topic")).to_have_count(0)
    expect(page.get_by_test_id("inactive-title")).to_have_count(0)

    switch.check()
    inactive = page.locator(tid("inactive-topic", topic="pages_inactive"))
    expect(inactive).to_be_visible()
    expect(inactive.locator(tid("inactive-channel", channel="idle"))).to_have_text("idle")
    expect(inactive).to_contain_text("no producer")
    expect(page.locator(tid("inactive-topic", topic="pages_active"))).to_have_count(0)
    expect(page.get_by_test_id("inactive-title")).to_contain_text("Inactive topics")
    # Through to the topic page and back: the switch stays on.
    inactive.get_by_test_id("topic-link").click()
    expect(page).to_have_url(re.compile(r"/topics/pages_inactive$"))
    page.go_back()
    expect(page.locator(tid("inactive-topic", topic="pages_inactive"))).to_be_visible()

    page.get_by_test_id("show-inactive").uncheck()
    expect(page.get_by_test_id("inactive-topic")).to_have_count(0)
    expect(page.locator(tid("topic-row", topic="pages_active"))).to_be_visible()

    # With a fixed list of nsqd there is no lookupd to ask: no switch.
    admin = cluster.start_admin(
        *(f"--nsqd-http-address={n.http}" for n in cluster.nodes), lookupd=False
    )
    page.goto(admin.page("/topics"))
    expect(page.locator(tid("topic-row", topic="pages_active"))).to_be_visible()
    expect(page.get_by_test_id("show-inactive")).to_have_count(0)
    expect(page.get_by_test_id("inactive-topic")).to_have_count(0)


def test_topic_page_per_node_and_channels(cluster: Cluster, page: Any) -> None:
    n1, n2 = cluster.nodes
    topic = "pages_topic"
    for node in (n1, n2):
        node.create_channel(topic, "alpha")
        node.create_channel(topic, "beta")
    n1.mpub(topic, 3)
    n2.mpub(topic, 4)
    # One consumer holds messages so that channel alpha has some in flight.
    cluster.consumers.add(topic, "alpha", [n1.tcp], hold=True, max_in_flight=2)

    page.goto(cluster.admin.page(f"/topics/{topic}"))
    r1 = page.locator(tid("node-row", node=n1.http))
    r2 = page.locator(tid("node-row", node=n2.http))
    expect(r1.get_by_test_id("messages")).to_have_text("3")
    expect(r2.get_by_test_id("messages")).to_have_text("4")
    expect(r2.get_by_test_id("depth")).to_have_text("0")  # the channels took them
    expect(r1.get_by_test_id("channels")).to_have_text("2")
    expect(r1.get_by_test_id("in-flight")).to_have_text("2")
    expect(r1.get_by_test_id("mem-disk")).to_have_text("0 + 0")

    alpha = page.locator(tid("channel-row", channel="alpha"))
    beta = page.locator(tid("channel-row", channel="beta"))
    expect(alpha.get_by_test_id("in-flight")).to_have_text("2")
    expect(alpha.get_by_test_id("depth")).to_have_text("5")
    expect(alpha.get_by_test_id("connections")).to_have_text("1")
    expect(beta.get_by_test_id("depth")).to_have_text("7")
    expect(beta.get_by_test_id("mem-disk")).to_have_text("7 + 0")
    expect(beta.get_by_test_id("messages")).to_have_text("7")
    total = page.get_by_test_id("topic-total")
    expect(total.get_by_test_id("messages")).to_have_text("7")
    expect(total.get_by_test_id("in-flight")).to_have_text("2")
    # Each node row has a tombstone button and a rate chart.
    expect(r1.get_by_test_id("tombstone")).to_be_visible()
    expect(r1.get_by_test_id("rate-chart")).to_be_visible()

    beta.get_by_test_id("channel-link").click()
    expect(page).to_have_url(re.compile(rf"/topics/{topic}/beta$"))
    expect(page.get_by_test_id("page-title")).to_contain_text("beta")


def test_channel_page_shows_clients(cluster: Cluster, page: Any) -> None:
    n1, n2 = cluster.nodes
    topic, channel = "pages_channel", "workers"
    for node in (n1, n2):
        node.create_channel(topic, channel)
    cluster.consumers.add(
        topic, channel, [n1.tcp], user_agent="billing-worker/2.1", snappy=True, client_id="w-snappy"
    )
    cluster.consumers.add(
        topic,
        channel,
        [n2.tcp],
        user_agent="shipping-worker/0.9",
        deflate=True,
        client_id="w-deflate",
    )
    n1.mpub(topic, 5)
    n2.mpub(topic, 6)

    page.goto(cluster.admin.page(f"/topics/{topic}/{channel}"))
    expect(page.get_by_test_id("page-title")).to_contain_text(channel)
    expect(page.get_by_test_id("crumb-topic")).to_have_text(topic)
    rows = page.get_by_test_id("client-row")
    expect(rows).to_have_count(2)
    snappy = page.locator(tid("client-row", client="w-snappy"))
    deflate = page.locator(tid("client-row", client="w-deflate"))
    expect(snappy.get_by_test_id("client-user-agent")).to_have_text("billing-worker/2.1")
    expect(snappy.get_by_test_id("badge-snappy")).to_be_visible()
    expect(snappy.get_by_test_id("badge-deflate")).to_have_count(0)
    expect(snappy.get_by_test_id("badge-tls")).to_have_count(0)
    expect(deflate.get_by_test_id("client-user-agent")).to_have_text("shipping-worker/0.9")
    expect(deflate.get_by_test_id("badge-deflate")).to_be_visible()
    expect(snappy.get_by_test_id("client-finished")).to_have_text("5")
    expect(deflate.get_by_test_id("client-finished")).to_have_text("6")
    expect(snappy.get_by_test_id("client-ready")).to_have_text(re.compile(r"^\d+$"))
    expect(snappy.get_by_test_id("client-in-flight")).to_have_text("0")
    expect(snappy.get_by_test_id("client-connected")).to_have_text(re.compile(r"^(\d+m )?\d+s$"))
    expect(snappy.get_by_test_id("client-host")).not_to_be_empty()
    # End-to-end latency percentiles (the cluster's nsqds track p50 and p99).
    nodes_table = page.get_by_test_id("channel-nodes")
    expect(nodes_table.get_by_role("columnheader", name="p99", exact=True)).to_be_visible()
    expect(page.get_by_test_id("channel-total").get_by_test_id("e2e").last).to_have_text(
        re.compile(r"^[\d.]+(ns|µs|ms|s)$")
    )
    # Per-node rows and the total.
    expect(page.locator(tid("node-row", node=n1.http)).get_by_test_id("messages")).to_have_text("5")
    expect(page.locator(tid("node-row", node=n2.http)).get_by_test_id("connections")).to_have_text(
        "1"
    )
    expect(page.get_by_test_id("channel-total").get_by_test_id("messages")).to_have_text("11")
    expect(page.get_by_test_id("channel-total").get_by_test_id("connections")).to_have_text("2")
    # The client's nsqd links to the node page.
    page.locator(tid("node-row", node=n1.http)).get_by_test_id("node-link").click()
    expect(page).to_have_url(re.compile(rf"/nodes/{re.escape(n1.http)}$"))


def test_nodes_and_node_pages(cluster: Cluster, page: Any) -> None:
    n1, n2 = cluster.nodes
    n1.create_channel("pages_node", "reader")
    n1.mpub("pages_node", 9)
    cluster.consumers.add("pages_node", "reader", [n1.tcp], user_agent="node-page-reader/1.0")

    page.goto(cluster.admin.page("/nodes"))
    expect(page.get_by_test_id("page-title")).to_have_text("Nodes")
    expect(page.get_by_test_id("node-row")).to_have_count(2)
    row1 = page.locator(tid("node-row", node=n1.http))
    expect(row1.get_by_test_id("node-version")).to_have_text("1.3.0")
    expect(row1.get_by_test_id("node-lookupd-conns")).to_have_text("1 / 1")
    expect(row1.get_by_test_id("node-status")).to_have_text("ok")
    expect(row1.get_by_test_id("node-topics")).to_contain_text("pages_node")
    expect(
        page.locator(tid("node-row", node=n2.http)).get_by_test_id("node-topics")
    ).not_to_contain_text("pages_node")

    row1.get_by_test_id("node-link").click()
    expect(page).to_have_url(re.compile(rf"/nodes/{re.escape(n1.http)}$"))
    expect(page.get_by_test_id("page-title")).to_contain_text(n1.http)
    block = page.locator(tid("node-topic", topic="pages_node"))
    expect(block.get_by_test_id("topic-messages")).to_have_text("9")
    expect(
        block.locator(tid("channel-row", channel="reader")).get_by_test_id("messages")
    ).to_have_text("9")
    expect(block.get_by_test_id("client-chip")).to_contain_text("node-page-reader/1.0")
    expect(block.get_by_test_id("tombstone")).to_be_visible()
    expect(page.get_by_test_id("node-total-clients")).not_to_have_text("0")


def test_lookup_page_lists_and_creates(cluster: Cluster, page: Any, dialogs: Any) -> None:
    cluster.nodes[0].pub("pages_lookup_live")
    page.goto(cluster.admin.page("/lookup"))
    expect(page.get_by_test_id("lookupd-host")).to_have_text(cluster.lookupd_http)
    live = page.locator(tid("lookup-topic", topic="pages_lookup_live"))
    expect(live).to_have_attribute("data-inactive", "false")

    page.get_by_test_id("create-topic-input").fill("made_in_browser")
    page.get_by_test_id("create-channel-input").fill("first_channel")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("action-result")).to_contain_text(
        "Created topic made_in_browser with channel first_channel"
    )
    assert "made_in_browser" in dialogs.messages[-1]
    row = page.locator(tid("lookup-topic", topic="made_in_browser"))
    expect(row).to_have_attribute("data-inactive", "true")
    expect(row.locator(tid("lookup-channel", channel="first_channel"))).to_be_visible()
    assert "made_in_browser" in cluster.lookupd_get("/topics")["topics"]
    assert "first_channel" in cluster.lookupd_get("/channels?topic=made_in_browser")["channels"]

    # A topic alone, and a name nsqd would refuse (caught before asking).
    page.get_by_test_id("create-topic-input").fill("bad name!")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("create-error")).to_contain_text("A topic name is 1")
    page.get_by_test_id("create-topic-input").fill("topic_only")
    page.get_by_test_id("create-submit").click()
    expect(page.locator(tid("lookup-topic", topic="topic_only"))).to_be_visible()
    assert "topic_only" in cluster.lookupd_get("/topics")["topics"]

    # Cancelling the confirmation changes nothing.
    dialogs.dismiss_next = True
    page.get_by_test_id("create-topic-input").fill("never_created")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("create-topic-input")).to_have_value("never_created")
    assert "never_created" not in cluster.lookupd_get("/topics")["topics"]


def test_rate_chart_draws_and_updates(cluster: Cluster, page: Any) -> None:
    n1, n2 = cluster.nodes
    topic = "pages_rate"
    n1.pub(topic)
    page.goto(cluster.admin.page(f"/topics/{topic}", refresh_ms=200))
    chart = page.get_by_test_id("topic-rate-chart")
    expect(chart).to_have_attribute("data-points", re.compile(r"^[2-9]$|^\d\d$"))
    with Publisher([n1, n2], topic, per_second=100):
        # The label reflects publishing: a non-zero rate, and more points than before.
        label = page.get_by_test_id("topic-rate-chart-label")
        expect(label).to_have_text(re.compile(r"^(?!0/s)[\d,.]+/s$"))
        points = int(chart.get_attribute("data-points") or 0)
        expect(chart).not_to_have_attribute("data-points", str(points))
        assert float(chart.get_attribute("data-rate") or 0) > 0
        expect(chart.locator("polyline")).to_have_count(1)
        node_chart = page.locator(tid("node-row", node=n2.http)).get_by_test_id("rate-chart")
        expect(node_chart).not_to_have_attribute("data-rate", re.compile(r"^(0\.000)?$"))
    # On the topics page too.
    page.get_by_test_id("nav").get_by_role("link", name="Topics").click()
    row_chart = page.locator(tid("topic-row", topic=topic)).get_by_test_id("rate-chart")
    expect(row_chart).to_have_attribute("data-points", re.compile(r"^[1-9]\d*$"))


def test_counter_increases_while_publishing(cluster: Cluster, page: Any) -> None:
    n1, _ = cluster.nodes
    topic = "pages_counter"
    n1.create_channel(topic, "counted")
    n1.mpub(topic, 10)
    page.goto(cluster.admin.page("/counter", refresh_ms=200))
    total = page.get_by_test_id("counter-total")
    expect(total).to_have_text(re.compile(r"^[\d,]+$"))
    expect(total).not_to_have_attribute("data-total", "")
    first = int(total.get_attribute("data-total") or 0)
    assert first >= 10
    with Publisher([n1], topic, per_second=200):
        page.wait_for_function(
            "(n) => Number(document.querySelector('[data-testid=counter-total]')"
            ".dataset.total) > n",
            arg=first + 50,
        )
        expect(page.get_by_test_id("counter-rate")).to_have_text(
            re.compile(r"^(?!0/s)[\d,.]+/s right now$")
        )
    shown = int((total.text_content() or "0").replace(",", ""))
    assert shown > first
    expect(page.get_by_test_id("counter-chart")).to_be_visible()


def test_missing_topic_and_channel_say_so(cluster: Cluster, page: Any) -> None:
    page.goto(cluster.admin.page("/topics/never_published"))
    expect(page.get_by_test_id("not-found")).to_contain_text("Topic never_published does not exist")
    expect(page.get_by_test_id("load-error")).to_have_count(0)
    cluster.nodes[0].pub("pages_missing_channel")
    page.goto(cluster.admin.page("/topics/pages_missing_channel/ghost"))
    expect(page.get_by_test_id("page-title")).to_contain_text("ghost")
    expect(page.get_by_test_id("no-producers")).to_contain_text("No nsqd has this channel")
    expect(page.get_by_test_id("action-delete")).to_have_count(0)
    expect(page.get_by_test_id("load-error")).to_have_count(0)


def test_unknown_page_says_so(cluster: Cluster, page: Any) -> None:
    page.goto(cluster.admin.page("/topics"))
    page.evaluate(
        "history.pushState({}, '', '/nowhere'); dispatchEvent(new PopStateEvent('popstate'))"
    )
    expect(page.get_by_test_id("page-not-found")).to_contain_text("Page not found")
