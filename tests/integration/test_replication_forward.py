"""Publishes to a replica, forwarded to the primary (docs/replication.md sections 5 and 13,
trionsq/nsqd/replication_forward.py): in process with the three-member `Cluster` of
test_replication.py, and end to end with three nsqd processes, an unmodified pynsq Writer and
HTTP ``/pub`` and ``/mpub``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trio

from tests.conformance.nsq_conn import NSQConn
from tests.integration.test_replication import Cluster, drain, publish
from tests.nsqd_harness import Conn
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.replication import forward as replication_forward
from trionsq.nsqd.stats import snapshot
from trionsq.protocol import FRAME_TYPE_ERROR, Message, dpub, fin, mpub, pub, rdy, sub
from trionsq.protocol.guid import SEQUENCE_BITS
from trionsq.testing import DaemonProcess, free_ports, pythonpath_env

CLIENTS = Path(__file__).parent / "clients"


def node_of(message_id: bytes) -> int:
    """The node ID a message ID embeds (protocol/guid.py)."""
    return (int(message_id, 16) >> SEQUENCE_BITS) & 0x3FF


async def started(nursery: trio.Nursery, tmp_path: Path, **extra: object) -> Cluster:
    """Three members; node 1 leads "rt" (created by a PUB to it), the others know it."""
    cluster = Cluster(nursery, tmp_path, **extra)
    await cluster.start_all()
    n1 = cluster.nodes[0]
    assert n1 is not None
    assert await publish(n1, "rt", [b"first"]) == [b"first"]
    await known_primary(cluster, 0)
    return cluster


async def known_primary(cluster: Cluster, primary: int) -> None:
    def known() -> bool:
        return all(
            "rt" in n.topics and n.topics["rt"].replica.primary == primary + 1
            for n in cluster.live()
        )

    await cluster.until(known)


async def consume_exactly(nsqd: NSQD, count: int, quiet: float = 0.5) -> list[Message]:
    """`count` messages of "rt" on channel c, each finished; then nothing more for `quiet`
    seconds (a message the log held twice would come again)."""
    conn = await Conn.open(nsqd)
    await conn.send(sub("rt", "c"))
    assert await conn.response() == b"OK"
    await conn.send(rdy(count + 10))
    messages = []
    with trio.fail_after(10):
        for _ in range(count):
            message = await conn.message()
            messages.append(message)
            await conn.send(fin(message.id))
    await conn.no_frame_for(quiet)
    await conn.aclose()
    return messages


async def test_pub_mpub_and_dpub_to_a_replica_are_forwarded_and_consumed_once(
    tmp_path: Path,
) -> None:
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        n1, n2 = cluster.nodes[0], cluster.nodes[1]
        assert n1 is not None and n2 is not None
        conn = await Conn.open(n2)
        await conn.send(pub("rt", b"single"))
        assert await conn.response() == b"OK"
        await conn.send(mpub("rt", [b"batch-%d" % i for i in range(100)]))
        assert await conn.response() == b"OK"
        await conn.send(dpub("rt", 800, b"deferred"))
        assert await conn.response() == b"OK"
        # Acknowledged: the primary and a quorum have them, and the replica's counters say
        # what it forwarded (its own topic counts nothing: it published nothing itself).
        assert len(n1.topics["rt"].replica.log) == 103
        clients = snapshot(n2)["topics"]
        info = {t["topic_name"]: t for t in clients}["rt"]
        assert info["message_count"] == 0
        assert info["replication"]["forwarded_messages"] == 102
        assert info["replication"]["forward_failed_messages"] == 0
        producers = [c for c in snapshot(n2)["producers"] if c.get("pub_counts")]
        assert producers[0]["pub_counts"] == [{"topic": "rt", "count": 102}]
        await conn.aclose()

        messages = await consume_exactly(n1, 103, quiet=1.0)
        bodies = [bytes(m.body) for m in messages]
        assert sorted(bodies) == sorted(
            [b"first", b"single", b"deferred"] + [b"batch-%d" % i for i in range(100)]
        )
        assert bodies[-1] == b"deferred"  # after the others: deferred
        # The IDs are the replica's (its node ID in them), as its parser made them.
        assert {node_of(m.id) for m in messages[1:]} == {2}
        assert {t["topic_name"]: t for t in snapshot(n1)["topics"]}["rt"]["message_count"] == 103
        cluster.stop()


async def test_a_deferred_message_is_not_delivered_before_its_time(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        n1, n3 = cluster.nodes[0], cluster.nodes[2]
        assert n1 is not None and n3 is not None
        consumer = await Conn.open(n1)
        await consumer.send(sub("rt", "c"))
        assert await consumer.response() == b"OK"
        await consumer.send(rdy(10))
        assert bytes((await consumer.message()).body) == b"first"
        conn = await Conn.open(n3)
        sent_at = trio.current_time()
        await conn.send(dpub("rt", 700, b"later"))
        assert await conn.response() == b"OK"
        message = await consumer.message()
        assert bytes(message.body) == b"later"
        assert trio.current_time() - sent_at >= 0.65
        await conn.aclose()
        await consumer.aclose()
        cluster.stop()


async def test_many_publishers_through_a_replica_share_forwarded_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sends: list[int] = []
    original = replication_forward.Forwarder._send

    def counting(self: replication_forward.Forwarder, peer, batch) -> bool:  # type: ignore[no-untyped-def]
        sends.append(batch.count)
        return original(self, peer, batch)

    monkeypatch.setattr(replication_forward.Forwarder, "_send", counting)
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        n1, n2 = cluster.nodes[0], cluster.nodes[1]
        assert n1 is not None and n2 is not None
        acked: list[bytes] = []
        publishers, each = 20, 25

        async def publisher(p: int) -> None:
            acked.extend(await publish(n2, "rt", [b"p%d-%d" % (p, i) for i in range(each)]))

        async with trio.open_nursery() as inner:
            for p in range(publishers):
                inner.start_soon(publisher, p)
        assert len(acked) == publishers * each
        # One PUB_FORWARD per scheduler pass, not one per PUB.
        assert sum(sends) == publishers * each
        assert len(sends) < publishers * each / 3, len(sends)
        messages = await consume_exactly(n1, publishers * each + 1)
        assert sorted(bytes(m.body) for m in messages) == sorted([*acked, b"first"])
        cluster.stop()


async def test_a_publish_to_a_replica_waits_for_an_election(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        n2 = cluster.nodes[1]
        assert n2 is not None
        cluster.crash(0)
        # Node 1's connection is seen closed: no primary to forward to until one is elected.
        await cluster.until(
            lambda: not any(p.connected and p.node_id == 1 for p in n2.replication.peers)
        )
        conn = await Conn.open(n2)
        await conn.send(pub("rt", b"during the election"))
        with trio.fail_after(3.0):  # --replication-ack-timeout
            assert await conn.response() == b"OK"
        await conn.aclose()
        new = cluster.primary("rt")
        assert new in (1, 2)
        leader = cluster.nodes[new]
        assert leader is not None
        messages = await consume_exactly(leader, 2)
        assert sorted(bytes(m.body) for m in messages) == [b"during the election", b"first"]
        cluster.stop()


async def test_no_primary_within_the_ack_timeout_fails_the_publish(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, replication_ack_timeout=0.5)
        cluster.options[1] = dataclasses.replace(cluster.options[1], http_address="127.0.0.1:0")
        await cluster.start_all()
        n1, n2 = cluster.nodes[0], cluster.nodes[1]
        assert n1 is not None and n2 is not None
        assert await publish(n1, "rt", [b"first"]) == [b"first"]
        await known_primary(cluster, 0)
        cluster.crash(0)
        cluster.crash(2)  # node 2 alone: no primary, and no quorum to elect one
        conn = await Conn.open(n2)
        started_at = trio.current_time()
        await conn.send(pub("rt", b"nobody leads"))
        with trio.fail_after(3.0):
            frame_type, data = await conn.frame()
        assert frame_type == FRAME_TYPE_ERROR and data.startswith(b"E_PUB_FAILED"), data
        assert trio.current_time() - started_at >= 0.45
        assert await conn.closed()
        assert n2.http_address is not None
        host, port = n2.http_address
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
            with trio.fail_after(3.0):
                r = await http.post("/pub?topic=rt", content=b"nobody leads either")
            assert r.status_code == 503
        info = n2.topics["rt"].replica.stats()  # type: ignore[attr-defined]
        assert info["forward_failed_messages"] == 2
        cluster.stop()


async def test_publishes_through_replicas_while_the_primary_dies_lose_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        acked: set[bytes] = {b"first"}
        answers: dict[str, int] = {"ok": 0, "failed": 0}
        stop = trio.Event()

        async def publisher(index: int, tag: str) -> None:
            """Single PUBs through one replica; after a failure (a fatal E_PUB_FAILED, the
            connection closed) it reconnects to the same replica and goes on."""
            n = 0
            while not stop.is_set():
                node = cluster.nodes[index]
                assert node is not None
                conn = await Conn.open(node)
                try:
                    while not stop.is_set():
                        body = b"%s-%d" % (tag.encode(), n)
                        n += 1
                        await conn.send(pub("rt", body) if n % 4 else mpub("rt", [body]))
                        with trio.fail_after(8):  # ack timeout twice, and the grace
                            frame_type, data = await conn.frame()
                        if frame_type == FRAME_TYPE_ERROR:
                            assert data.startswith(b"E_PUB_FAILED"), data
                            answers["failed"] += 1
                            assert await conn.closed()
                            break
                        assert data == b"OK"
                        acked.add(body)
                        answers["ok"] += 1
                finally:
                    await conn.aclose()

        async with trio.open_nursery() as load:
            load.start_soon(publisher, 1, "two")
            load.start_soon(publisher, 2, "three")
            await trio.sleep(0.5)
            before = answers["ok"]
            assert before > 10
            cluster.crash(0)
            await cluster.until(lambda: cluster.primary("rt") in (1, 2))
            at_takeover = answers["ok"]
            await cluster.until(lambda: answers["ok"] > at_takeover + 50)
            stop.set()
        new = cluster.primary("rt")
        assert new is not None
        leader = cluster.nodes[new]
        assert leader is not None
        got = await drain(leader, "rt", acked)
        assert acked <= got, f"{len(acked - got)} acknowledged messages lost"
        cluster.stop()


async def test_http_pub_and_mpub_to_a_replica_are_forwarded(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        cluster.options[2] = dataclasses.replace(cluster.options[2], http_address="127.0.0.1:0")
        await cluster.start_all()
        n1, n3 = cluster.nodes[0], cluster.nodes[2]
        assert n1 is not None and n3 is not None
        assert await publish(n1, "rt", [b"first"]) == [b"first"]
        await known_primary(cluster, 0)
        assert n3.http_address is not None
        host, port = n3.http_address
        binary = b"".join(len(b).to_bytes(4, "big") + b for b in (b"bin-1", b"bin-2"))
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
            r = await http.post("/pub?topic=rt", content=b"http-pub")
            assert (r.status_code, r.text) == (200, "OK")
            r = await http.post("/pub?topic=rt&defer=300", content=b"http-deferred")
            assert (r.status_code, r.text) == (200, "OK")
            r = await http.post("/mpub?topic=rt", content=b"text-1\ntext-2\n")
            assert (r.status_code, r.text) == (200, "OK")
            r = await http.post(
                "/mpub?topic=rt&binary=true", content=len([1, 2]).to_bytes(4, "big") + binary
            )
            assert (r.status_code, r.text) == (200, "OK")
        messages = await consume_exactly(n1, 7)
        assert sorted(bytes(m.body) for m in messages) == sorted(
            [b"first", b"http-pub", b"http-deferred", b"text-1", b"text-2", b"bin-1", b"bin-2"]
        )
        assert {node_of(m.id) for m in messages if m.body != b"first"} == {3}
        cluster.stop()


# -- end to end: processes, an unmodified pynsq Writer, HTTP --------------------------------


def _start_members(
    tmp_path: Path, members: list[DaemonProcess], ports: list[tuple[int, int]]
) -> None:
    for i, (tcp, http) in enumerate(ports):
        data = tmp_path / f"n{i + 1}"
        data.mkdir()
        peers = [f"--replicate-to=127.0.0.1:{t}" for j, (t, _) in enumerate(ports) if j != i]
        members.append(
            DaemonProcess(
                "nsqd",
                args=[
                    f"--node-id={i + 1}",
                    f"--tcp-address=127.0.0.1:{tcp}",
                    f"--http-address=127.0.0.1:{http}",
                    "--broadcast-address=127.0.0.1",
                    "--replicate-topic=fw.*",
                    "--replication-secret=forward",
                    *peers,
                ],
                data_path=str(data),
                env=pythonpath_env(),
            )
        )


def _replication(http: int, topic: str) -> dict[str, object] | None:
    try:
        r = httpx.get(f"http://127.0.0.1:{http}/stats?format=json&topic={topic}", timeout=1)
    except httpx.HTTPError:
        return None
    for entry in r.json().get("topics") or []:
        if entry["topic_name"] == topic:
            info = entry.get("replication")
            return info if isinstance(info, dict) else None
    return None


def test_an_unmodified_pynsq_writer_and_http_publish_through_a_replica(tmp_path: Path) -> None:
    pytest.importorskip("nsq")
    topic = "fwd"
    flat = free_ports(6)
    ports = [(flat[2 * i], flat[2 * i + 1]) for i in range(3)]
    members: list[DaemonProcess] = []
    try:
        _start_members(tmp_path, members, ports)
        r = httpx.post(f"http://127.0.0.1:{ports[0][1]}/topic/create?topic={topic}", timeout=5)
        assert r.status_code == 200
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            roles = [(_replication(h, topic) or {}).get("role") for _, h in ports]
            primaries = [i for i, role in enumerate(roles) if role == "primary"]
            if primaries and all((_replication(h, topic) or {}).get("primary") for _, h in ports):
                break
            time.sleep(0.1)
        assert len(primaries) == 1, roles
        primary = primaries[0]
        replica = (primary + 1) % 3
        httpx.post(
            f"http://127.0.0.1:{ports[primary][1]}/channel/create?topic={topic}&channel=c",
            timeout=5,
        )
        count = 20
        out = subprocess.run(
            [
                sys.executable,
                str(CLIENTS / "pynsq_writer_client.py"),
                f"127.0.0.1:{ports[replica][0]}",
                topic,
                str(count),
                "500",
                "30",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=pythonpath_env(),
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["errors"] == [], (result["errors"], out.stderr[-2000:])
        expected = {f"pynsq-pub-{i}" for i in range(count)}
        expected |= {f"pynsq-mpub-{i}" for i in range(count)} | {"pynsq-dpub"}
        assert set(result["acknowledged"]) == expected
        http = f"http://127.0.0.1:{ports[replica][1]}"
        r = httpx.post(f"{http}/pub?topic={topic}", content=b"http-pub", timeout=10)
        assert (r.status_code, r.text) == (200, "OK")
        r = httpx.post(f"{http}/mpub?topic={topic}", content=b"http-1\nhttp-2", timeout=10)
        assert (r.status_code, r.text) == (200, "OK")
        expected |= {"http-pub", "http-1", "http-2"}
        received: list[str] = []
        with NSQConn(("127.0.0.1", ports[primary][0]), timeout=5) as conn:
            conn.sub(topic, "c")
            conn.rdy(200)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(received) < len(expected):
                message = conn.try_read_message(0.2)
                if message is not None:
                    received.append(bytes(message.body).decode())
                    conn.fin(message.id)
            while (message := conn.try_read_message(0.5)) is not None:
                received.append(bytes(message.body).decode())
        assert sorted(received) == sorted(expected)  # each exactly once
        info = _replication(ports[replica][1], topic) or {}
        assert info["forwarded_messages"] == len(expected)
    finally:
        for member in members:
            member.kill()
            member.close()
