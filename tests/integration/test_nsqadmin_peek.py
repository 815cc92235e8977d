"""nsqadmin's peek route (beyond NSQ: ``GET /api/topics/<topic>/<channel>/peek``, the channel
page's "Peek at messages"): each nsqd's ``/channel/peek`` of the channel, per node, a node
without the channel or that fails shown as that node's error, the admin ACL, and nothing
consumed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.nsqadmin_cluster import (
    Cluster,
    get_json,
    make_topic,
    nsqd_topic,
    post,
    running_admin,
    start_nsqd,
    unique_name,
)
from trionsq.testing import DaemonProcess


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with (
        DaemonProcess("nsqlookupd") as lookupd,
        start_nsqd(lookupd) as n1,
        start_nsqd(lookupd) as n2,
    ):
        yield Cluster(lookupd, [n1, n2])


async def test_peek_shows_each_nodes_messages_and_consumes_nothing(cluster: Cluster) -> None:
    topic = unique_name("peek")
    await make_topic(cluster, topic, "ch", [2, 3])
    n1, n2 = cluster.nsqd_http
    await post(n1, f"/pub?topic={topic}&defer=600000", b"later")
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        response = await client.get(f"/api/topics/{topic}/ch/peek?n=10")
        assert response.status_code == 200
        assert response.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
        answer = response.json()
        assert (answer["message"], answer["errors"]) == ("", [])
        nodes = {node["node"]: node for node in answer["nodes"]}
        assert set(nodes) == {n1, n2}
        assert [m["body"] for m in nodes[n1]["messages"]] == ["hello"] * 2
        assert [m["body"] for m in nodes[n2]["messages"]] == ["hello"] * 3
        assert [m["body"] for m in nodes[n1]["deferred"]] == ["later"]
        assert nodes[n1]["deferred"][0]["deferred_until"] > 0
        assert (nodes[n1]["topic_name"], nodes[n1]["channel_name"]) == (topic, "ch")
        assert (nodes[n2]["depth"], nodes[n2]["deferred_count"]) == (3, 0)
        # n goes to every nsqd; the default is 10.
        answer = (await client.get(f"/api/topics/{topic}/ch/peek?n=1")).json()
        assert sorted(len(n["messages"]) for n in answer["nodes"]) == [1, 1]
        answer = (await client.get(f"/api/topics/{topic}/ch/peek")).json()
        assert sorted(len(n["messages"]) for n in answer["nodes"]) == [2, 3]
        for bad in ("0", "1001", "x", "-2"):
            response = await client.get(f"/api/topics/{topic}/ch/peek?n={bad}")
            assert (response.status_code, response.json()) == (400, {"message": "INVALID_N"})
    # Nothing was consumed.
    for address, depth in ((n1, 2), (n2, 3)):
        stats = await nsqd_topic(address, topic)
        assert stats is not None
        (channel,) = stats["channels"]
        assert (channel["depth"], channel["in_flight_count"]) == (depth, 0)


async def test_a_node_without_the_channel_is_that_nodes_error(cluster: Cluster) -> None:
    topic = unique_name("peekpart")
    await make_topic(cluster, topic, "ch", [1, 1])
    n1, n2 = cluster.nsqd_http
    await post(n1, f"/channel/create?topic={topic}&channel=only1")
    await post(n1, f"/pub?topic={topic}", b"one")
    args = [f"--nsqd-http-address={a}" for a in cluster.nsqd_http]
    async with running_admin(*args) as (_, client):
        answer = (await client.get(f"/api/topics/{topic}/only1/peek")).json()
        assert (answer["message"], answer["errors"]) == ("", [])
        nodes = {node["node"]: node for node in answer["nodes"]}
        assert [m["body"] for m in nodes[n1]["messages"]] == ["one"]
        assert nodes[n2] == {
            "node": n2,
            "error": 'HTTP 404: {"message":"CHANNEL_NOT_FOUND"}',
        }
        # A topic no nsqd has: no node to peek at.
        response = await client.get(f"/api/topics/{unique_name('none')}/ch/peek")
        assert (response.status_code, response.json()["nodes"]) == (200, [])


async def test_only_admin_users_may_peek(cluster: Cluster) -> None:
    topic = unique_name("peekacl")
    await make_topic(cluster, topic, "ch", [1, 0])
    args = (
        f"--lookupd-http-address={cluster.lookupd_http}",
        "--admin-user=alice",
        "--acl-http-header=X-Auth-User",
    )
    async with running_admin(*args) as (_, client):
        for headers in ({}, {"X-Auth-User": "mallory"}):
            response = await client.get(f"/api/topics/{topic}/ch/peek", headers=headers)
            assert (response.status_code, response.json()) == (403, {"message": "FORBIDDEN"})
        response = await client.get(
            f"/api/topics/{topic}/ch/peek", headers={"X-Auth-User": "alice"}
        )
        assert response.status_code == 200
        bodies = [m["body"] for n in response.json()["nodes"] for m in n["messages"]]
        assert bodies == ["hello"]
    peeked = await get_json(cluster.nsqd_http[0], f"/channel/peek?topic={topic}&channel=ch")
    assert peeked["depth"] == 1  # still queued
