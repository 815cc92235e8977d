"""The channel page's "Peek at messages" (beyond NSQ): the queued and deferred messages of each
nsqd, text and binary bodies, the count asked for, a node without the channel, nothing
consumed by looking, and the section closed to non-admin users when --admin-user is set."""

from __future__ import annotations

import base64
from typing import Any

from playwright.sync_api import expect

from .cluster import Cluster, http
from .test_pages import tid

BINARY = b"\x00\xffbin"


def test_channel_page_peeks_at_each_nodes_messages(cluster: Cluster, page: Any) -> None:
    n1, n2 = cluster.nodes
    topic = "peek_page"
    for node in (n1, n2):
        node.create_channel(topic, "c")
    n1.pub(topic, b"hello peek")
    n1.pub(topic, BINARY)
    status, _ = http("POST", f"http://{n1.http}/pub?topic={topic}&defer=600000", b"later on")
    assert status == 200
    n2.pub(topic, b"from n2")
    n2.create_channel(topic, "only2")  # a channel n1 does not have

    page.goto(cluster.admin.page(f"/topics/{topic}/c"))
    for node in (n1, n2):  # both known to nsqlookupd, so both are peeked at
        expect(page.locator(tid("node-row", node=node.http))).to_be_visible()
    expect(page.get_by_test_id("peek-results")).to_be_empty()
    page.get_by_test_id("peek-button").click()

    node1 = page.locator(tid("peek-node", node=n1.http))
    node2 = page.locator(tid("peek-node", node=n2.http))
    expect(node1.get_by_test_id("peek-summary")).to_contain_text("2 queued · 1 deferred")
    rows1 = node1.get_by_test_id("peek-message")
    expect(rows1).to_have_count(3)
    expect(rows1.nth(0).get_by_test_id("peek-body")).to_have_text("hello peek")
    expect(rows1.nth(0).get_by_test_id("peek-queue")).to_have_text("memory")
    expect(rows1.nth(0).get_by_test_id("peek-attempts")).to_have_text("0")
    expect(rows1.nth(0).get_by_test_id("peek-base64")).to_have_count(0)
    expect(rows1.nth(1).get_by_test_id("peek-body")).to_have_text(base64.b64encode(BINARY).decode())
    expect(rows1.nth(1).get_by_test_id("peek-base64")).to_be_visible()
    expect(rows1.nth(2).get_by_test_id("peek-body")).to_have_text("later on")
    expect(rows1.nth(2).get_by_test_id("peek-queue")).to_have_text("deferred")
    expect(rows1.nth(2).get_by_test_id("peek-due")).not_to_have_text(
        "\u2013"
    )  # a date, not the dash of "none"
    expect(node2.get_by_test_id("peek-message")).to_have_count(1)
    expect(node2.get_by_test_id("peek-body")).to_have_text("from n2")
    # The IDs are the messages' own.
    peeked = http("GET", f"http://{n1.http}/channel/peek?topic={topic}&channel=c")[1].decode()
    first_id = rows1.nth(0).get_by_test_id("peek-id").inner_text()
    assert f'"id":"{first_id}"' in peeked.replace(" ", "")

    # The count asked for goes to every nsqd; the results stay while the page polls.
    page.get_by_test_id("peek-n").fill("1")
    page.get_by_test_id("peek-button").click()
    expect(node1.get_by_test_id("peek-message")).to_have_count(2)  # 1 queued, 1 deferred
    expect(node1.get_by_test_id("peek-body").first).to_have_text("hello peek")
    page.wait_for_timeout(600)  # a few polls (refresh=250 ms)
    expect(node1.get_by_test_id("peek-message")).to_have_count(2)

    # Looking consumed nothing.
    stats = n1.channel_stats(topic, "c")
    assert stats is not None
    assert (stats["depth"], stats["deferred_count"], stats["in_flight_count"]) == (2, 1, 0)

    # A node without the channel says so; the other still shows its messages.
    page.goto(cluster.admin.page(f"/topics/{topic}/only2"))
    expect(page.locator(tid("node-row", node=n2.http))).to_be_visible()
    page.get_by_test_id("peek-button").click()
    expect(
        page.locator(tid("peek-node", node=n1.http)).get_by_test_id("peek-node-error")
    ).to_have_text("This nsqd does not have this channel.")
    expect(
        page.locator(tid("peek-node", node=n2.http)).get_by_test_id("peek-node-empty")
    ).to_be_visible()


def test_peek_is_for_admin_users_only(cluster: Cluster, make_page: Any) -> None:
    n1 = cluster.nodes[0]
    n1.create_channel("peek_acl", "c")
    n1.pub("peek_acl", b"secret")
    admin = cluster.start_admin("--admin-user=alice", "--acl-http-header=X-Auth-User")

    visitor = make_page()
    visitor.goto(admin.page("/topics/peek_acl/c"))
    expect(visitor.get_by_test_id("peek-readonly")).to_contain_text("admin users")
    expect(visitor.get_by_test_id("peek-button")).to_have_count(0)
    expect(visitor.get_by_test_id("peek-body")).to_have_count(0)

    alice = make_page(extra_http_headers={"X-Auth-User": "alice"})
    alice.goto(admin.page("/topics/peek_acl/c"))
    expect(alice.locator(tid("node-row", node=n1.http))).to_be_visible()
    alice.get_by_test_id("peek-button").click()
    expect(alice.locator(tid("peek-node", node=n1.http)).get_by_test_id("peek-body")).to_have_text(
        "secret"
    )
