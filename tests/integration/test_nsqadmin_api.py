"""nsqadmin end to end against a real cluster on 127.0.0.1 (nsqlookupd + two nsqds as
subprocesses, nsqadmin in-process on hypercorn): every API route and action, checked through
the nsqds' and nsqlookupd's own HTTP APIs; nsqd-address mode, dead and frozen nodes, the ACL,
notifications, /config and the base path."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from tests.integration.nsqadmin_cluster import (
    Cluster,
    closed_port,
    eventually,
    get_json,
    http_address,
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


# -- reading ------------------------------------------------------------------------------


async def test_topics_list_stats_and_aggregates(cluster: Cluster) -> None:
    topic = unique_name("agg")
    await make_topic(cluster, topic, "ch", [2, 3])
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        answer = (await client.get("/api/topics")).json()
        assert topic in answer["topics"] and answer["topics"] == sorted(answer["topics"])
        assert answer["message"] == "" and answer["errors"] == []

        answer = (await client.get("/api/topics?stats=true")).json()
        stats = answer["stats"][topic]
        assert stats["message_count"] == 5
        assert stats["node_count"] == 2 and stats["channel_count"] == 1
        assert stats["depth"] == 0  # the messages went to the channel
        assert stats["paused"] is False

        response = await client.get(f"/api/topics/{topic}")
        assert response.status_code == 200
        assert response.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
        t = response.json()
        assert t["node"] == "*" and t["topic_name"] == topic
        assert t["message_count"] == 5
        assert sorted(n["node"] for n in t["nodes"]) == sorted(cluster.nsqd_http)
        assert [c["channel_name"] for c in t["channels"]] == ["ch"]
        assert t["channels"][0]["depth"] == 5
        assert t["message"] == "" and t["errors"] == []

        c = (await client.get(f"/api/topics/{topic}/ch")).json()
        assert c["node"] == "*" and c["channel_name"] == "ch" and c["topic_name"] == topic
        assert c["depth"] == 5 and c["message_count"] == 5
        assert {n["node"]: n["depth"] for n in c["nodes"]} == dict(
            zip(cluster.nsqd_http, [2, 3], strict=True)
        )


async def test_channel_clients(cluster: Cluster) -> None:
    topic = unique_name("cli")
    await make_topic(cluster, topic, "ch", [1, 0])
    host, port = cluster.nsqds[0].tcp_address
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(f"  V2SUB {topic} ch\nRDY 0\n".encode())
        async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):

            async def one_client() -> Any:
                answer = (await client.get(f"/api/topics/{topic}/ch")).json()
                return answer if answer["clients"] else None

            answer = await eventually(one_client)
            [c] = answer["clients"]
            assert answer["client_count"] == 1
            assert c["node"] == cluster.nsqd_http[0]
            assert c["remote_address"].startswith("127.0.0.1:")
            assert c["version"] == "V2" and c["ready_count"] == 0
            assert isinstance(c["connected"], int)


async def test_nodes_node_and_counter(cluster: Cluster) -> None:
    topic = unique_name("nodes")
    await make_topic(cluster, topic, "ch", [4, 1])
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        answer = (await client.get("/api/nodes")).json()
        nodes = {f"{n['broadcast_address']}:{n['http_port']}": n for n in answer["nodes"]}
        assert set(cluster.nsqd_http) <= set(nodes)
        first = nodes[cluster.nsqd_http[0]]
        assert first["version"] == "1.3.0" and first["unreachable"] is False
        assert first["remote_addresses"][0].startswith(cluster.lookupd_http + "/")
        assert {"topic": topic, "tombstoned": False} in first["topics"]
        assert answer["errors"] == []

        node = (await client.get(f"/api/nodes/{cluster.nsqd_http[0]}")).json()
        assert node["node"] == cluster.nsqd_http[0]
        [t] = [t for t in node["topics"] if t["topic_name"] == topic]
        assert t["message_count"] == 4
        assert node["total_messages"] >= 4 and node["total_clients"] >= 0

        missing = await client.get("/api/nodes/127.0.0.1:1")
        assert missing.status_code == 404
        assert missing.json() == {"message": "NODE_NOT_FOUND"}

        counter = (await client.get("/api/counter")).json()
        for address, count in zip(cluster.nsqd_http, [4, 1], strict=True):
            entry = counter["stats"][f"{topic}:ch:{address}"]
            assert entry == {
                "node": address,
                "topic_name": topic,
                "channel_name": "ch",
                "message_count": count,
            }


async def test_nsqd_address_mode(cluster: Cluster) -> None:
    topic = unique_name("nsqdmode")
    await make_topic(cluster, topic, "ch", [1, 2])
    args = [f"--nsqd-http-address={a}" for a in cluster.nsqd_http]
    async with running_admin(*args) as (admin, client):
        assert (await client.get("/api/topics")).json()["topics"].count(topic) == 1
        stats = (await client.get("/api/topics?stats=true")).json()["stats"][topic]
        assert stats["message_count"] == 3 and stats["node_count"] == 2
        t = (await client.get(f"/api/topics/{topic}")).json()
        assert t["message_count"] == 3 and len(t["nodes"]) == 2
        nodes = (await client.get("/api/nodes")).json()["nodes"]
        assert sorted(f"{n['broadcast_address']}:{n['http_port']}" for n in nodes) == sorted(
            cluster.nsqd_http
        )
        assert all(n["remote_addresses"] == [] and not n["unreachable"] for n in nodes)
        inactive = (await client.get("/api/topics?inactive=true")).json()
        assert inactive["topics"] == {}
        # actions work without any lookupd
        response = await client.post(f"/api/topics/{topic}", json={"action": "pause"})
        assert response.json() == {"message": "", "errors": []}
        for address in cluster.nsqd_http:
            assert (await nsqd_topic(address, topic) or {})["paused"] is True
        assert admin.options.nsqd_http_addresses == cluster.nsqd_http


# -- dead nodes ---------------------------------------------------------------------------


async def test_dead_nsqd_in_nsqd_mode(cluster: Cluster) -> None:
    topic = unique_name("dead")
    await make_topic(cluster, topic, "ch", [1, 1])
    dead = f"127.0.0.1:{closed_port()}"
    args = [f"--nsqd-http-address={cluster.nsqd_http[0]}", f"--nsqd-http-address={dead}"]
    async with running_admin(*args) as (_, client):
        for path in ("/api/topics", f"/api/topics/{topic}", "/api/nodes", "/api/counter"):
            response = await client.get(path)
            assert response.status_code == 200, path
            answer = response.json()
            assert answer["message"].startswith("WARNING: "), path
            assert dead in answer["message"]
            assert {"address": dead, "error": "connection refused"} in answer["errors"], path
        nodes = (await client.get("/api/nodes")).json()["nodes"]
        [unreachable] = [n for n in nodes if n["unreachable"]]
        assert f"{unreachable['broadcast_address']}:{unreachable['http_port']}" == dead
        assert unreachable["version"] == ""
        t = (await client.get(f"/api/topics/{topic}")).json()
        assert t["message_count"] == 1  # the live node still counts

    async with running_admin(f"--nsqd-http-address={dead}") as (_, client):
        for path in ("/api/topics", "/api/nodes", "/api/counter", f"/api/topics/{topic}"):
            response = await client.get(path)
            assert response.status_code == 502, path
            answer = response.json()
            assert answer["message"].startswith("UPSTREAM_ERROR: failed to query any nsqd: ")
            assert answer["errors"] == [{"address": dead, "error": "connection refused"}]


async def test_frozen_nsqd_in_lookupd_mode(cluster: Cluster) -> None:
    topic = unique_name("frozen")
    with start_nsqd(cluster.lookupd) as extra:
        extra_http = http_address(extra)
        await post(extra_http, f"/pub?topic={topic}", b"x")
        await post(cluster.nsqd_http[0], f"/pub?topic={topic}", b"x")

        async def registered() -> bool:
            lookup = await get_json(cluster.lookupd_http, f"/lookup?topic={topic}")
            return len(lookup["producers"]) == 2

        await eventually(registered)
        os.kill(extra.proc.pid, signal.SIGSTOP)
        try:
            args = (
                f"--lookupd-http-address={cluster.lookupd_http}",
                "--http-client-request-timeout=500ms",
            )
            async with running_admin(*args) as (_, client):
                t = (await client.get(f"/api/topics/{topic}")).json()
                assert t["message_count"] == 1
                assert t["message"].startswith("WARNING: ")
                assert t["errors"] == [{"address": extra_http, "error": "timed out after 500ms"}]

                nodes = (await client.get("/api/nodes")).json()
                [frozen] = [
                    n
                    for n in nodes["nodes"]
                    if f"{n['broadcast_address']}:{n['http_port']}" == extra_http
                ]
                assert frozen["unreachable"] is True and frozen["version"] == "1.3.0"
                assert {"address": extra_http, "error": "timed out after 500ms"} in nodes["errors"]
                response = await client.get(f"/api/nodes/{extra_http}")
                assert response.status_code == 502
        finally:
            os.kill(extra.proc.pid, signal.SIGCONT)


async def test_dead_lookupd(cluster: Cluster) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    async with running_admin(
        f"--lookupd-http-address={cluster.lookupd_http}", f"--lookupd-http-address={dead}"
    ) as (_, client):
        answer = (await client.get("/api/topics")).json()
        assert answer["errors"] == [{"address": dead, "error": "connection refused"}]
        assert answer["message"].startswith("WARNING: ")
    async with running_admin(f"--lookupd-http-address={dead}") as (_, client):
        response = await client.get("/api/topics")
        assert response.status_code == 502
        assert response.json()["message"].startswith(
            "UPSTREAM_ERROR: failed to query any nsqlookupd: "
        )


# -- actions ------------------------------------------------------------------------------


async def test_create_topic_and_channel_and_inactive(cluster: Cluster) -> None:
    lonely = unique_name("lonely")
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        response = await client.post("/api/topics", json={"topic": lonely, "channel": "c1"})
        assert response.status_code == 200 and response.json() == {"message": "", "errors": []}
        assert lonely in (await get_json(cluster.lookupd_http, "/topics"))["topics"]
        channels = await get_json(cluster.lookupd_http, f"/channels?topic={lonely}")
        assert channels["channels"] == ["c1"]
        inactive = (await client.get("/api/topics?inactive=true")).json()["topics"]
        assert inactive[lonely] == ["c1"]

        # a channel for a topic the nsqds have is created on them too
        topic = unique_name("create")
        await make_topic(cluster, topic, "ch", [0, 0])
        response = await client.post("/api/topics", json={"topic": topic, "channel": "new"})
        assert response.json()["errors"] == []
        for address in cluster.nsqd_http:
            t = await nsqd_topic(address, topic)
            assert t is not None and "new" in [c["channel_name"] for c in t["channels"]]
        assert topic not in (await client.get("/api/topics?inactive=true")).json()["topics"]

        for body, message in (
            ({"topic": "bad topic"}, "INVALID_TOPIC"),
            ({}, "INVALID_TOPIC"),
            ({"topic": "ok", "channel": "bad/channel"}, "INVALID_CHANNEL"),
        ):
            response = await client.post("/api/topics", json=body)
            assert (response.status_code, response.json()) == (400, {"message": message})
        response = await client.post("/api/topics", content=b"")
        assert (response.status_code, response.json()) == (400, {"message": "EOF"})


async def test_pause_unpause_empty(cluster: Cluster) -> None:
    topic = unique_name("pause")
    await make_topic(cluster, topic, "ch", [2, 2])
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        response = await client.post(f"/api/topics/{topic}", json={"action": "pause"})
        assert response.json() == {"message": "", "errors": []}
        for address in cluster.nsqd_http:
            assert (await nsqd_topic(address, topic) or {})["paused"] is True
        assert (await client.get(f"/api/topics/{topic}")).json()["paused"] is True
        await client.post(f"/api/topics/{topic}", json={"action": "unpause"})
        for address in cluster.nsqd_http:
            assert (await nsqd_topic(address, topic) or {})["paused"] is False

        await client.post(f"/api/topics/{topic}/ch", json={"action": "pause"})
        for address in cluster.nsqd_http:
            [channel] = (await nsqd_topic(address, topic) or {})["channels"]
            assert channel["paused"] is True
        assert (await client.get(f"/api/topics/{topic}/ch")).json()["paused"] is True
        await client.post(f"/api/topics/{topic}/ch", json={"action": "unpause"})
        await client.post(f"/api/topics/{topic}/ch", json={"action": "empty"})
        for address in cluster.nsqd_http:
            [channel] = (await nsqd_topic(address, topic) or {})["channels"]
            assert channel["paused"] is False and channel["depth"] == 0

        await post(cluster.nsqd_http[0], f"/pub?topic={topic}&defer=0", b"x")
        await client.post(f"/api/topics/{topic}", json={"action": "pause"})
        await post(cluster.nsqd_http[0], f"/pub?topic={topic}", b"y")
        assert (await nsqd_topic(cluster.nsqd_http[0], topic) or {})["depth"] == 1
        await client.post(f"/api/topics/{topic}", json={"action": "empty"})
        assert (await nsqd_topic(cluster.nsqd_http[0], topic) or {})["depth"] == 0

        for path in (f"/api/topics/{topic}", f"/api/topics/{topic}/ch"):
            response = await client.post(path, json={"action": "explode"})
            assert (response.status_code, response.json()) == (
                400,
                {"message": "INVALID_ACTION"},
            )


async def test_delete_channel_and_topic(cluster: Cluster) -> None:
    topic = unique_name("del")
    await make_topic(cluster, topic, "ch", [1, 1])
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        response = await client.delete(f"/api/topics/{topic}/ch")
        assert response.json() == {"message": "", "errors": []}
        for address in cluster.nsqd_http:
            assert (await nsqd_topic(address, topic) or {})["channels"] == []
        assert (await get_json(cluster.lookupd_http, f"/channels?topic={topic}"))["channels"] == []

        response = await client.delete(f"/api/topics/{topic}")
        assert response.json() == {"message": "", "errors": []}
        for address in cluster.nsqd_http:
            assert await nsqd_topic(address, topic) is None
        assert topic not in (await get_json(cluster.lookupd_http, "/topics"))["topics"]


async def test_tombstone_node_for_topic(cluster: Cluster) -> None:
    topic = unique_name("tomb")
    await make_topic(cluster, topic, "ch", [1, 1])
    node = cluster.nsqd_http[0]
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        response = await client.request("DELETE", f"/api/nodes/{node}", json={"topic": topic})
        assert response.json() == {"message": "", "errors": []}
        assert await nsqd_topic(node, topic) is None
        assert await nsqd_topic(cluster.nsqd_http[1], topic) is not None
        lookup = await get_json(cluster.lookupd_http, f"/lookup?topic={topic}")
        assert [f"127.0.0.1:{p['http_port']}" for p in lookup["producers"]] == [
            cluster.nsqd_http[1]
        ]

        response = await client.request("DELETE", f"/api/nodes/{node}", content=b"nope")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_BODY"})
        response = await client.request("DELETE", f"/api/nodes/{node}", json={"topic": "a b"})
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_TOPIC"})


async def test_action_on_unreachable_node_is_a_warning(cluster: Cluster) -> None:
    topic = unique_name("warn")
    await make_topic(cluster, topic, "ch", [1, 1])
    dead = f"127.0.0.1:{closed_port()}"
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (_, client):
        response = await client.request("DELETE", f"/api/nodes/{dead}", json={"topic": topic})
        assert response.status_code == 502  # Go: the node's /info is needed
        assert response.json()["errors"] == [{"address": dead, "error": "connection refused"}]


# -- ACL, notifications, /config, base path -----------------------------------------------


async def test_acl(cluster: Cluster, tmp_path: Any) -> None:
    topic = unique_name("acl")
    args = (
        f"--lookupd-http-address={cluster.lookupd_http}",
        f"--dev-static-dir={tmp_path}",
        "--admin-user=alice",
        "--admin-user=root",
        "--acl-http-header=X-Auth-User",
    )
    async with running_admin(*args) as (_, client):
        for headers in ({}, {"X-Auth-User": "mallory"}, {"X-Forwarded-User": "alice"}):
            for method, path, body in (
                ("POST", "/api/topics", {"topic": topic}),
                ("POST", f"/api/topics/{topic}", {"action": "pause"}),
                ("DELETE", f"/api/topics/{topic}", None),
                ("DELETE", f"/api/topics/{topic}/ch", None),
                ("DELETE", "/api/nodes/x:1", {"topic": topic}),
            ):
                response = await client.request(method, path, json=body, headers=headers)
                assert (response.status_code, response.json()) == (
                    403,
                    {"message": "FORBIDDEN"},
                ), (method, path, headers)
        assert topic not in (await get_json(cluster.lookupd_http, "/topics"))["topics"]
        # reading needs no rights
        assert (await client.get("/api/topics")).status_code == 200

        response = await client.post(
            "/api/topics", json={"topic": topic}, headers={"X-Auth-User": "alice"}
        )
        assert response.status_code == 200
        assert topic in (await get_json(cluster.lookupd_http, "/topics"))["topics"]

        # the page's config says whether this request may act (placeholder page: no index)
        page = await client.get("/", headers={"X-Auth-User": "root"})
        assert '"isAdmin":true' in page.text
        page = await client.get("/topics", headers={"X-Auth-User": "mallory"})
        assert '"isAdmin":false' in page.text


async def _notification_server(
    nursery: trio.Nursery, send: trio.MemorySendChannel[dict[str, Any]]
) -> int:
    """A tiny HTTP server taking POSTed JSON; returns its port."""

    async def handle(stream: trio.SocketStream) -> None:
        buffer = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = {
                    k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
                }
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    buffer += await stream.receive_some(65536)
                body, buffer = buffer[:length], buffer[length:]
                await send.send(
                    {
                        "request": lines[0],
                        "content_type": headers.get("content-type"),
                        **json.loads(body),
                    }
                )
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def test_notifications(cluster: Cluster, nursery: trio.Nursery) -> None:
    send, receive = trio.open_memory_channel[dict[str, Any]](100)
    port = await _notification_server(nursery, send)
    topic = unique_name("notify")
    await make_topic(cluster, topic, "ch", [1, 1])
    args = (
        f"--lookupd-http-address={cluster.lookupd_http}",
        f"--notification-http-endpoint=http://127.0.0.1:{port}/hook",
    )
    async with running_admin(*args) as (admin, client):
        headers = {"User-Agent": "pytest-ua", "Authorization": "Basic ZGF2ZTpwdw=="}  # dave:pw
        calls: list[tuple[str, str, Any, str, str, str]] = [
            ("POST", "/api/topics", {"topic": topic, "channel": "c2"}, "create_topic", "", ""),
            ("POST", f"/api/topics/{topic}", {"action": "pause"}, "pause_topic", "", ""),
            ("POST", f"/api/topics/{topic}", {"action": "unpause"}, "unpause_topic", "", ""),
            ("POST", f"/api/topics/{topic}", {"action": "empty"}, "empty_topic", "", ""),
            ("POST", f"/api/topics/{topic}/ch", {"action": "pause"}, "pause_channel", "ch", ""),
            (
                "POST",
                f"/api/topics/{topic}/ch",
                {"action": "unpause"},
                "unpause_channel",
                "ch",
                "",
            ),
            ("POST", f"/api/topics/{topic}/ch", {"action": "empty"}, "empty_channel", "ch", ""),
            ("DELETE", f"/api/topics/{topic}/c2", None, "delete_channel", "c2", ""),
            (
                "DELETE",
                f"/api/nodes/{cluster.nsqd_http[0]}",
                {"topic": topic},
                "tombstone_topic_producer",
                "",
                cluster.nsqd_http[0],
            ),
            ("DELETE", f"/api/topics/{topic}", None, "delete_topic", "", ""),
        ]
        expected: list[tuple[str, str, str, str]] = []
        for method, path, body, action, channel, node in calls:
            response = await client.request(method, path, json=body, headers=headers)
            assert response.status_code == 200, (path, response.text)
            expected.append((action, channel, node, path))
            if action == "create_topic":
                expected.append(("create_channel", "c2", "", path))
        with trio.fail_after(10):
            received = [await receive.receive() for _ in expected]
        for got, (action, channel, node, path) in zip(received, expected, strict=True):
            assert got["request"] == "POST /hook HTTP/1.1"
            assert got["content_type"] == "application/json"
            assert got["action"] == action
            assert got["topic"] == topic
            assert got.get("channel", "") == channel
            assert got.get("node", "") == node
            assert got["user"] == "dave"
            assert got["user_agent"] == "pytest-ua"
            assert got["remote_ip"].startswith("127.0.0.1:")
            assert got["url"] == f"http://127.0.0.1:{admin.http_port}{path}"
            assert got["via"] == socket.gethostname()
            assert isinstance(got["timestamp"], int)
            assert abs(got["timestamp"] - time.time()) < 60
        # a failed request (bad action) notifies nothing
        await client.post(f"/api/topics/{topic}", json={"action": "nope"})
        await trio.sleep(0.2)
        with pytest.raises(trio.WouldBlock):
            receive.receive_nowait()


async def test_config_endpoint(cluster: Cluster) -> None:
    async with running_admin(f"--lookupd-http-address={cluster.lookupd_http}") as (admin, client):
        assert (await client.get("/config/log_level")).json() == 2
        assert (await client.get("/config/http_client_connect_timeout")).json() == 2_000_000_000
        assert (await client.get("/config/nsqlookupd_http_addresses")).json() == [
            cluster.lookupd_http
        ]
        response = await client.put("/config/log_level", content=b"debug")
        assert response.json() == 1 and admin.options.log_level == "debug"
        response = await client.put("/config/log_level", content=b"chatty")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_VALUE"})
        response = await client.put("/config/log_level", content=b"")
        assert (response.status_code, response.json()) == (413, {"message": "INVALID_VALUE"})
        both = [cluster.lookupd_http, cluster.lookupd_http]
        response = await client.put("/config/nsqlookupd_http_addresses", json=both)
        assert response.json() == both
        assert (await client.get("/api/topics")).json()["errors"] == []
        response = await client.put("/config/nsqlookupd_http_addresses", content=b'"x"')
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_VALUE"})
        response = await client.put("/config/base_path", content=b"/x")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_OPTION"})
        response = await client.get("/config/nope")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_OPTION"})

    args = (f"--lookupd-http-address={cluster.lookupd_http}", "--allow-config-from-cidr=10.0.0.0/8")
    async with running_admin(*args) as (_, client):
        for response in (
            await client.get("/config/log_level"),
            await client.put("/config/log_level", content=b"debug"),
        ):
            assert (response.status_code, response.json()) == (403, {"message": "FORBIDDEN"})


async def _raw_get(port: int, path: str) -> tuple[int, bytes]:
    """GET `path` byte for byte (no client-side normalisation of ``..``)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(
            f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data


async def test_pages_static_and_base_path(cluster: Cluster) -> None:
    args = (f"--lookupd-http-address={cluster.lookupd_http}", "--base-path=/admin/")
    async with running_admin(*args) as (admin, client):
        pages = ("", "/", "/topics", "/topics/t", "/topics/t/c", "/nodes", "/nodes/n:1",
                 "/counter", "/lookup")  # fmt: skip
        for path in (f"/admin{page}" for page in pages):
            page = await client.get(path)
            assert page.status_code == 200, path
            assert page.headers["Content-Type"] == "text/html; charset=utf-8"
            assert "{{BASE_PATH}}" not in page.text and "{{NSQADMIN_CONFIG}}" not in page.text
            assert '"basePath":"/admin"' in page.text
        assert (await client.get("/admin/ping")).text == "OK"
        assert (await client.get("/admin/api/topics")).status_code == 200
        assert (await client.get("/api/topics")).status_code == 404
        assert (await client.get("/topics")).status_code == 404

        static = admin.static_dir
        files = [p for p in static.rglob("*") if p.is_file() and p.name != "index.html"]
        if files:
            asset = files[0].relative_to(static).as_posix()
            response = await client.get(f"/admin/static/{asset}")
            assert response.status_code == 200
            assert response.content == files[0].read_bytes()
        missing = await client.get("/admin/static/no-such-file.js")
        assert (missing.status_code, missing.text) == (404, "NOT_FOUND")
        assert (await client.get("/admin/fonts/no-such.woff")).status_code == 404
        for path in ("/admin/static/../options.py", "/admin/static/%2e%2e/options.py",
                     "/admin/static/..%2foptions.py", "/admin/static/%2fetc%2fpasswd"):  # fmt: skip
            status, data = await _raw_get(admin.http_port, path)
            assert status == 404, path
            assert b"NSQAdminOptions" not in data and b"root:" not in data

        response = await client.put("/admin/api/topics")
        assert response.status_code == 405
        assert response.json() == {"message": "METHOD_NOT_ALLOWED"}
        assert response.headers["Allow"] == "GET, OPTIONS, POST"


async def test_placeholder_page_without_index(cluster: Cluster, tmp_path: Any) -> None:
    args = (f"--lookupd-http-address={cluster.lookupd_http}", f"--dev-static-dir={tmp_path}")
    async with running_admin(*args) as (_, client):
        page = await client.get("/")
        assert page.status_code == 200
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        assert '"basePath":""' in page.text and '"isAdmin":true' in page.text
        assert f'"nsqlookupd":["{cluster.lookupd_http}"]' in page.text


async def _graphite_server(nursery: trio.Nursery, answers: list[bytes], seen: list[str]) -> int:
    """A fake graphite answering each request with the next of `answers` (JSON)."""

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            seen.append(data.split(b"\r\n", 1)[0].decode())
            body = answers.pop(0)
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            await stream.send_all(head.encode() + body)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def test_graphite_rate_and_proxy(cluster: Cluster, nursery: trio.Nursery) -> None:
    seen: list[str] = []
    answers = [
        b'[{"target": "x", "datapoints": [[120.0, 1], [1.0, 2]]}]',
        b'[{"target": "x", "datapoints": [[-1.0, 1]]}]',
        b'[{"target": "x", "datapoints": [[7, 1]]}]',
    ]
    port = await _graphite_server(nursery, answers, seen)
    args = (
        f"--lookupd-http-address={cluster.lookupd_http}",
        f"--graphite-url=http://127.0.0.1:{port}",
        "--statsd-interval=30s",
        "--proxy-graphite",
    )
    async with running_admin(*args) as (_, client):
        response = await client.get("/api/graphite?metric=rate&target=sum(a.b)")
        assert response.json() == {"rate": "4.00"}
        assert seen[0] == (
            "GET /render?format=json&from=-60sec&target=sum%28a.b%29&until=-30sec HTTP/1.1"
        )
        assert (await client.get("/api/graphite?metric=rate&target=x")).json() == {"rate": "N/A"}
        response = await client.get("/api/graphite?metric=gauge&target=x")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_ARG_METRIC"})
        response = await client.get("/api/graphite?metric=rate")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_ARG_TARGET"})
        proxied = await client.get("/render?target=x&format=json")
        assert proxied.json() == [{"target": "x", "datapoints": [[7, 1]]}]
        assert seen[-1] == "GET /render?target=x&format=json HTTP/1.1"


async def test_history_from_sampling_and_from_graphite(
    cluster: Cluster, nursery: trio.Nursery
) -> None:
    topic = unique_name("history")
    await make_topic(cluster, topic, "c", [3, 2])
    sampling = (f"--lookupd-http-address={cluster.lookupd_http}", "--history-interval=0.05s")
    async with running_admin(*sampling) as (_, client):
        for address in cluster.nsqd_http:
            await post(address, f"/pub?topic={topic}", b"more")

        async def sampled() -> Any:
            answer = (await client.get(f"/api/history/{topic}/c")).json()
            return answer if answer["points"] else None

        answer = await eventually(sampled)
        assert answer["source"] == "nsqadmin" and answer["interval"] == 0.05
        assert answer["points"][-1][2] == 7  # the channel's depth over both nsqds
        empty = (await client.get("/api/history/no_such_topic")).json()
        assert empty["points"] == [] and empty["message"] == ""

    seen: list[str] = []
    answers = [
        b'[{"target": "c", "datapoints": [[300, 100], [600, 160]]},'
        b' {"target": "d", "datapoints": [[4, 100], [9, 160]]}]',
        b"not json",
    ]
    port = await _graphite_server(nursery, answers, seen)
    args = (
        f"--lookupd-http-address={cluster.lookupd_http}",
        f"--graphite-url=http://127.0.0.1:{port}",
        "--statsd-interval=60s",
    )
    async with running_admin(*args) as (admin, client):
        answer = (await client.get(f"/api/history/{topic}")).json()
        assert answer["source"] == "graphite"
        assert answer["points"] == [[100.0, 5.0, 4.0], [160.0, 10.0, 9.0]]
        assert f"topic.{topic}.message_count.count" in seen[0].replace("%2A", "*")
        failed = await client.get(f"/api/history/{topic}")
        assert failed.status_code == 502 and failed.json()["message"] == "UPSTREAM_ERROR: graphite"
        assert len(admin.history) == 0  # with graphite nothing is sampled
