"""nsqd's lookup loop against a scripted nsqlookupd on loopback: IDENTIFY, the re-sync of every
topic and channel, REGISTER/UNREGISTER as they come and go, PING, reconnecting, PUT
/config/nsqlookupd_tcp_addresses, and the pre-creation of a new topic's channels."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd import lookup
from trionsq.nsqd.nsqd import NSQD
from trionsq.protocol import pub


class FakeLookupd:
    """Speaks nsqlookupd's V1 TCP protocol enough to record what nsqd sends; its HTTP side
    answers /channels with `channels`."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.identify: dict[str, Any] | None = None
        self.connections = 0
        self.channels: list[str] = []
        self.channel_queries: list[str] = []
        self.tcp_port = 0
        self.http_port = 0
        self.streams: list[trio.SocketStream] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    async def start(self, nursery: trio.Nursery) -> FakeLookupd:
        listeners = await nursery.start(partial(trio.serve_tcp, self._tcp, 0, host="127.0.0.1"))
        self.tcp_port = listeners[0].socket.getsockname()[1]
        listeners = await nursery.start(partial(trio.serve_tcp, self._http, 0, host="127.0.0.1"))
        self.http_port = listeners[0].socket.getsockname()[1]
        return self

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5) -> None:
        with trio.fail_after(timeout):
            while not predicate():
                await trio.sleep(0.01)

    def _record(self, line: str) -> None:
        self.lines.append(line)

    async def drop_connections(self) -> None:
        for stream in self.streams:
            await stream.aclose()
        self.streams.clear()

    async def _tcp(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self.streams.append(stream)
        buffer = b""
        try:
            while True:
                while b"\n" not in buffer:
                    data = await stream.receive_some(4096)
                    if not data:
                        return
                    buffer += data
                line, buffer = buffer.split(b"\n", 1)
                if line.startswith(b"  V1"):
                    line = line[4:]
                if line == b"IDENTIFY":
                    while len(buffer) < 4:
                        buffer += await stream.receive_some(4096)
                    size = struct.unpack(">I", buffer[:4])[0]
                    while len(buffer) < 4 + size:
                        buffer += await stream.receive_some(4096)
                    self.identify = json.loads(buffer[4 : 4 + size])
                    buffer = buffer[4 + size :]
                    reply = json.dumps(
                        {
                            "tcp_port": self.tcp_port,
                            "http_port": self.http_port,
                            "version": "1.3.0",
                            "broadcast_address": "127.0.0.1",
                            "hostname": "fake",
                        }
                    ).encode()
                else:
                    reply = b"OK"
                self._record(line.decode())
                await stream.send_all(struct.pack(">I", len(reply)) + reply)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return

    async def _http(self, stream: trio.SocketStream) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = await stream.receive_some(4096)
            if not data:
                return
            request += data
        self.channel_queries.append(request.split(b"\r\n", 1)[0].decode())
        body = json.dumps({"channels": self.channels}).encode()
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        await stream.aclose()


@pytest.fixture(autouse=True)
def quick_lookup_timers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookup, "PING_INTERVAL", 0.3)
    monkeypatch.setattr(lookup, "BACKOFF_MIN", 0.05)


async def connected_nsqd(nursery: trio.Nursery, tmp_path: Any, *addresses: str) -> NSQD:
    return await start_nsqd(nursery, str(tmp_path), nsqlookupd_tcp_addresses=list(addresses))


def registrations(fake: FakeLookupd) -> list[str]:
    return [line for line in fake.lines if line.split(" ")[0] in ("REGISTER", "UNREGISTER")]


async def test_identify_then_registrations_as_topics_and_channels_come_and_go(nursery, tmp_path):
    fake = await FakeLookupd().start(nursery)
    nsqd = await connected_nsqd(nursery, tmp_path, fake.address)
    await fake.wait_for(lambda: bool(nsqd.lookup.http_addresses))
    identify = fake.identify
    assert identify is not None
    assert identify["tcp_port"] == nsqd.tcp_address[1]  # type: ignore[index]
    assert identify["version"] == "1.3.0"
    assert set(identify) == {
        "version",
        "tcp_port",
        "http_port",
        "hostname",
        "broadcast_address",
        "topology_zone",
        "topology_region",
    }
    assert identify["broadcast_address"] == nsqd.options.broadcast_address

    topic = nsqd.get_topic("orders")
    topic.get_channel("billing")
    topic.get_channel("audit")
    topic.delete_channel("audit")
    nsqd.delete_topic("orders")
    await fake.wait_for(lambda: len(registrations(fake)) == 6)
    assert registrations(fake) == [
        "REGISTER orders",
        "REGISTER orders billing",
        "REGISTER orders audit",
        "UNREGISTER orders audit",
        "UNREGISTER orders",
        "UNREGISTER orders billing",
    ]


async def test_a_reconnect_registers_everything_again_and_pings_keep_it_alive(nursery, tmp_path):
    fake = await FakeLookupd().start(nursery)
    nsqd = await start_nsqd(nursery, str(tmp_path))
    nsqd.get_topic("lonely")
    nsqd.get_topic("busy").get_channel("c1")
    nsqd.get_topic("busy").get_channel("c2#ephemeral")
    nsqd.lookup.set_addresses([fake.address])  # as PUT /config does
    await fake.wait_for(lambda: len(registrations(fake)) == 3)
    assert registrations(fake) == [
        "REGISTER lonely",
        "REGISTER busy c1",
        "REGISTER busy c2#ephemeral",
    ]
    await fake.wait_for(lambda: "PING" in fake.lines)

    fake.lines.clear()
    await fake.drop_connections()
    await fake.wait_for(lambda: len(registrations(fake)) == 3)
    assert fake.connections == 2
    assert fake.lines[0] == "IDENTIFY"
    assert sorted(registrations(fake)) == [
        "REGISTER busy c1",
        "REGISTER busy c2#ephemeral",
        "REGISTER lonely",
    ]


async def test_put_config_moves_the_daemon_to_other_lookupds(nursery, tmp_path):
    first = await FakeLookupd().start(nursery)
    second = await FakeLookupd().start(nursery)
    nsqd = await start_nsqd(
        nursery, str(tmp_path), http_address="127.0.0.1:0", nsqlookupd_tcp_addresses=[first.address]
    )
    await first.wait_for(lambda: first.identify is not None)
    host, port = nsqd.http_address  # type: ignore[misc]
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        response = await http.put(
            "/config/nsqlookupd_tcp_addresses", content=json.dumps([second.address])
        )
        assert (response.status_code, response.json()) == (200, [second.address])
    await second.wait_for(lambda: second.identify is not None)
    assert second.identify is not None
    assert second.identify["http_port"] == port
    nsqd.get_topic("after")
    await second.wait_for(lambda: "REGISTER after" in second.lines)
    assert "REGISTER after" not in first.lines
    assert list(nsqd.lookup.peers) == [second.address]


async def test_a_new_topic_creates_the_lookupds_channels_before_its_first_message(
    nursery, tmp_path
):
    fake = await FakeLookupd().start(nursery)
    fake.channels = ["archive", "billing", "live#ephemeral"]
    nsqd = await connected_nsqd(nursery, tmp_path, fake.address)
    await fake.wait_for(lambda: bool(nsqd.lookup.http_addresses))
    producer = await Conn.open(nsqd)
    await producer.send(pub("invoices", b"first"))
    assert await producer.response() == b"OK"
    with trio.fail_after(5):
        while not nsqd.topics["invoices"].started:
            await trio.sleep(0.01)
    assert fake.channel_queries == ["GET /channels?topic=invoices HTTP/1.1"]
    topic = nsqd.topics["invoices"]
    assert sorted(topic.channels) == ["archive", "billing"]
    for name in ("archive", "billing"):
        consumer = await Conn.consumer(nsqd, "invoices", name, ready=1)
        assert (await consumer.message()).body == b"first"


async def test_a_lookupd_that_is_down_is_retried_and_topics_still_work(nursery, tmp_path):
    with trio.socket.socket() as sock:  # a port with nothing listening
        await sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    nsqd = await connected_nsqd(nursery, tmp_path, dead)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    assert (await consumer.message()).body == b"x"
    assert nsqd.lookup.http_addresses == []


async def test_pings_keep_their_interval_while_notifications_flow(nursery, tmp_path):
    fake = await FakeLookupd().start(nursery)
    nsqd = await connected_nsqd(nursery, tmp_path, fake.address)
    await fake.wait_for(lambda: bool(nsqd.lookup.http_addresses))
    start = trio.current_time()
    n = 0
    while trio.current_time() - start < 1.0:  # a notification every 50 ms, interval 0.3 s
        nsqd.get_topic(f"t{n}")
        n += 1
        await trio.sleep(0.05)
    # Count once every registration has arrived: a PING sent inside the window is then
    # in too (one connection keeps its order), however slowly a loaded machine read it.
    await fake.wait_for(lambda: len(registrations(fake)) == n)
    pings = fake.lines.count("PING")
    elapsed = trio.current_time() - start
    # 1 s of notifications at a 0.3 s interval: PINGs still go out (a timer restarted by
    # each notification would send none); a loaded machine may run fewer loop turns, or
    # stretch the loop past 1 s, so the ceiling follows the time that really passed.
    assert 1 <= pings <= elapsed / 0.3 + 1
