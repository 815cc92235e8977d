"""AUTH against a small auth server the test runs (docs/protocol.md §9): the request nsqd makes, the
reply's validation, permission checks for PUB, MPUB, DPUB and SUB with NSQ's errors,
re-authorisation when the ttl expires, and the identity in /stats."""

from __future__ import annotations

import json
import struct
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.stats import snapshot
from trionsq.protocol import dpub, identify, mpub, pub, sub

ALICE = {
    "ttl": 10,
    "identity": "alice",
    "identity_url": "https://id.example/alice",
    "authorizations": [
        {"topic": "^orders$", "channels": [".*"], "permissions": ["publish"]},
        {"topic": "orders", "channels": ["^billing$"], "permissions": ["subscribe"]},
    ],
}
REPLIES: dict[str, tuple[int, Any]] = {
    "alice": (200, ALICE),
    "nobody": (200, {"ttl": 10, "identity": "x", "authorizations": []}),
    "bad-permission": (
        200,
        {"ttl": 10, "authorizations": [{"topic": ".*", "channels": [".*"], "permissions": ["x"]}]},
    ),
    "bad-regex": (
        200,
        {"ttl": 10, "authorizations": [{"topic": "(", "channels": [], "permissions": []}]},
    ),
    "no-ttl": (200, {"ttl": 0, "authorizations": ALICE["authorizations"]}),
}


class AuthServer:
    """Answers /auth by the request's secret (403 for unknown ones); records each request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.replies = dict(REPLIES)
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, nursery: trio.Nursery) -> AuthServer:
        listeners = await nursery.start(partial(trio.serve_tcp, self._serve, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]
        return self

    async def _serve(self, stream: trio.SocketStream) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = await stream.receive_some(65536)
            if not data:
                return
            request += data
        head, _, body = request.partition(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        while len(body) < length:
            body += await stream.receive_some(65536)
        if method == "POST":
            params = json.loads(body)
        else:
            params = parse_qs(urlsplit(target).query, keep_blank_values=True)
        self.requests.append((method, params))
        status, reply = self.replies.get(params.get("secret", [""])[0], (403, {"message": "no"}))
        payload = json.dumps(reply).encode()
        await stream.send_all(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n" % status
            + b"Content-Length: %d\r\n\r\n" % len(payload)
            + payload
        )
        await stream.aclose()


def auth(secret: bytes) -> bytes:
    return b"AUTH\n" + struct.pack(">I", len(secret)) + secret


@pytest.fixture
async def server(nursery: trio.Nursery) -> AuthServer:
    return await AuthServer().start(nursery)


async def nsqd_with_auth(nursery: trio.Nursery, tmp_path: Any, *addresses: str, **kw: Any) -> NSQD:
    return await start_nsqd(nursery, str(tmp_path), auth_http_addresses=list(addresses), **kw)


async def authed(nsqd: NSQD, secret: bytes = b"alice") -> Conn:
    conn = await Conn.open(nsqd)
    await conn.send(auth(secret))
    assert json.loads(await conn.response()) == {
        "identity": "alice",
        "identity_url": "https://id.example/alice",
        "permission_count": 2,
    }
    return conn


async def test_identify_says_auth_is_required(nursery, tmp_path, server):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await Conn.open(nsqd)
    await conn.send(identify({"feature_negotiation": True}))
    assert json.loads(await conn.response())["auth_required"] is True


@pytest.mark.parametrize(
    ("command", "name"),
    [(pub("orders", b"x"), "PUB"), (mpub("orders", [b"x"]), "MPUB"), (sub("orders", "c"), "SUB")],
)
async def test_commands_before_auth_get_e_auth_first(nursery, tmp_path, server, command, name):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await Conn.open(nsqd)
    await conn.send(command)
    assert await conn.error() == b"E_AUTH_FIRST AUTH required before " + name.encode()
    assert await conn.closed()
    assert server.requests == []


async def test_auth_asks_the_server_with_nsqs_parameters_and_answers_the_identity(
    nursery, tmp_path, server
):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    await authed(nsqd)
    assert server.requests == [
        ("GET", {"remote_ip": [""], "tls": ["false"], "secret": ["alice"], "common_name": [""]})
    ]


async def test_auth_by_post_sends_one_element_arrays(nursery, tmp_path, server):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address, auth_http_request_method="post")
    await authed(nsqd)
    assert server.requests == [
        ("POST", {"remote_ip": [""], "tls": ["false"], "secret": ["alice"], "common_name": [""]})
    ]


async def test_publish_permissions(nursery, tmp_path, server):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await authed(nsqd)
    await conn.send(pub("orders", b"a") + mpub("orders", [b"b", b"c"]) + dpub("orders", 10, b"d"))
    assert [await conn.response() for _ in range(3)] == [b"OK"] * 3
    await conn.send(pub("orders2", b"x"))  # the topic regex is anchored: "^orders$"
    assert await conn.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "orders2" ""'
    assert await conn.closed()
    assert nsqd.topics["orders"].message_count == 4
    assert "orders2" not in nsqd.topics


async def test_subscribe_permissions(nursery, tmp_path, server):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await authed(nsqd)
    await conn.send(sub("orders", "billing"))
    assert await conn.response() == b"OK"
    other = await authed(nsqd)
    await other.send(sub("orders", "shipping"))
    assert await other.error() == b'E_UNAUTHORIZED AUTH failed for SUB on "orders" "shipping"'
    assert await other.closed()


@pytest.mark.parametrize(
    ("secret", "error"),
    [
        (b"nobody", b"E_UNAUTHORIZED AUTH no authorizations found"),
        (b"bad-permission", b"E_AUTH_FAILED AUTH failed"),
        (b"bad-regex", b"E_AUTH_FAILED AUTH failed"),
        (b"no-ttl", b"E_AUTH_FAILED AUTH failed"),
        (b"unknown", b"E_AUTH_FAILED AUTH failed"),
    ],
)
async def test_auth_failures_are_fatal_with_nsqs_errors(nursery, tmp_path, server, secret, error):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await Conn.open(nsqd)
    await conn.send(auth(secret))
    assert await conn.error() == error
    assert await conn.closed()


async def test_auth_twice_and_auth_disabled(nursery, tmp_path, server):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await authed(nsqd)
    await conn.send(auth(b"alice"))
    assert await conn.error() == b"E_INVALID AUTH already set"
    assert await conn.closed()
    (tmp_path / "plain").mkdir()
    plain = await start_nsqd(nursery, str(tmp_path / "plain"))
    conn = await Conn.open(plain)
    await conn.send(auth(b"alice"))
    assert await conn.error() == b"E_AUTH_DISABLED AUTH disabled"


async def test_an_expired_authorisation_is_asked_again(nursery, tmp_path, server, mock_clock):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await authed(nsqd)
    await conn.send(pub("orders", b"a"))
    assert await conn.response() == b"OK"
    mock_clock.jump(9)
    await conn.send(pub("orders", b"b"))
    assert await conn.response() == b"OK"
    assert len(server.requests) == 1  # still within the ttl
    mock_clock.jump(2)
    await conn.send(pub("orders", b"c"))
    assert await conn.response() == b"OK"
    assert len(server.requests) == 2
    server.replies["alice"] = (403, {"message": "revoked"})
    mock_clock.jump(11)
    await conn.send(pub("orders", b"d"))
    assert await conn.error() == b"E_AUTH_FAILED AUTH failed"
    assert await conn.closed()
    assert nsqd.topics["orders"].message_count == 3


async def test_the_auth_servers_are_tried_until_one_answers(nursery, tmp_path, server):
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    nsqd = await nsqd_with_auth(nursery, tmp_path, dead, f"http://{server.address}/auth", dead)
    for _ in range(3):  # whichever one the rotation starts at
        await authed(nsqd)


async def test_stats_show_the_identity(nursery, tmp_path, server):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await authed(nsqd)
    await conn.send(sub("orders", "billing"))
    assert await conn.response() == b"OK"
    (client,) = snapshot(nsqd)["topics"][0]["channels"][0]["clients"]
    assert (client["authed"], client["auth_identity"], client["auth_identity_url"]) == (
        True,
        "alice",
        "https://id.example/alice",
    )
    keys = list(client)
    assert keys.index("user_agent") + 1 == keys.index("authed")
    assert keys.index("auth_identity_url") + 1 == keys.index("topology_zone")


async def test_a_renewal_without_authorizations_is_unauthorized(
    nursery, tmp_path, server, mock_clock
):
    nsqd = await nsqd_with_auth(nursery, tmp_path, server.address)
    conn = await authed(nsqd)
    server.replies["alice"] = REPLIES["nobody"]
    mock_clock.jump(11)
    await conn.send(pub("orders", b"x"))
    assert await conn.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""'
    assert await conn.closed()
