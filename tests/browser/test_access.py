"""What a person sees when things are not simple: an nsqd that does not answer, nsqadmin
itself unreachable, `--admin-user` with and without the ACL header (and the notifications
of actions), nsqd-address mode, and `--base-path`."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import expect

from .cluster import Cluster, Nsqd
from .test_pages import tid


def test_killed_nsqd_is_shown_not_answering(cluster: Cluster, page: Any) -> None:
    n1 = cluster.nodes[0]
    n1.mpub("err_live", 6)
    doomed = Nsqd(None, "doomed")
    try:
        doomed.mpub("err_live", 2)
        admin = cluster.start_admin(
            f"--nsqd-http-address={n1.http}", f"--nsqd-http-address={doomed.http}", lookupd=False
        )
        page.goto(admin.page("/topics"))
        expect(
            page.locator(tid("topic-row", topic="err_live")).get_by_test_id("topic-depth")
        ).to_have_text("8")
        doomed.proc.kill()

        # The topics page: a banner naming the node, and the rest still there.
        banner = page.get_by_test_id("error-banner")
        expect(banner).to_contain_text("1 node is not answering")
        expect(banner.locator(tid("unreachable-node", address=doomed.http))).to_contain_text(
            doomed.http
        )
        expect(
            page.locator(tid("topic-row", topic="err_live")).get_by_test_id("topic-depth")
        ).to_have_text("6")

        # The topic page: the live node's row, and the dead one marked.
        page.locator(tid("topic-row", topic="err_live")).get_by_test_id("topic-link").click()
        expect(page.locator(tid("node-row", node=n1.http)).get_by_test_id("depth")).to_have_text(
            "6"
        )
        down = page.locator(tid("node-row", node=doomed.http))
        expect(down.get_by_test_id("not-answering")).to_be_visible()
        expect(down).to_contain_text("not answering")
        expect(page.get_by_test_id("error-banner")).to_be_visible()

        # The nodes page.
        page.get_by_test_id("nav").get_by_role("link", name="Nodes").click()
        expect(
            page.locator(tid("node-row", node=doomed.http)).get_by_test_id("node-status")
        ).to_have_text("not answering")
        expect(
            page.locator(tid("node-row", node=n1.http)).get_by_test_id("node-status")
        ).to_have_text("ok")
        expect(
            page.locator(tid("node-row", node=n1.http)).get_by_test_id("node-topics")
        ).to_contain_text("err_live")

        # The node page of the dead node says so.
        page.goto(admin.page(f"/nodes/{doomed.http}"))
        expect(page.get_by_test_id("page-title").get_by_test_id("not-answering")).to_be_visible()

        # In nsqd-address mode there is no lookupd to show.
        page.get_by_test_id("nav").get_by_role("link", name="Lookup").click()
        expect(page.get_by_test_id("lookup-not-configured")).to_contain_text(
            "not configured with any nsqlookupd"
        )
    finally:
        doomed.close()


def test_nsqadmin_unreachable_is_shown(cluster: Cluster, page: Any) -> None:
    page.goto(cluster.admin.page("/topics"))
    expect(page.get_by_test_id("topics-table")).to_be_visible()
    page.route("**/api/**", lambda route: route.abort("connectionrefused"))
    expect(page.get_by_test_id("load-error")).to_contain_text("does not answer")
    expect(page.get_by_test_id("live-indicator")).to_contain_text("offline")
    expect(page.get_by_test_id("topics-table")).to_be_visible()  # the last data stays
    page.unroute("**/api/**")
    expect(page.get_by_test_id("load-error")).to_have_count(0)
    expect(page.get_by_test_id("live-indicator")).to_contain_text("live")


class _Notifications:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.received.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def notifications() -> Iterator[_Notifications]:
    n = _Notifications()
    try:
        yield n
    finally:
        n.close()


def test_admin_user_gates_actions(cluster: Cluster, make_page: Any, notifications: Any) -> None:
    topic = "acl_topic"
    for node in cluster.nodes:
        node.create_channel(topic, "c")
    admin = cluster.start_admin(
        "--admin-user=alice", f"--notification-http-endpoint={notifications.url}"
    )

    # Without the header: no action buttons, no create form, and the API refuses.
    anon = make_page()
    anon.goto(admin.page(f"/topics/{topic}"))
    expect(anon.get_by_test_id("readonly-note")).to_be_visible()
    expect(anon.get_by_test_id("node-row")).to_have_count(2)
    expect(anon.get_by_test_id("action-pause")).to_have_count(0)
    expect(anon.get_by_test_id("tombstone")).to_have_count(0)
    status = anon.evaluate(
        "async (t) => (await fetch(`/api/topics/${t}`,"
        " {method: 'POST', body: JSON.stringify({action: 'pause'})})).status",
        topic,
    )
    assert status == 403
    anon.goto(admin.page("/lookup"))
    expect(anon.get_by_test_id("lookup-topics")).to_be_visible()
    expect(anon.get_by_test_id("create-form")).to_have_count(0)

    # With it: the actions work, and each is posted to the notification endpoint.
    alice = make_page(extra_http_headers={"X-Forwarded-User": "alice"})
    alice.goto(admin.page(f"/topics/{topic}"))
    alice.get_by_test_id("action-pause").click()
    expect(alice.get_by_test_id("action-result")).to_contain_text(f"Topic {topic} paused")
    for node in cluster.nodes:
        assert node.topic_stats(topic)["paused"] is True  # type: ignore[index]
    alice.get_by_test_id("action-unpause").click()
    expect(alice.get_by_test_id("action-pause")).to_be_visible()
    for node in cluster.nodes:
        assert node.topic_stats(topic)["paused"] is False  # type: ignore[index]
    for _ in range(100):  # the notifications are posted in the background
        if len(notifications.received) >= 2:
            break
        alice.wait_for_timeout(50)
    actions = [(n["action"], n["topic"]) for n in notifications.received]
    assert ("pause_topic", topic) in actions and ("unpause_topic", topic) in actions
    assert notifications.received[0]["user_agent"]

    # A request that is not alice's (here rewritten on its way) is refused in words.
    alice.route(
        f"**/api/topics/{topic}",
        lambda route: route.continue_(
            headers={**route.request.headers, "x-forwarded-user": "mallory"}
        ),
    )
    alice.get_by_test_id("action-pause").click()
    result = alice.get_by_test_id("action-result")
    expect(result).to_have_attribute("data-kind", "error")
    expect(result).to_contain_text(f"Could not pause topic {topic}")
    expect(result).to_contain_text("only its admin users")
    for node in cluster.nodes:
        assert node.topic_stats(topic)["paused"] is False  # type: ignore[index]


def test_base_path(cluster: Cluster, page: Any) -> None:
    cluster.nodes[0].create_channel("base_topic", "base_channel")
    cluster.nodes[0].mpub("base_topic", 3)
    admin = cluster.start_admin(base_path="/admin/")
    page.goto(admin.page("/"))
    expect(
        page.locator(tid("topic-row", topic="base_topic")).get_by_test_id("topic-depth")
    ).to_have_text("0")
    page.locator(tid("topic-row", topic="base_topic")).get_by_test_id("topic-link").click()
    expect(page).to_have_url(re.compile(r"/admin/topics/base_topic$"))
    page.locator(tid("channel-row", channel="base_channel")).get_by_test_id("channel-link").click()
    expect(page).to_have_url(re.compile(r"/admin/topics/base_topic/base_channel$"))
    expect(page.get_by_test_id("channel-total").get_by_test_id("depth")).to_have_text("3")
    nav = page.get_by_test_id("nav")
    nav.get_by_role("link", name="Nodes").click()
    expect(page).to_have_url(re.compile(r"/admin/nodes$"))
    expect(page.get_by_test_id("node-row")).to_have_count(2)
    page.get_by_test_id("node-link").first.click()
    expect(page).to_have_url(re.compile(r"/admin/nodes/127\.0\.0\.1:\d+$"))
    expect(page.get_by_test_id("node-summary")).to_be_visible()
    nav.get_by_role("link", name="Counter").click()
    expect(page).to_have_url(re.compile(r"/admin/counter$"))
    expect(page.get_by_test_id("counter-total")).to_have_text(re.compile(r"^[\d,]+$"))
    nav.get_by_role("link", name="Lookup").click()
    expect(page.get_by_test_id("lookupd-host")).to_have_text(cluster.lookupd_http)
    # Reloading a deep link works (the server answers every page route under the base path).
    page.reload()
    expect(page.get_by_test_id("lookup-topics")).to_be_visible()
    page.go_back()
    expect(page).to_have_url(re.compile(r"/admin/counter$"))
    expect(page.get_by_test_id("counter")).to_be_visible()
