"""nsqadmin's actions clicked in the browser, each confirmed in a dialog that names its target,
and checked both on the page and in the nsqd / nsqlookupd it changed."""

from __future__ import annotations

import json
import re
from typing import Any

from playwright.sync_api import expect

from .cluster import Cluster, http
from .test_pages import tid


def _wait_for(predicate: Any, page: Any, what: str, timeout_ms: int = 5000) -> None:
    """Poll a cluster-side condition (the page is already checked with expect)."""
    step = 50
    for _ in range(timeout_ms // step):
        if predicate():
            return
        page.wait_for_timeout(step)
    raise AssertionError(f"timed out waiting for {what}")


def test_pause_and_unpause_topic(cluster: Cluster, page: Any, dialogs: Any) -> None:
    topic = "act_pause_topic"
    for node in cluster.nodes:
        node.create_channel(topic, "c")
        node.pub(topic)
    page.goto(cluster.admin.page(f"/topics/{topic}"))
    title = page.get_by_test_id("page-title")
    expect(title.get_by_test_id("paused-badge")).to_have_count(0)
    page.get_by_test_id("action-pause").click()
    expect(page.get_by_test_id("action-result")).to_have_text(re.compile(f"Topic {topic} paused"))
    assert topic in dialogs.messages[-1] and "Pause" in dialogs.messages[-1]
    expect(title.get_by_test_id("paused-badge")).to_be_visible()
    for node in cluster.nodes:
        expect(
            page.locator(tid("node-row", node=node.http)).get_by_test_id("paused-badge")
        ).to_be_visible()
        assert node.topic_stats(topic)["paused"] is True  # type: ignore[index]
    page.get_by_test_id("action-unpause").click()
    expect(page.get_by_test_id("action-result")).to_have_text(re.compile(f"Topic {topic} unpaused"))
    expect(title.get_by_test_id("paused-badge")).to_have_count(0)
    expect(page.get_by_test_id("action-pause")).to_be_visible()
    for node in cluster.nodes:
        assert node.topic_stats(topic)["paused"] is False  # type: ignore[index]


def test_pause_and_unpause_channel(cluster: Cluster, page: Any, dialogs: Any) -> None:
    topic, channel = "act_pause_channel", "held"
    for node in cluster.nodes:
        node.create_channel(topic, channel)
    page.goto(cluster.admin.page(f"/topics/{topic}/{channel}"))
    page.get_by_test_id("action-pause").click()
    expect(page.get_by_test_id("action-result")).to_contain_text(
        f"Channel {channel} of topic {topic} paused"
    )
    assert channel in dialogs.messages[-1] and topic in dialogs.messages[-1]
    expect(page.get_by_test_id("page-title").get_by_test_id("paused-badge")).to_be_visible()
    for node in cluster.nodes:
        assert node.channel_stats(topic, channel)["paused"] is True  # type: ignore[index]
    # The topic page shows the paused channel too.
    page.get_by_test_id("crumb-topic").click()
    expect(
        page.locator(tid("channel-row", channel=channel)).get_by_test_id("paused-badge")
    ).to_be_visible()
    page.locator(tid("channel-row", channel=channel)).get_by_test_id("channel-link").click()
    page.get_by_test_id("action-unpause").click()
    expect(page.get_by_test_id("action-result")).to_contain_text("unpaused")
    expect(page.get_by_test_id("page-title").get_by_test_id("paused-badge")).to_have_count(0)
    for node in cluster.nodes:
        assert node.channel_stats(topic, channel)["paused"] is False  # type: ignore[index]


def test_empty_topic_and_channel(cluster: Cluster, page: Any, dialogs: Any) -> None:
    n1, n2 = cluster.nodes
    topic = "act_empty"
    n1.mpub(topic, 25)
    n2.mpub(topic, 17)
    page.goto(cluster.admin.page(f"/topics/{topic}"))
    total = page.get_by_test_id("topic-total")
    expect(total.get_by_test_id("depth")).to_have_text("42")
    page.get_by_test_id("action-empty").click()
    assert "Empty topic act_empty" in dialogs.messages[-1]
    expect(page.get_by_test_id("action-result")).to_contain_text(f"Topic {topic} emptied")
    expect(total.get_by_test_id("depth")).to_have_text("0")
    expect(total.get_by_test_id("messages")).to_have_text("42")
    assert n1.topic_stats(topic)["depth"] == 0  # type: ignore[index]
    assert n2.topic_stats(topic)["depth"] == 0  # type: ignore[index]

    for node in (n1, n2):
        node.create_channel(topic, "backlog")
    n1.mpub(topic, 30)
    page.goto(cluster.admin.page(f"/topics/{topic}/backlog"))
    ctotal = page.get_by_test_id("channel-total")
    expect(ctotal.get_by_test_id("depth")).to_have_text("30")
    page.get_by_test_id("action-empty").click()
    assert "Empty channel backlog of topic act_empty" in dialogs.messages[-1]
    expect(page.get_by_test_id("action-result")).to_contain_text(
        "Channel backlog of topic act_empty emptied"
    )
    expect(ctotal.get_by_test_id("depth")).to_have_text("0")
    assert n1.channel_stats(topic, "backlog")["depth"] == 0  # type: ignore[index]


def test_delete_channel_then_topic(cluster: Cluster, page: Any, dialogs: Any) -> None:
    topic = "act_delete"
    for node in cluster.nodes:
        node.create_channel(topic, "doomed")
        node.create_channel(topic, "kept")
        node.pub(topic)
    page.goto(cluster.admin.page(f"/topics/{topic}/doomed"))
    page.get_by_test_id("action-delete").click()
    assert "Delete channel doomed of topic act_delete" in dialogs.messages[-1]
    expect(page.get_by_test_id("action-result")).to_contain_text(
        "Channel doomed of topic act_delete deleted"
    )
    expect(page).to_have_url(re.compile(rf"/topics/{topic}(\?.*)?$"))
    expect(page.locator(tid("channel-row", channel="kept"))).to_be_visible()
    expect(page.locator(tid("channel-row", channel="doomed"))).to_have_count(0)
    for node in cluster.nodes:
        assert node.channel_stats(topic, "doomed") is None
        assert node.channel_stats(topic, "kept") is not None

    page.get_by_test_id("action-delete").click()
    assert "Delete topic act_delete" in dialogs.messages[-1]
    expect(page.get_by_test_id("action-result")).to_contain_text(f"Topic {topic} deleted")
    expect(page).to_have_url(re.compile(r"/topics(\?.*)?$"))
    expect(page.get_by_test_id("topics-table")).to_be_visible()
    expect(page.locator(tid("topic-row", topic=topic))).to_have_count(0)
    for node in cluster.nodes:
        assert node.topic_stats(topic) is None
    assert topic not in cluster.lookupd_get("/topics")["topics"]


def test_cancelled_confirmation_does_nothing(cluster: Cluster, page: Any, dialogs: Any) -> None:
    topic = "act_cancel"
    cluster.nodes[0].mpub(topic, 4)
    page.goto(cluster.admin.page(f"/topics/{topic}"))
    expect(page.get_by_test_id("topic-total").get_by_test_id("depth")).to_have_text("4")
    dialogs.dismiss_next = True
    page.get_by_test_id("action-delete").click()
    assert topic in dialogs.messages[-1]
    expect(page.get_by_test_id("action-result")).to_have_count(0)
    assert cluster.nodes[0].topic_stats(topic) is not None


def _lookup_nodes(cluster: Cluster, topic: str) -> set[str]:
    """The nsqd lookupd hands out for `topic` (tombstoned producers are left out)."""
    status, body = http("GET", f"http://{cluster.lookupd_http}/lookup?topic={topic}")
    if status != 200:
        return set()
    producers = json.loads(body)["producers"]
    return {f"{p['broadcast_address']}:{p['http_port']}" for p in producers}


# nsqadmin tombstones the topic in lookupd, then deletes it from that nsqd, whose UNREGISTER
# then drops the (tombstoned) registration: as with Go's nsqlookupd, the tombstone flag itself
# is visible in lookupd's /nodes only in between, so the tests check what lasts: lookupd no
# longer hands out that nsqd for the topic, the nsqd no longer has it, the other nsqd still does.


def test_tombstone_topic_on_a_node(cluster: Cluster, page: Any, dialogs: Any) -> None:
    n1, n2 = cluster.nodes
    topic = "act_tombstone"
    n1.pub(topic)
    n2.pub(topic)
    page.goto(cluster.admin.page(f"/topics/{topic}"))
    page.locator(tid("node-row", node=n1.http)).get_by_test_id("tombstone").click()
    assert topic in dialogs.messages[-1] and n1.http in dialogs.messages[-1]
    expect(page.get_by_test_id("action-result")).to_contain_text(
        f"Topic {topic} tombstoned on {n1.http}"
    )
    _wait_for(lambda: _lookup_nodes(cluster, topic) == {n2.http}, page, "lookupd to drop nsqd 1")
    _wait_for(lambda: n1.topic_stats(topic) is None, page, "the topic to go from nsqd 1")
    assert n2.topic_stats(topic) is not None
    expect(page.locator(tid("node-row", node=n1.http))).to_have_count(0)
    expect(page.locator(tid("node-row", node=n2.http))).to_be_visible()


def test_tombstone_from_the_node_page(cluster: Cluster, page: Any, dialogs: Any) -> None:
    n2 = cluster.nodes[1]
    topic = "act_tombstone_node"
    n2.pub(topic)
    page.goto(cluster.admin.page(f"/nodes/{n2.http}"))
    block = page.locator(tid("node-topic", topic=topic))
    block.get_by_test_id("tombstone").click()
    assert topic in dialogs.messages[-1] and n2.http in dialogs.messages[-1]
    expect(page.get_by_test_id("action-result")).to_contain_text(
        f"Topic {topic} tombstoned on {n2.http}"
    )
    _wait_for(lambda: n2.http not in _lookup_nodes(cluster, topic), page, "lookupd to drop nsqd 2")
    expect(block).to_have_count(0)
    assert n2.topic_stats(topic) is None
    page.get_by_test_id("nav").get_by_role("link", name="Nodes").click()
    topics = page.locator(tid("node-row", node=n2.http)).get_by_test_id("node-topics")
    expect(topics).to_be_visible()
    expect(topics).not_to_contain_text(topic)


def test_delete_inactive_topic_and_channel_on_lookup(
    cluster: Cluster, page: Any, dialogs: Any
) -> None:
    lookupd = f"http://{cluster.lookupd_http}"
    assert http("POST", f"{lookupd}/channel/create?topic=act_lookup&channel=one", b"")[0] == 200
    assert http("POST", f"{lookupd}/channel/create?topic=act_lookup&channel=two", b"")[0] == 200
    page.goto(cluster.admin.page("/lookup"))
    row = page.locator(tid("lookup-topic", topic="act_lookup"))
    expect(row.get_by_test_id("lookup-channel")).to_have_count(2)
    row.locator(tid("lookup-channel", channel="one")).get_by_test_id("delete-channel").click()
    assert "Delete channel one of topic act_lookup" in dialogs.messages[-1]
    expect(row.get_by_test_id("lookup-channel")).to_have_count(1)
    assert cluster.lookupd_get("/channels?topic=act_lookup")["channels"] == ["two"]
    row.get_by_test_id("delete-topic").click()
    assert "Delete topic act_lookup" in dialogs.messages[-1]
    expect(row).to_have_count(0)
    assert "act_lookup" not in cluster.lookupd_get("/topics")["topics"]
