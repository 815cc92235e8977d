"""A cluster on loopback: two nsqlookupds and three nsqds, each nsqd registered with both, all
real processes. A consumer finds every nsqd of its topic through /lookup; a killed or frozen
nsqd disappears; a tombstone hides a node for its lifetime; a deleted channel is unregistered."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conformance.nsq_conn import NSQConn
from trionsq.testing import DaemonProcess


@dataclass
class Cluster:
    lookupds: list[DaemonProcess]
    nsqds: list[DaemonProcess]

    def lookup(self, lookupd: int, topic: str) -> dict[str, Any]:
        host, port = self.lookupds[lookupd].http_address  # type: ignore[misc]
        response = httpx.get(f"http://{host}:{port}/lookup", params={"topic": topic})
        if response.status_code == 404:
            return {"channels": [], "producers": []}
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def lookupd_http(self, lookupd: int) -> httpx.Client:
        host, port = self.lookupds[lookupd].http_address  # type: ignore[misc]
        return httpx.Client(base_url=f"http://{host}:{port}")

    def nsqd_http(self, nsqd: int) -> httpx.Client:
        host, port = self.nsqds[nsqd].http_address  # type: ignore[misc]
        return httpx.Client(base_url=f"http://{host}:{port}")

    def producer_ports(self, lookupd: int, topic: str) -> set[int]:
        return {p["tcp_port"] for p in self.lookup(lookupd, topic)["producers"]}

    def tcp_port(self, nsqd: int) -> int:
        return self.nsqds[nsqd].tcp_address[1]


def eventually(check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


def start_cluster(tmp_path: Any, lookupd_args: list[str]) -> Iterator[Cluster]:
    with ExitStack() as stack:
        lookupds = [
            stack.enter_context(DaemonProcess("nsqlookupd", args=lookupd_args)) for _ in range(2)
        ]
        lookupd_flags = [
            f"--lookupd-tcp-address={host}:{port}"
            for host, port in (lookupd.tcp_address for lookupd in lookupds)
        ]
        nsqds = []
        for i in range(3):
            data = tmp_path / f"nsqd{i}"
            data.mkdir()
            nsqds.append(
                stack.enter_context(
                    DaemonProcess(
                        "nsqd",
                        args=[*lookupd_flags, "--broadcast-address=127.0.0.1"],
                        data_path=str(data),
                    )
                )
            )
        yield Cluster(lookupds, nsqds)


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[Cluster]:
    yield from start_cluster(tmp_path, ["--tombstone-lifetime=2s"])


def test_a_consumer_finds_every_nsqd_of_its_topic_through_either_lookupd(cluster: Cluster):
    for i in range(3):
        with cluster.nsqd_http(i) as http:
            assert http.post("/pub?topic=orders", content=b"from %d" % i).status_code == 200
    ports = {cluster.tcp_port(i) for i in range(3)}
    for lookupd in range(2):
        eventually(lambda lookupd=lookupd: cluster.producer_ports(lookupd, "orders") == ports)
    producers = cluster.lookup(0, "orders")["producers"]
    assert {p["broadcast_address"] for p in producers} == {"127.0.0.1"}
    assert {p["http_port"] for p in producers} == {
        cluster.nsqds[i].http_address[1]  # type: ignore[index]
        for i in range(3)
    }
    # the consumer connects to every producer /lookup lists and gets each node's message
    bodies = set()
    for producer in producers:
        with NSQConn((producer["broadcast_address"], producer["tcp_port"])) as conn:
            conn.sub("orders", "c")
            conn.rdy(10)
            message = conn.read_message()
            conn.fin(message.id)
            bodies.add(bytes(message.body))
    assert bodies == {b"from 0", b"from 1", b"from 2"}
    assert cluster.lookup(1, "orders")["channels"] == ["c"]


def test_a_killed_nsqd_disappears_from_lookup(cluster: Cluster):
    for i in range(3):
        with cluster.nsqd_http(i) as http:
            http.post("/topic/create?topic=events")
    ports = {cluster.tcp_port(i) for i in range(3)}
    eventually(lambda: cluster.producer_ports(0, "events") == ports)
    killed = cluster.tcp_port(1)
    cluster.nsqds[1].kill()
    for lookupd in range(2):
        eventually(
            lambda lookupd=lookupd: cluster.producer_ports(lookupd, "events") == ports - {killed}
        )


def test_a_tombstone_hides_a_node_for_the_tombstone_lifetime(cluster: Cluster):
    for i in range(3):
        with cluster.nsqd_http(i) as http:
            http.post("/topic/create?topic=billing")
    ports = {cluster.tcp_port(i) for i in range(3)}
    eventually(lambda: cluster.producer_ports(0, "billing") == ports)
    node = f"127.0.0.1:{cluster.nsqds[2].http_address[1]}"  # type: ignore[index]
    with cluster.lookupd_http(0) as http:
        response = http.post("/topic/tombstone", params={"topic": "billing", "node": node})
        assert response.status_code == 200
        tombstoned_at = time.monotonic()
        assert cluster.producer_ports(0, "billing") == ports - {cluster.tcp_port(2)}
        # only on that lookupd; /nodes still lists the node, with the tombstone
        assert cluster.producer_ports(1, "billing") == ports
        nodes = http.get("/nodes").json()["producers"]
        entry = next(n for n in nodes if n["tcp_port"] == cluster.tcp_port(2))
        assert dict(zip(entry["topics"], entry["tombstones"], strict=True))["billing"] is True
    eventually(lambda: cluster.producer_ports(0, "billing") == ports, timeout=10)
    assert time.monotonic() - tombstoned_at >= 1.9


def test_deleting_a_channel_on_nsqd_unregisters_it(cluster: Cluster):
    with cluster.nsqd_http(0) as http:
        http.post("/topic/create?topic=audit")
        http.post("/channel/create?topic=audit&channel=keep")
        http.post("/channel/create?topic=audit&channel=gone")

    def key_producers(channel: str) -> list[dict]:
        return cluster.lookupd_http(0).get("/debug").json().get(f"channel:audit:{channel}", [])

    eventually(lambda: len(key_producers("gone")) == 1 and len(key_producers("keep")) == 1)
    with cluster.nsqd_http(0) as http:
        assert http.post("/channel/delete?topic=audit&channel=gone").status_code == 200
    # the producer leaves the channel's key (lookupd keeps empty keys, as Go's does)
    eventually(lambda: key_producers("gone") == [])
    assert len(key_producers("keep")) == 1
    with cluster.nsqd_http(0) as http:
        assert http.post("/topic/delete?topic=audit").status_code == 200
    eventually(lambda: cluster.producer_ports(0, "audit") == set())


def test_a_frozen_nsqd_goes_inactive_after_the_inactive_producer_timeout(tmp_path: Any):
    """SIGSTOP keeps the connection open but stops the PINGs (every 15 s): lookupd stops
    handing the node out once --inactive-producer-timeout passes without one."""
    timeout = 20
    clusters = start_cluster(tmp_path, [f"--inactive-producer-timeout={timeout}s"])
    cluster = next(clusters)
    try:
        for i in range(3):
            with cluster.nsqd_http(i) as http:
                http.post("/topic/create?topic=frozen")
        ports = {cluster.tcp_port(i) for i in range(3)}
        eventually(lambda: cluster.producer_ports(0, "frozen") == ports)
        frozen = cluster.nsqds[0].proc.pid
        os.kill(frozen, signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            eventually(
                lambda: cluster.producer_ports(0, "frozen") == ports - {cluster.tcp_port(0)},
                timeout=timeout + 20,
            )
            assert time.monotonic() - stopped_at >= timeout - 15
            assert cluster.producer_ports(1, "frozen") == ports - {cluster.tcp_port(0)}
        finally:
            os.kill(frozen, signal.SIGCONT)
        eventually(lambda: cluster.producer_ports(0, "frozen") == ports, timeout=20)
    finally:
        clusters.close()
