"""Go nsqadmin's own tests (nsqadmin/http_test.go, nsqadmin_test.go,
internal/clusterinfo/producer_test.go), restated against trionsq: what each asserts, checked on
a real trionsq cluster started as Go's bootstrapNSQCluster does (one nsqlookupd, one nsqd
broadcasting 127.0.0.1, nsqadmin on lookupd mode, all three as subprocesses), plus the
behaviours of Go's nsqadmin/http.go and internal/clusterinfo/data.go that its tests leave
implicit (ordering, unions, nsqd-address mode, the default ACL header, the base path, file
types).

Behaviours `test_nsqadmin_api.py` already checks exactly are not repeated here: creating a
topic with a channel, tombstoning, deleting a topic or channel, pausing and unpausing, emptying a
channel (Go's TestHTTPCreateTopicChannelPOST, TestHTTPTombstoneTopicNodePOST,
TestHTTPDelete*POST, TestHTTPPause*POST, TestHTTPEmptyChannelPOST), ``PUT /config/log_level``
with a bad level and ``--allow-config-from-cidr`` (TestHTTPconfig's last step,
TestHTTPconfigCIDR); test_nsqadmin_process.py checks TestNeitherNSQDAndNSQLookup's and
TestBothNSQDAndNSQLookup's messages.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.integration.nsqadmin_cluster import (
    eventually,
    get_json,
    http_address,
    nsqd_topic,
    post,
    start_nsqd,
    unique_name,
)
from trionsq import NSQ_VERSION
from trionsq.testing import DaemonProcess

V1 = ("X-NSQ-Content-Type", "nsq; version=1.0")


class GoCluster:
    """Go's bootstrapNSQCluster: a lookupd, an nsqd and nsqadmin (lookupd mode)."""

    def __init__(self, lookupd: DaemonProcess, nsqd: DaemonProcess, admin: DaemonProcess) -> None:
        self.lookupd = lookupd
        self.nsqd = nsqd
        self.admin = admin
        self.lookupd_http = http_address(lookupd)
        self.nsqd_http = http_address(nsqd)
        self.nsqd_tcp_port = nsqd.tcp_address[1]
        self.admin_url = f"http://{http_address(admin)}"


@contextmanager
def bootstrap(*admin_args: str, nsqd_args: tuple[str, ...] = ()) -> Iterator[GoCluster]:
    with ExitStack() as stack:
        lookupd = stack.enter_context(DaemonProcess("nsqlookupd"))
        nsqd = stack.enter_context(start_nsqd(lookupd, *nsqd_args))
        admin_flags = [f"--lookupd-http-address={http_address(lookupd)}", *admin_args]
        admin = stack.enter_context(DaemonProcess("nsqadmin", admin_flags))
        yield GoCluster(lookupd, nsqd, admin)


@pytest.fixture
def go() -> Iterator[GoCluster]:
    with bootstrap() as cluster:
        yield cluster


@asynccontextmanager
async def admin_client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=20) as client:
        yield client


async def nsqd_topic_created(go: GoCluster, topic: str, channel: str = "") -> None:
    """Go's ``nsqds[0].GetTopic(topic)`` (and ``GetChannel``), then wait until lookupd knows
    the nsqd produces it (Go sleeps 100ms)."""
    await post(go.nsqd_http, f"/topic/create?topic={topic}")
    if channel:
        await post(go.nsqd_http, f"/channel/create?topic={topic}&channel={channel}")

    async def registered() -> bool:
        lookup = await get_json(go.lookupd_http, f"/lookup?topic={topic}")
        return bool(lookup["producers"]) and (not channel or channel in lookup["channels"])

    await eventually(registered)


def zero_counts(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: stats[k] for k in ("depth", "memory_depth", "backend_depth", "message_count")}


ZEROS = {"depth": 0, "memory_depth": 0, "backend_depth": 0, "message_count": 0}


# -- TestPing, TestHTTP*GET ---------------------------------------------------------------


async def test_ping(go: GoCluster) -> None:
    async with admin_client(go.admin_url) as client:
        response = await client.get("/ping")
    assert response.status_code == 200
    assert response.content == b"OK"
    # Go's PlainText: no X-NSQ-Content-Type; net/http sniffs the type of "OK"
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert V1[0] not in response.headers


async def test_topics_get(go: GoCluster) -> None:
    topic = unique_name("test_topics_get")
    await nsqd_topic_created(go, topic)
    async with admin_client(go.admin_url) as client:
        response = await client.get("/api/topics")
    assert response.status_code == 200
    assert response.headers[V1[0]] == V1[1]
    assert response.json() == {"topics": [topic], "message": "", "errors": []}


async def test_topic_get(go: GoCluster) -> None:
    topic = unique_name("test_topic_get")
    await nsqd_topic_created(go, topic)
    async with admin_client(go.admin_url) as client:
        response = await client.get(f"/api/topics/{topic}")
    assert response.status_code == 200
    answer = response.json()
    assert answer["topic_name"] == topic
    assert zero_counts(answer) == ZEROS
    assert answer["paused"] is False
    assert answer["message"] == ""
    [node] = answer["nodes"]
    assert node["node"] == go.nsqd_http and node["hostname"] == socket.gethostname()


async def test_nodes_get(go: GoCluster) -> None:
    async def listed() -> Any:
        async with admin_client(go.admin_url) as client:
            answer = (await client.get("/api/nodes")).json()
        return answer if answer["nodes"] else None

    answer = await eventually(listed)
    assert answer["message"] == ""
    [node] = answer["nodes"]
    assert node["hostname"] == socket.gethostname()
    assert node["broadcast_address"] == "127.0.0.1"
    assert node["tcp_port"] == go.nsqd_tcp_port
    assert f"127.0.0.1:{node['http_port']}" == go.nsqd_http
    assert node["version"] == NSQ_VERSION
    assert node["topics"] == []
    assert node["remote_addresses"] == [f"{go.lookupd_http}/{node['remote_address']}"]
    assert node["out_of_date"] is False


async def test_channel_get(go: GoCluster) -> None:
    topic = unique_name("test_channel_get")
    await nsqd_topic_created(go, topic, "ch")
    async with admin_client(go.admin_url) as client:
        response = await client.get(f"/api/topics/{topic}/ch")
    assert response.status_code == 200
    answer = response.json()
    assert answer["topic_name"] == topic and answer["channel_name"] == "ch"
    assert zero_counts(answer) == ZEROS
    assert answer["paused"] is False
    for key in ("in_flight_count", "deferred_count", "requeue_count", "timeout_count"):
        assert answer[key] == 0, key
    assert answer["clients"] == []
    assert answer["message"] == ""


async def test_nodes_single_get(go: GoCluster) -> None:
    topic = unique_name("test_nodes_single_get")
    await nsqd_topic_created(go, topic, "ch")
    async with admin_client(go.admin_url) as client:
        response = await client.get(f"/api/nodes/{go.nsqd_http}")
    assert response.status_code == 200
    answer = response.json()
    assert answer["node"] == go.nsqd_http
    [t] = answer["topics"]
    assert t["topic_name"] == topic
    assert zero_counts(t) == ZEROS
    assert t["paused"] is False
    assert [c["channel_name"] for c in t["channels"]] == ["ch"]
    assert answer["total_messages"] == 0 and answer["total_clients"] == 0
    assert answer["message"] == ""


# -- TestHTTPCreateTopicPOST, TestHTTPEmptyTopicPOST --------------------------------------


async def test_create_topic_post(go: GoCluster) -> None:
    topic = unique_name("test_create_topic_post")
    async with admin_client(go.admin_url) as client:
        response = await client.post("/api/topics", json={"topic": topic})
    assert response.status_code == 200
    assert response.json() == {"message": "", "errors": []}
    # in the lookupd only, with no channel; the nsqd does not get the topic
    assert topic in (await get_json(go.lookupd_http, "/topics"))["topics"]
    assert (await get_json(go.lookupd_http, f"/channels?topic={topic}"))["channels"] == []
    assert await nsqd_topic(go.nsqd_http, topic) is None


async def test_empty_topic_post(go: GoCluster) -> None:
    topic = unique_name("test_empty_topic_post")
    await nsqd_topic_created(go, topic)
    await post(go.nsqd_http, f"/pub?topic={topic}", b"1234")
    assert (await nsqd_topic(go.nsqd_http, topic) or {})["depth"] == 1  # no channel: it stays
    async with admin_client(go.admin_url) as client:
        response = await client.post(f"/api/topics/{topic}", json={"action": "empty"})
    assert response.status_code == 200
    assert response.json() == {"message": "", "errors": []}
    assert (await nsqd_topic(go.nsqd_http, topic) or {})["depth"] == 0


async def test_actions_on_a_topic_nobody_produces(go: GoCluster) -> None:
    # clusterinfo's actionHelper: a topic lookupd knows without producers has nothing to act
    # on, and that is no error
    topic = unique_name("nobody")
    await post(go.lookupd_http, f"/topic/create?topic={topic}")
    async with admin_client(go.admin_url) as client:
        for path in (f"/api/topics/{topic}", f"/api/topics/{topic}/ch"):
            for action in ("pause", "unpause", "empty"):
                response = await client.post(path, json={"action": action})
                assert (response.status_code, response.json()) == (
                    200,
                    {"message": "", "errors": []},
                ), (path, action)
        assert await nsqd_topic(go.nsqd_http, topic) is None
        # a topic lookupd does not know: its /lookup answers 404, so no lookupd answered
        response = await client.post(
            f"/api/topics/{unique_name('unknown')}", json={"action": "pause"}
        )
        assert response.status_code == 502
        assert response.json()["message"] == (
            "UPSTREAM_ERROR: failed to query any nsqlookupd: "
            'got response 404  "{\\"message\\":\\"TOPIC_NOT_FOUND\\"}"'
        )
        assert response.json()["errors"] == [
            {"address": go.lookupd_http, "error": 'HTTP 404: {"message":"TOPIC_NOT_FOUND"}'}
        ]


# -- TestHTTPconfig -----------------------------------------------------------------------


async def test_config(go: GoCluster) -> None:
    with DaemonProcess("nsqlookupd") as lookupd1, DaemonProcess("nsqlookupd") as lookupd2:
        new = [http_address(lookupd1), http_address(lookupd2)]
        async with admin_client(go.admin_url) as client:
            response = await client.get("/config/nsqlookupd_http_addresses")
            assert response.status_code == 200
            assert response.content == f'["{go.lookupd_http}"]'.encode()

            body = f'["{new[0]}","{new[1]}"]'.encode()
            response = await client.put("/config/nsqlookupd_http_addresses", content=body)
            assert response.status_code == 200
            assert response.content == body

            # from now on the cluster is read through the new lookupds
            topic = unique_name("config")
            await post(new[0], f"/topic/create?topic={topic}")
            answer = (await client.get("/api/topics")).json()
            assert answer == {"topics": [topic], "message": "", "errors": []}
            assert (await client.get("/api/nodes")).json()["nodes"] == []

            response = await client.put("/config/log_level", content=b"fatal")
            assert response.status_code == 200
            assert response.content == b"5"  # Go's LOG_FATAL
            assert (await client.get("/config/log_level")).content == b"5"


# -- TestTLSHTTPClient --------------------------------------------------------------------


async def test_tls_http_client(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    server = str(tmp_path / "server.pem")
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(server)
    client_cert = ca.issue_cert("client.example", common_name="client.example")
    client_pem = str(tmp_path / "client.pem")
    client_key = str(tmp_path / "client.key")
    client_cert.cert_chain_pems[0].write_to_path(client_pem)
    client_cert.private_key_pem.write_to_path(client_key)
    nsqd_args = [
        f"--tls-cert={server}",
        f"--tls-key={server}",
        f"--tls-root-ca-file={ca_file}",
        "--tls-client-auth-policy=require-verify",
        "--https-address=127.0.0.1:0",
        "--broadcast-address=127.0.0.1",
    ]
    with DaemonProcess("nsqd", nsqd_args) as nsqd:
        address = http_address(nsqd)
        topic = unique_name("tls")
        async with httpx.AsyncClient(timeout=10) as plain:
            refused = await plain.get(f"http://{address}/info")
        assert refused.status_code == 403 and refused.json()["message"] == "TLS_REQUIRED"
        admin_args = [
            f"--nsqd-http-address={address}",
            f"--http-client-tls-root-ca-file={ca_file}",
            f"--http-client-tls-cert={client_pem}",
            f"--http-client-tls-key={client_key}",
        ]
        with DaemonProcess("nsqadmin", admin_args) as admin:
            async with admin_client(f"http://{http_address(admin)}") as client:
                response = await client.post("/api/topics", json={"topic": topic})
                response = await client.get(f"/api/nodes/{address}")
                assert response.status_code < 500  # Go's assertion
                assert response.status_code == 200
                assert response.json()["node"] == address
                assert response.json()["errors"] == []
        # without a client certificate the nsqd refuses nsqadmin
        admin_args = [f"--nsqd-http-address={address}", f"--http-client-tls-root-ca-file={ca_file}"]
        with DaemonProcess("nsqadmin", admin_args) as admin:
            async with admin_client(f"http://{http_address(admin)}") as client:
                response = await client.get(f"/api/nodes/{address}")
                assert response.status_code == 502  # no nsqd answered
                answer = (await client.get("/api/nodes")).json()
                [error] = answer["errors"]
                assert error["address"] == address


# -- producer_test.go: the node address of a hostname / IPv6 broadcast address ------------


@pytest.mark.parametrize(
    ("broadcast", "listen", "node"),
    [
        ("localhost", "127.0.0.1", "localhost:{port}"),
        ("::1", "[::1]", "[::1]:{port}"),
    ],
)
async def test_producer_addresses(broadcast: str, listen: str, node: str) -> None:
    with DaemonProcess("nsqlookupd") as lookupd:
        host, port = lookupd.tcp_address
        nsqd_args = [
            f"--lookupd-tcp-address={host}:{port}",
            f"--broadcast-address={broadcast}",
            f"--http-address={listen}:0",
            f"--tcp-address={listen}:0",
        ]
        with (
            DaemonProcess("nsqd", nsqd_args) as nsqd,
            DaemonProcess("nsqadmin", [f"--lookupd-http-address={http_address(lookupd)}"]) as a,
        ):
            http_port = (nsqd.http_address or ("", 0))[1]
            expected = node.format(port=http_port)
            topic = unique_name("addr")
            await post(expected, f"/topic/create?topic={topic}")
            async with admin_client(f"http://{http_address(a)}") as client:

                async def produced() -> Any:
                    answer = (await client.get(f"/api/topics/{topic}")).json()
                    return answer if answer["nodes"] else None

                answer = await eventually(produced)
                assert [n["node"] for n in answer["nodes"]] == [expected]
                assert answer["errors"] == []
                [p] = (await client.get("/api/nodes")).json()["nodes"]
                assert p["broadcast_address"] == broadcast and p["unreachable"] is False
                response = await client.get(f"/api/nodes/{expected}")
                assert response.status_code == 200
                assert [t["topic_name"] for t in response.json()["topics"]] == [topic]


# -- clusterinfo/data.go: unions and ordering over several lookupds -----------------------


async def test_unions_and_ordering_over_two_lookupds() -> None:
    with ExitStack() as stack:
        l1 = stack.enter_context(DaemonProcess("nsqlookupd"))
        l2 = stack.enter_context(DaemonProcess("nsqlookupd"))
        h1, p1 = l1.tcp_address
        h2, p2 = l2.tcp_address
        nsqd = stack.enter_context(
            DaemonProcess(
                "nsqd",
                [
                    f"--lookupd-tcp-address={h1}:{p1}",
                    f"--lookupd-tcp-address={h2}:{p2}",
                    "--broadcast-address=127.0.0.1",
                ],
            )
        )
        lookupds = [http_address(l1), http_address(l2)]
        admin = stack.enter_context(
            DaemonProcess("nsqadmin", [f"--lookupd-http-address={a}" for a in lookupds])
        )
        produced = [unique_name("zeta"), unique_name("alpha"), unique_name("mid")]
        for topic in produced:
            await post(http_address(nsqd), f"/topic/create?topic={topic}")
        only_l2 = unique_name("beta")  # known to the second lookupd alone, no producer
        await post(lookupds[1], f"/topic/create?topic={only_l2}")
        await post(lookupds[1], f"/channel/create?topic={only_l2}&channel=z")
        await post(lookupds[1], f"/channel/create?topic={only_l2}&channel=a")

        async with admin_client(f"http://{http_address(admin)}") as client:

            async def registered() -> Any:
                nodes = (await client.get("/api/nodes")).json()["nodes"]
                ok = len(nodes) == 1 and len(nodes[0]["topics"]) == 3
                return nodes if ok and len(nodes[0]["remote_addresses"]) == 2 else None

            [node] = await eventually(registered)
            # one node (unioned by TCP address), one remote address per lookupd, in order
            assert [r.split("/")[0] for r in node["remote_addresses"]] == lookupds
            # its topics sorted by name
            assert [t["topic"] for t in node["topics"]] == sorted(produced)
            assert all(t["tombstoned"] is False for t in node["topics"])

            answer = (await client.get("/api/topics")).json()
            assert answer["topics"] == sorted([*produced, only_l2])
            inactive = (await client.get("/api/topics?inactive=true")).json()
            assert inactive["topics"] == {only_l2: ["a", "z"]}
            assert inactive["message"] == ""


# -- http.go in nsqd-address mode ---------------------------------------------------------


async def test_nsqd_mode_create_and_tombstone(go: GoCluster) -> None:
    topic = unique_name("nsqdmode")
    await nsqd_topic_created(go, topic)
    with DaemonProcess("nsqadmin", [f"--nsqd-http-address={go.nsqd_http}"]) as admin:
        async with admin_client(f"http://{http_address(admin)}") as client:
            # a topic alone: there is no lookupd to create it in, nothing happens
            response = await client.post("/api/topics", json={"topic": unique_name("x")})
            assert (response.status_code, response.json()) == (200, {"message": "", "errors": []})
            # a channel needs the topic's producers from the lookupds: there are none to ask
            response = await client.post("/api/topics", json={"topic": topic, "channel": "c"})
            assert response.status_code == 502
            assert response.json() == {
                "message": "UPSTREAM_ERROR: failed to query any nsqlookupd: ",
                "errors": [],
            }
            assert (await nsqd_topic(go.nsqd_http, topic) or {})["channels"] == []
            # tombstoning deletes the topic on the node (no lookupd to tombstone it in)
            response = await client.request(
                "DELETE", f"/api/nodes/{go.nsqd_http}", json={"topic": topic}
            )
            assert (response.status_code, response.json()) == (200, {"message": "", "errors": []})
            assert await nsqd_topic(go.nsqd_http, topic) is None


# -- the ACL with Go's default header (bootstrapNSQClusterWithAuth) -----------------------


async def test_admin_user_with_default_header() -> None:
    with bootstrap("--admin-user=matt") as go:
        topic = unique_name("auth")
        async with admin_client(go.admin_url) as client:
            for headers in ({}, {"X-Forwarded-User": "bob"}, {"X-Remote-User": "matt"}):
                response = await client.post("/api/topics", json={"topic": topic}, headers=headers)
                assert (response.status_code, response.json()) == (403, {"message": "FORBIDDEN"})
            page = await client.get("/", headers={"X-Forwarded-User": "bob"})
            assert '"isAdmin":false' in page.text
            assert topic not in (await get_json(go.lookupd_http, "/topics"))["topics"]

            headers = {"X-Forwarded-User": "matt"}
            response = await client.post("/api/topics", json={"topic": topic}, headers=headers)
            assert (response.status_code, response.json()) == (200, {"message": "", "errors": []})
            assert topic in (await get_json(go.lookupd_http, "/topics"))["topics"]
            page = await client.get("/", headers=headers)
            assert '"isAdmin":true' in page.text


# -- the base path and the files ----------------------------------------------------------


async def test_base_path_is_normalised() -> None:
    # Go's normalizeBasePath: a leading "/" added, then path.Clean
    with bootstrap("--base-path=admin/x/../") as go:
        async with admin_client(go.admin_url) as client:
            # a string option is written as is (Go's RespondV1 of a string), not as JSON
            assert (await client.get("/admin/config/base_path")).content == b"/admin"
            assert (await client.get("/admin/ping")).content == b"OK"
            answer = (await client.get("/admin/api/topics")).json()
            assert answer["message"] == ""
            page = await client.get("/admin/nodes")
            assert page.status_code == 200 and '"basePath":"/admin"' in page.text
            assert (await client.get("/ping")).status_code == 404
            assert (await client.get("/admin/x/ping")).status_code == 404


async def test_index_and_static_files(go: GoCluster) -> None:
    async with admin_client(go.admin_url) as client:
        for path in ("/", "/topics", "/topics/t", "/topics/t/c", "/nodes", "/nodes/n:1",
                     "/counter", "/lookup"):  # fmt: skip
            page = await client.get(path)
            assert page.status_code == 200, path
            assert page.headers["Content-Type"].startswith("text/html"), path
            assert '"version":"1.3.0"' in page.text, path
        # Go's mime.TypeByExtension types
        for path, kind in (
            ("/static/favicon.svg", "image/svg+xml"),
            ("/static/js/main.js", "text/javascript; charset=utf-8"),
        ):
            response = await client.get(path)
            assert response.status_code == 200, path
            assert response.headers["Content-Type"].startswith(kind), path
        css = await client.get("/static/css/app.css")
        if css.status_code == 200:
            assert css.headers["Content-Type"] == "text/css; charset=utf-8"
        missing = await client.get("/static/nope.js")
        assert (missing.status_code, missing.content) == (404, b"NOT_FOUND")
        assert V1[0] not in missing.headers  # PlainText


# -- http_api.NewReqParams: a query Go cannot parse ---------------------------------------


async def test_topics_with_a_bad_query(go: GoCluster) -> None:
    async with admin_client(go.admin_url) as client:
        for raw, message in (
            ("inactive=%zz", 'invalid URL escape "%zz"'),
            ("a=1;b=2", "invalid semicolon separator in query"),
            ("x=%4", 'invalid URL escape "%4"'),
        ):
            response = await client.get(f"/api/topics?{raw}")
            assert (response.status_code, response.json()) == (400, {"message": message}), raw


async def test_dev_static_dir_at_the_root_base_path(tmp_path: Path) -> None:
    # Go's --dev-static-dir: /static/<asset> is read from that folder (not the built-in one)
    (tmp_path / "dev.js").write_text("export const dev = 1;\n")
    with bootstrap(f"--dev-static-dir={tmp_path}") as go:
        async with admin_client(go.admin_url) as client:
            response = await client.get("/static/dev.js")
            assert response.status_code == 200
            assert response.text == "export const dev = 1;\n"
            assert response.headers["Content-Type"] == "text/javascript; charset=utf-8"
            missing = await client.get("/static/favicon.svg")  # only in the built-in folder
            assert (missing.status_code, missing.content) == (404, b"NOT_FOUND")
