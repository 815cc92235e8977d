"""nsqlookupd on 127.0.0.1 port 0: the TCP V1 protocol (registration flows, errors, closing),
the HTTP API (each route's answers and errors, /lookup's filtering on an injected clock), and the
`trionsq nsqlookupd` process (start, signals, --version, bad flags, a port in use)."""

from __future__ import annotations

import json
import re
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from trionsq.nsqlookupd.nsqlookupd import NSQLookupd, StartupError
from trionsq.nsqlookupd.options import NSQLookupdOptions
from trionsq.testing import DaemonProcess, pythonpath_env

NSQ = "nsq; version=1.0"
JSON = "application/json; charset=utf-8"
HOSTNAME = socket.gethostname()
GO_ZERO_TIME_NS = -6795364578871345152


class FakeClock:
    """The registration DB's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def lookupd(nursery: trio.Nursery, clock: FakeClock) -> NSQLookupd:
    options = NSQLookupdOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        broadcast_address="lookupd.test",
    )
    daemon = NSQLookupd(options, clock=clock)
    await nursery.start(daemon.run)
    return daemon


@pytest.fixture
async def http(lookupd: NSQLookupd) -> AsyncIterator[httpx.AsyncClient]:
    assert lookupd.http_address is not None
    host, port = lookupd.http_address
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        yield client


class Conn:
    """A raw V1 connection."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, lookupd: NSQLookupd, magic: bytes = b"  V1") -> Conn:
        assert lookupd.tcp_address is not None
        stream = await trio.open_tcp_stream(*lookupd.tcp_address)
        conn = cls(stream)
        if magic:
            await conn.send(magic)
        return conn

    @property
    def local_address(self) -> str:
        host, port = self.stream.socket.getsockname()[:2]
        return f"{host}:{port}"

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def _fill(self, count: int) -> bool:
        while len(self.buffer) < count:
            with trio.fail_after(5):
                chunk = await self.stream.receive_some(65536)
            if not chunk:
                return False
            self.buffer += chunk
        return True

    async def response(self) -> bytes:
        assert await self._fill(4), "connection closed"
        (size,) = struct.unpack(">I", self.buffer[:4])
        assert await self._fill(4 + size), "connection closed"
        data, self.buffer = self.buffer[4 : 4 + size], self.buffer[4 + size :]
        return data

    async def command(self, data: bytes) -> bytes:
        await self.send(data)
        return await self.response()

    async def identify(self, **fields: Any) -> dict[str, Any]:
        body = json.dumps(peer_fields(**fields)).encode()
        answer = await self.command(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
        return json.loads(answer)  # type: ignore[no-any-return]

    async def assert_closed(self) -> None:
        assert not await self._fill(len(self.buffer) + 1), f"unexpected bytes {self.buffer!r}"

    async def close(self) -> None:
        await self.stream.aclose()


def peer_fields(**fields: Any) -> dict[str, Any]:
    return {
        "hostname": "nsqd-host",
        "broadcast_address": "nsqd.test",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
    } | fields


async def wait_until_unregistered(lookupd: NSQLookupd, peer_id: str) -> None:
    with trio.fail_after(5):
        while lookupd.db.lookup_registrations(peer_id):
            await trio.sleep(0.01)


async def get_json(http: httpx.AsyncClient, path: str) -> Any:
    response = await http.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == JSON
    assert response.headers["x-nsq-content-type"] == NSQ
    return response.json()


def error_of(response: httpx.Response) -> tuple[int, str]:
    assert response.headers["content-type"] == JSON
    assert response.headers["x-nsq-content-type"] == NSQ
    return response.status_code, response.json()["message"]


def producer_json(conn: Conn, **fields: Any) -> dict[str, Any]:
    info = peer_fields(**fields)
    return {
        "remote_address": conn.local_address,
        "hostname": info["hostname"],
        "broadcast_address": info["broadcast_address"],
        "tcp_port": info["tcp_port"],
        "http_port": info["http_port"],
        "version": info["version"],
        "topology_zone": info.get("topology_zone", ""),
        "topology_region": info.get("topology_region", ""),
    }


# -- TCP V1 ---------------------------------------------------------------------------------


async def test_identify_answers_with_the_lookupds_own_addresses(lookupd: NSQLookupd) -> None:
    conn = await Conn.open(lookupd)
    assert lookupd.tcp_address is not None and lookupd.http_address is not None
    answer = await conn.command(
        b"IDENTIFY\n"
        + struct.pack(">I", len(json.dumps(peer_fields())))
        + json.dumps(peer_fields()).encode()
    )
    # Go's json.Marshal of a map: keys sorted, compact
    http_port, tcp_port = lookupd.http_address[1], lookupd.tcp_address[1]
    assert (
        answer
        == (
            f'{{"broadcast_address":"lookupd.test","hostname":{json.dumps(HOSTNAME)},'
            f'"http_port":{http_port},"tcp_port":{tcp_port},"version":"1.3.0"}}'
        ).encode()
    )
    assert lookupd.db.lookup_registrations(conn.local_address) == [("client", "", "")]


async def test_register_unregister_flow(lookupd: NSQLookupd, http: httpx.AsyncClient) -> None:
    conn = await Conn.open(lookupd)
    await conn.identify(topology_zone="z1", topology_region="r1")
    assert await conn.command(b"REGISTER t c\n") == b"OK"
    assert await conn.command(b"REGISTER t c2\n") == b"OK"
    assert await conn.command(b"REGISTER other\n") == b"OK"
    me = producer_json(conn, topology_zone="z1", topology_region="r1")
    assert await get_json(http, "/lookup?topic=t") == {"channels": ["c", "c2"], "producers": [me]}
    assert await get_json(http, "/topics") == {"topics": ["t", "other"]}
    assert await get_json(http, "/channels?topic=t") == {"channels": ["c", "c2"]}
    assert await get_json(http, "/channels?topic=other") == {"channels": []}

    assert await conn.command(b"UNREGISTER t c\n") == b"OK"
    # the channel key stays, without producers
    assert await get_json(http, "/lookup?topic=t") == {"channels": ["c", "c2"], "producers": [me]}
    assert lookupd.db.find_producers("channel", "t", "c") == []
    assert await conn.command(b"UNREGISTER t\n") == b"OK"
    assert lookupd.db.find_producers("channel", "t", "c2") == []
    assert await get_json(http, "/lookup?topic=t") == {"channels": ["c", "c2"], "producers": []}
    assert await get_json(http, "/topics") == {"topics": ["t", "other"]}
    assert [k.key for k in lookupd.db.lookup_registrations(conn.local_address)] == ["", "other"]


async def test_ephemeral_keys_go_with_their_last_producer(
    lookupd: NSQLookupd, http: httpx.AsyncClient
) -> None:
    a, b = await Conn.open(lookupd), await Conn.open(lookupd)
    await a.identify()
    await b.identify(broadcast_address="other.test")
    for conn in (a, b):
        assert await conn.command(b"REGISTER t#ephemeral c#ephemeral\n") == b"OK"
    assert await a.command(b"UNREGISTER t#ephemeral c#ephemeral\n") == b"OK"
    assert await get_json(http, "/channels?topic=t%23ephemeral") == {"channels": ["c#ephemeral"]}
    assert await b.command(b"UNREGISTER t#ephemeral c#ephemeral\n") == b"OK"
    assert await get_json(http, "/channels?topic=t%23ephemeral") == {"channels": []}
    assert await a.command(b"UNREGISTER t#ephemeral\n") == b"OK"
    assert await get_json(http, "/topics") == {"topics": ["t#ephemeral"]}
    assert await b.command(b"UNREGISTER t#ephemeral\n") == b"OK"
    assert await get_json(http, "/topics") == {"topics": []}
    # not ephemeral: the key stays
    assert await a.command(b"REGISTER p c\n") == b"OK"
    assert await a.command(b"UNREGISTER p c\n") == b"OK"
    assert await a.command(b"UNREGISTER p\n") == b"OK"
    assert await get_json(http, "/lookup?topic=p") == {"channels": ["c"], "producers": []}


async def test_closing_a_connection_unregisters_its_peer_everywhere(
    lookupd: NSQLookupd, http: httpx.AsyncClient
) -> None:
    gone, stays = await Conn.open(lookupd), await Conn.open(lookupd)
    await gone.identify()
    await stays.identify(broadcast_address="stays.test")
    assert await gone.command(b"REGISTER t c\n") == b"OK"
    assert await stays.command(b"REGISTER t\n") == b"OK"
    peer_id = gone.local_address
    await gone.close()
    await wait_until_unregistered(lookupd, peer_id)
    lookup = await get_json(http, "/lookup?topic=t")
    assert lookup == {
        "channels": ["c"],
        "producers": [producer_json(stays, broadcast_address="stays.test")],
    }
    nodes = await get_json(http, "/nodes")
    assert [n["broadcast_address"] for n in nodes["producers"]] == ["stays.test"]


async def test_commands_in_one_write_get_their_answers_in_order(lookupd: NSQLookupd) -> None:
    conn = await Conn.open(lookupd, magic=b"")
    body = json.dumps(peer_fields()).encode()
    await conn.send(
        b"  V1PING\nIDENTIFY\n"
        + struct.pack(">I", len(body))
        + body
        + b"REGISTER a\nREGISTER b c\nPING\nUNREGISTER a\n"
    )
    assert await conn.response() == b"OK"
    assert json.loads(await conn.response())["version"] == "1.3.0"
    assert [await conn.response() for _ in range(4)] == [b"OK"] * 4
    assert [tuple(k) for k in lookupd.db.lookup_registrations(conn.local_address)] == [
        ("client", "", ""),
        ("channel", "b", "c"),
        ("topic", "b", ""),
    ]


async def test_ping_before_identify_is_ok_and_changes_nothing(lookupd: NSQLookupd) -> None:
    conn = await Conn.open(lookupd)
    assert await conn.command(b"PING\n") == b"OK"
    assert await conn.command(b"PING\n") == b"OK"
    assert len(lookupd.db) == 0


@pytest.mark.parametrize(
    ("commands", "error"),
    [
        (b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
        (b"UNREGISTER t c\n", b"E_INVALID client must IDENTIFY"),
        (b"FOO bar\n", b"E_INVALID invalid command FOO"),
        (b"\n", b"E_INVALID invalid command "),
        (b"IDENTIFY\n\x00\x00\x00\x02{]", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (b"IDENTIFY\n\x00\x00\x00\x02{}", b"E_BAD_BODY IDENTIFY missing fields"),
        (b"IDENTIFY\n\xff\xff\xff\xff", b"E_BAD_BODY IDENTIFY failed to read body"),
    ],
)
async def test_errors_before_identify_are_fatal(
    lookupd: NSQLookupd, commands: bytes, error: bytes
) -> None:
    conn = await Conn.open(lookupd)
    assert await conn.command(commands + b"PING\n") == error
    await conn.assert_closed()
    assert len(lookupd.db) == 0


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
        (b"UNREGISTER\n", b"E_INVALID UNREGISTER insufficient number of params"),
        (b"REGISTER bad! c\n", b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"),
        (b"UNREGISTER t bad!\n", b"E_BAD_CHANNEL UNREGISTER channel name 'bad!' is not valid"),
        (b"REGISTER \xff\n", b"E_BAD_TOPIC REGISTER topic name '\xff' is not valid"),
        (b"IDENTIFY\n", b"E_INVALID cannot IDENTIFY again"),
    ],
)
async def test_errors_after_identify_close_and_unregister(
    lookupd: NSQLookupd, command: bytes, error: bytes
) -> None:
    conn = await Conn.open(lookupd)
    await conn.identify()
    assert await conn.command(b"REGISTER t c\n") == b"OK"
    assert await conn.command(command) == error
    await conn.assert_closed()
    await wait_until_unregistered(lookupd, conn.local_address)
    assert lookupd.db.find_producers("topic", "t", "") == []
    assert [tuple(k) for k in lookupd.db.find_registrations("channel", "t", "*")] == [
        ("channel", "t", "c")
    ]


async def test_an_identify_cut_short_is_answered(lookupd: NSQLookupd) -> None:
    conn = await Conn.open(lookupd)
    await conn.send(b"IDENTIFY\n\x00\x00\x00\x10{")
    await conn.stream.send_eof()
    assert await conn.response() == b"E_BAD_BODY IDENTIFY failed to read body"
    await conn.assert_closed()


async def test_a_partial_line_at_eof_is_not_answered(lookupd: NSQLookupd) -> None:
    conn = await Conn.open(lookupd)
    await conn.send(b"PING")
    await conn.stream.send_eof()
    await conn.assert_closed()


@pytest.mark.parametrize("magic", [b"  V2", b"V1\n\n", b"GET "])
async def test_a_bad_magic_is_refused(lookupd: NSQLookupd, magic: bytes) -> None:
    conn = await Conn.open(lookupd, magic=magic)
    assert await conn.response() == b"E_BAD_PROTOCOL"
    await conn.assert_closed()


async def test_a_magic_cut_short_closes_silently(lookupd: NSQLookupd) -> None:
    conn = await Conn.open(lookupd, magic=b"  V")
    await conn.stream.send_eof()
    await conn.assert_closed()


async def test_in_memory_stream_with_a_given_peer_id(lookupd: NSQLookupd) -> None:
    client, server = trio.testing.memory_stream_pair()
    lookupd.handle_stream(server, "10.1.2.3:5555")
    body = json.dumps(peer_fields()).encode()
    await client.send_all(b"  V1IDENTIFY\n" + struct.pack(">I", len(body)) + body)
    await client.send_all(b"REGISTER t\n")
    with trio.fail_after(5):
        while not lookupd.db.find_producers("topic", "t", ""):
            await trio.sleep(0.01)
    (producer,) = lookupd.db.find_producers("topic", "t", "")
    assert (producer.peer_info.id, producer.peer_info.remote_address) == (
        "10.1.2.3:5555",
        "10.1.2.3:5555",
    )
    await client.aclose()
    await wait_until_unregistered(lookupd, "10.1.2.3:5555")


# -- HTTP -----------------------------------------------------------------------------------


async def test_ping_is_plain_text(http: httpx.AsyncClient) -> None:
    response = await http.get("/ping")
    assert (response.status_code, response.text) == (200, "OK")
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert "x-nsq-content-type" not in response.headers


async def test_info(http: httpx.AsyncClient) -> None:
    response = await http.get("/info")
    assert response.content == b'{"version":"1.3.0"}'
    assert response.headers["x-nsq-content-type"] == NSQ


async def test_empty_lists_are_json_arrays(http: httpx.AsyncClient) -> None:
    assert (await http.get("/topics")).content == b'{"topics":[]}'
    assert (await http.get("/channels?topic=t")).content == b'{"channels":[]}'
    assert (await http.get("/nodes")).content == b'{"producers":[]}'
    assert (await http.get("/debug")).content == b"{}"
    await http.post("/topic/create?topic=t")
    assert (await http.get("/lookup?topic=t")).content == b'{"channels":[],"producers":[]}'


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("GET", "/nope", 404, "NOT_FOUND"),
        ("GET", "/debug/pprof", 404, "NOT_FOUND"),
        ("GET", "/channels", 400, "MISSING_ARG_TOPIC"),
        ("GET", "/lookup", 400, "MISSING_ARG_TOPIC"),
        ("GET", "/lookup?topic=missing", 404, "TOPIC_NOT_FOUND"),
        ("GET", "/lookup?topic=%zz", 400, "INVALID_REQUEST"),
        ("GET", "/channels?topic=a;b", 400, "INVALID_REQUEST"),
        ("POST", "/topic/create", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/topic/create?topic=bad!", 400, "INVALID_ARG_TOPIC"),
        ("POST", "/topic/delete", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/topic/tombstone", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/topic/tombstone?topic=t", 400, "MISSING_ARG_NODE"),
        ("POST", "/channel/create?channel=c", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/channel/create?topic=bad!&channel=c", 400, "INVALID_ARG_TOPIC"),
        ("POST", "/channel/create?topic=t", 400, "MISSING_ARG_CHANNEL"),
        ("POST", "/channel/create?topic=t&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
        ("POST", "/channel/delete?topic=t", 400, "MISSING_ARG_CHANNEL"),
        ("POST", "/channel/delete?topic=t&channel=c", 404, "CHANNEL_NOT_FOUND"),
        ("POST", "/channel/delete?topic=t&channel=c&x=%", 400, "INVALID_REQUEST"),
    ],
)
async def test_http_errors(
    http: httpx.AsyncClient, method: str, path: str, status: int, message: str
) -> None:
    assert error_of(await http.request(method, path)) == (status, message)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/ping", "GET, OPTIONS"),
        ("POST", "/lookup", "GET, OPTIONS"),
        ("PUT", "/debug", "GET, OPTIONS"),
        ("GET", "/topic/create", "OPTIONS, POST"),
        ("GET", "/channel/delete", "OPTIONS, POST"),
        ("DELETE", "/topic/tombstone", "OPTIONS, POST"),
    ],
)
async def test_wrong_method_is_405(
    http: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    response = await http.request(method, path)
    assert error_of(response) == (405, "METHOD_NOT_ALLOWED")
    assert response.headers["allow"] == allow


async def test_topic_and_channel_create_and_delete(
    http: httpx.AsyncClient, lookupd: NSQLookupd
) -> None:
    for path in ["/topic/create?topic=a", "/channel/create?topic=b&channel=x"]:
        response = await http.post(path)
        assert (response.status_code, response.content) == (200, b"")
        assert response.headers["x-nsq-content-type"] == NSQ
        assert "content-type" not in response.headers
    await http.post("/channel/create?topic=a&channel=y")
    await http.post("/topic/create?topic=a")  # again: nothing changes
    assert await get_json(http, "/topics") == {"topics": ["a", "b"]}
    assert await get_json(http, "/channels?topic=a") == {"channels": ["y"]}
    assert await get_json(http, "/channels?topic=*") == {"channels": ["x", "y"]}
    assert await get_json(http, "/lookup?topic=b") == {"channels": ["x"], "producers": []}

    assert (await http.post("/channel/delete?topic=a&channel=y")).status_code == 200
    assert await get_json(http, "/channels?topic=a") == {"channels": []}
    assert (await http.post("/topic/delete?topic=b")).status_code == 200
    assert await get_json(http, "/topics") == {"topics": ["a"]}
    assert await get_json(http, "/channels?topic=b") == {"channels": []}
    # no existence check, no name check
    assert (await http.post("/topic/delete?topic=never!")).status_code == 200
    assert len(lookupd.db) == 1


async def test_topic_delete_with_a_wildcard_deletes_every_topic(http: httpx.AsyncClient) -> None:
    await http.post("/channel/create?topic=a&channel=x")
    await http.post("/channel/create?topic=b&channel=y")
    assert (await http.post("/topic/delete?topic=*")).status_code == 200
    assert await get_json(http, "/topics") == {"topics": []}
    assert await get_json(http, "/channels?topic=*") == {"channels": []}


async def test_lookup_filters_inactive_producers(
    lookupd: NSQLookupd, http: httpx.AsyncClient, clock: FakeClock
) -> None:
    quiet, pinging = await Conn.open(lookupd), await Conn.open(lookupd)
    await quiet.identify(broadcast_address="quiet.test")
    await pinging.identify(broadcast_address="pinging.test")
    for conn in (quiet, pinging):
        assert await conn.command(b"REGISTER t\n") == b"OK"
    clock.now += 200.0
    assert await pinging.command(b"PING\n") == b"OK"
    clock.now += 100.0  # quiet: exactly 300 s, still active
    lookup = await get_json(http, "/lookup?topic=t")
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["quiet.test", "pinging.test"]
    clock.now += 0.5
    lookup = await get_json(http, "/lookup?topic=t")
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["pinging.test"]
    nodes = await get_json(http, "/nodes")
    assert [p["broadcast_address"] for p in nodes["producers"]] == ["pinging.test"]
    # /topics does not filter
    assert await get_json(http, "/topics") == {"topics": ["t"]}
    clock.now += 200.0
    assert await get_json(http, "/lookup?topic=t") == {"channels": [], "producers": []}
    assert await quiet.command(b"PING\n") == b"OK"
    lookup = await get_json(http, "/lookup?topic=t")
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["quiet.test"]


async def test_tombstone_hides_a_node_for_its_lifetime(
    lookupd: NSQLookupd, http: httpx.AsyncClient, clock: FakeClock
) -> None:
    a, b = await Conn.open(lookupd), await Conn.open(lookupd)
    await a.identify(broadcast_address="a.test", http_port=1001)
    await b.identify(broadcast_address="b.test", http_port=1002)
    for conn in (a, b):
        assert await conn.command(b"REGISTER t\n") == b"OK"
        assert await conn.command(b"REGISTER u\n") == b"OK"
    response = await http.post("/topic/tombstone?topic=t&node=a.test:1001")
    assert (response.status_code, response.content) == (200, b"")
    await http.post("/topic/tombstone?topic=t&node=nobody:1")
    lookup = await get_json(http, "/lookup?topic=t")
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["b.test"]
    lookup = await get_json(http, "/lookup?topic=u")
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["a.test", "b.test"]
    nodes = (await get_json(http, "/nodes"))["producers"]
    assert [(n["broadcast_address"], n["topics"], n["tombstones"]) for n in nodes] == [
        ("a.test", ["t", "u"], [True, False]),
        ("b.test", ["t", "u"], [False, False]),
    ]
    # REGISTER again keeps the tombstone
    assert await a.command(b"REGISTER t\n") == b"OK"
    clock.now += 44.0
    lookup = await get_json(http, "/lookup?topic=t")
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["b.test"]
    clock.now += 1.0
    lookup = await get_json(http, "/lookup?topic=t")
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["a.test", "b.test"]
    nodes = (await get_json(http, "/nodes"))["producers"]
    assert nodes[0]["tombstones"] == [False, False]


async def test_tombstone_is_dropped_with_the_topic_registration(
    lookupd: NSQLookupd, http: httpx.AsyncClient
) -> None:
    conn = await Conn.open(lookupd)
    await conn.identify()
    assert await conn.command(b"REGISTER t\n") == b"OK"
    await http.post("/topic/tombstone?topic=t&node=nsqd.test:4151")
    assert (await get_json(http, "/lookup?topic=t"))["producers"] == []
    assert await conn.command(b"UNREGISTER t\n") == b"OK"
    assert await conn.command(b"REGISTER t\n") == b"OK"
    assert (await get_json(http, "/lookup?topic=t"))["producers"] == [producer_json(conn)]


async def test_nodes_shape(lookupd: NSQLookupd, http: httpx.AsyncClient) -> None:
    conn = await Conn.open(lookupd)
    await conn.identify(topology_zone="z", topology_region="r")
    assert await conn.command(b"REGISTER t c\n") == b"OK"
    response = await http.get("/nodes")
    expected = producer_json(conn, topology_zone="z", topology_region="r") | {
        "tombstones": [False],
        "topics": ["t"],
    }
    assert response.json() == {"producers": [expected]}
    assert list(response.json()["producers"][0]) == list(expected)


async def test_debug_shape(lookupd: NSQLookupd, http: httpx.AsyncClient) -> None:
    conn = await Conn.open(lookupd)
    await conn.identify()
    assert await conn.command(b"REGISTER t\n") == b"OK"
    assert await conn.command(b"REGISTER a c\n") == b"OK"
    await http.post("/topic/create?topic=empty")
    await http.post("/topic/tombstone?topic=t&node=nsqd.test:4151")
    response = await http.get("/debug")
    assert response.headers["x-nsq-content-type"] == NSQ
    data = response.json()
    # Go sorts a map's keys; keys without producers are absent
    assert list(data) == ["channel:a:c", "client::", "topic:a:", "topic:t:"]
    client, topic = data["client::"][0], data["topic:t:"][0]
    assert list(client) == sorted(client)
    last_update = client.pop("last_update")
    assert client == {
        "broadcast_address": "nsqd.test",
        "hostname": "nsqd-host",
        "http_port": 4151,
        "id": conn.local_address,
        "tcp_port": 4150,
        "tombstoned": False,
        "tombstoned_at": GO_ZERO_TIME_NS,
        "topology_region": "",
        "topology_zone": "",
        "version": "1.3.0",
    }
    assert abs(last_update / 1e9 - time.time()) < 60
    assert topic["tombstoned"] is True
    assert abs(topic["tombstoned_at"] / 1e9 - time.time()) < 60
    assert topic["last_update"] == last_update


async def test_keep_alive_after_a_post_with_a_body(http: httpx.AsyncClient) -> None:
    """Go reads and drops a request's body; the next request on the connection works."""
    response = await http.post("/topic/create?topic=t", content=b"x" * 100_000)
    assert response.status_code == 200
    assert await get_json(http, "/topics") == {"topics": ["t"]}


# -- startup --------------------------------------------------------------------------------


async def test_a_port_in_use_is_a_startup_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for tcp, http in [
            (f"127.0.0.1:{port}", "127.0.0.1:0"),
            ("127.0.0.1:0", f"127.0.0.1:{port}"),
        ]:
            daemon = NSQLookupd(NSQLookupdOptions(tcp_address=tcp, http_address=http))
            with pytest.RaisesGroup(
                pytest.RaisesExc(
                    StartupError,
                    match=rf"^failed to instantiate nsqlookupd - listen \(127\.0\.0\.1:{port}\) "
                    rf"failed - listen tcp 127\.0\.0\.1:{port}: bind: address already in use$",
                ),
                allow_unwrapped=True,
                flatten_subgroups=True,
            ):
                await daemon.run()


async def test_a_bad_address_is_a_startup_error() -> None:
    daemon = NSQLookupd(NSQLookupdOptions(tcp_address="127.0.0.1", http_address="127.0.0.1:0"))
    with pytest.raises(StartupError) as info:
        await daemon.run()
    assert str(info.value) == (
        "failed to instantiate nsqlookupd - listen (127.0.0.1) failed - "
        "listen tcp: address 127.0.0.1: missing port in address"
    )


# -- the process ----------------------------------------------------------------------------


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trionsq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=pythonpath_env(),
    )


def test_process_serves_and_exits_0_on_sigterm() -> None:
    with DaemonProcess("nsqlookupd", env=pythonpath_env()) as daemon:
        assert daemon.http_address is not None
        host, port = daemon.http_address
        response = httpx.get(f"http://{host}:{port}/ping", timeout=5)
        assert (response.status_code, response.text) == (200, "OK")
        with socket.create_connection(daemon.tcp_address, timeout=5) as sock:
            body = json.dumps(peer_fields()).encode()
            sock.sendall(b"  V1IDENTIFY\n" + struct.pack(">I", len(body)) + body)
            size = struct.unpack(">I", sock.recv(4))[0]
            answer = json.loads(sock.recv(size))
            assert answer["broadcast_address"] == "127.0.0.1"
            assert (answer["tcp_port"], answer["http_port"]) == (daemon.tcp_address[1], port)
        assert daemon.terminate() == 0
    log = "".join(daemon.stderr_lines)
    assert re.search(r"^\[nsqlookupd\] \S+ \S+ INFO: nsqlookupd v1\.3\.0 \(built w/", log, re.M)
    assert re.search(r"INFO: TCP: listening on 127\.0\.0\.1:\d+$", log, re.M)
    assert re.search(r"INFO: HTTP: listening on 127\.0\.0\.1:\d+$", log, re.M)
    assert "received SIGTERM, shutting down" in log
    assert "Traceback" not in log


def test_process_exits_0_on_sigint_via_the_lookupd_alias() -> None:
    with DaemonProcess("lookupd", env=pythonpath_env()) as daemon:
        daemon.proc.send_signal(signal.SIGINT)
        assert daemon.proc.wait(20) == 0


@pytest.mark.parametrize("command", ["nsqlookupd", "lookupd"])
def test_version(command: str) -> None:
    proc = _run(command, "--version")
    assert proc.returncode == 0
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"nsqlookupd v1\.3\.0 \(built w/trionsq-[a-z0-9.-]+\)", lines[0])


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (["nsqlookupd", "--nope"], 2, "trionsq nsqlookupd: flag provided but not defined: -nope"),
        (["lookupd", "--nope"], 2, "trionsq lookupd: flag provided but not defined: -nope"),
        (
            ["nsqlookupd", "--tombstone-lifetime=x"],
            2,
            'trionsq nsqlookupd: invalid value "x" for flag -tombstone-lifetime: parse error',
        ),
    ],
)
def test_bad_flags_are_one_line(args: list[str], code: int, line: str) -> None:
    proc = _run(*args)
    assert proc.returncode == code
    assert proc.stderr.splitlines() == [line]
    assert proc.stdout == ""


def test_help_exits_0() -> None:
    proc = _run("nsqlookupd", "--help")
    assert proc.returncode == 0
    assert proc.stderr.startswith("Usage of nsqlookupd:\n  -broadcast-address string\n")


def test_a_port_in_use_exits_1_with_one_fatal_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _run("nsqlookupd", f"--tcp-address=127.0.0.1:{port}", "--http-address=127.0.0.1:0")
    assert proc.returncode == 1
    fatal = [line for line in proc.stderr.splitlines() if "FATAL" in line]
    assert len(fatal) == 1
    assert fatal[0].endswith(
        f" FATAL: failed to instantiate nsqlookupd - listen (127.0.0.1:{port}) failed - "
        f"listen tcp 127.0.0.1:{port}: bind: address already in use"
    )
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 2  # the version line, then the error


def test_gnsq_lookupd_client_reads_our_answers() -> None:
    """A real client library's nsqlookupd client against the daemon (in its own process,
    since gnsq brings gevent)."""
    pytest.importorskip("gnsq")
    script = textwrap.dedent(
        """
        import json, sys
        from gnsq import LookupdClient
        host, port = sys.argv[1], int(sys.argv[2])
        c = LookupdClient(host, port)
        out = {"ping": c.ping().decode(), "info": c.info()}
        c.create_topic("t")
        c.create_channel("t", "c")
        out["topics"] = c.topics()
        out["channels"] = c.channels("t")
        out["lookup"] = c.lookup("t")
        out["nodes"] = c.nodes()
        c.tombstone_topic("t", "x:1")
        c.delete_channel("t", "c")
        c.delete_topic("t")
        out["after"] = c.topics()
        print(json.dumps(out))
        """
    )
    with DaemonProcess("nsqlookupd", env=pythonpath_env()) as daemon:
        assert daemon.http_address is not None
        host, port = daemon.http_address
        proc = subprocess.run(
            [sys.executable, "-c", script, host, str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "ping": "OK",
        "info": {"version": "1.3.0"},
        "topics": {"topics": ["t"]},
        "channels": {"channels": ["c"]},
        "lookup": {"channels": ["c"], "producers": []},
        "nodes": {"producers": []},
        "after": {"topics": []},
    }
