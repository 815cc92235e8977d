"""Replicated topics, in process (docs/replication.md): three nsqds in one Trio run talking
over real TCP on 127.0.0.1, clients on in-memory streams. A "crash" cancels a daemon's tasks
without its ordered shutdown (nothing is flushed; what it wrote stays in its data path), as
kill -9 would leave it; the subprocess kill -9 trials are in test_replication_kill.py.

Short timeouts (failover 0.6 s) keep each test to a few seconds; the defaults are exercised by
the kill -9 trials and bench/replication.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.nsqd_harness import Conn
from trionsq.nsqd.assembly import new_nsqd
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.options import NSQDOptions
from trionsq.nsqd.replication.log import ReplicationLog
from trionsq.nsqd.replication.topic import ReplicatedTopic
from trionsq.protocol import fin, pub, rdy, sub
from trionsq.testing import free_ports

SECRET = "s3cret"
FAST = {
    "replication_heartbeat_interval": 0.1,
    "replication_lease": 0.3,
    "replication_failover_timeout": 0.6,
    "replication_fin_interval": 0.05,
    "replication_ack_timeout": 3.0,
}


class Cluster:
    """Three members (node IDs 1, 2, 3) of one replica set, each in its own cancel scope."""

    def __init__(self, nursery: trio.Nursery, root: Path, size: int = 3, **extra: Any) -> None:
        self.nursery = nursery
        self.ports = free_ports(size)
        self.addresses = [f"127.0.0.1:{p}" for p in self.ports]
        self.options = []
        for i in range(size):
            data = root / f"n{i + 1}"
            data.mkdir(exist_ok=True)
            self.options.append(
                dataclasses.replace(
                    NSQDOptions(),
                    node_id=i + 1,
                    tcp_address=self.addresses[i],
                    http_address="",
                    data_path=str(data),
                    broadcast_address="127.0.0.1",
                    replicate_to=[a for j, a in enumerate(self.addresses) if j != i],
                    replicate_topic=["r.*"],
                    replication_secret=SECRET,
                    **{**FAST, **extra},
                )
            )
        self.nodes: list[NSQD | None] = [None] * size
        #: What the members run their blocking work with (a test may record it).
        self.run_blocking: Any = trio.to_thread.run_sync
        self.scopes: list[trio.CancelScope | None] = [None] * size
        self.exited: list[trio.Event | None] = [None] * size

    async def start(self, index: int) -> NSQD:
        previous = self.exited[index]
        if previous is not None:
            await previous.wait()  # a crashed daemon has released its data path
        scope = trio.CancelScope()
        options = self.options[index]
        exited = self.exited[index] = trio.Event()

        async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await new_nsqd(options, run_blocking=self.run_blocking).run(
                        task_status=task_status
                    )
            finally:
                exited.set()

        nsqd = await self.nursery.start(run)
        self.nodes[index] = nsqd
        self.scopes[index] = scope
        return nsqd

    async def start_all(self) -> None:
        for i in range(len(self.nodes)):
            await self.start(i)
        await self.until(lambda: all(p.connected for n in self.live() for p in n.replication.peers))

    def crash(self, index: int) -> None:
        scope = self.scopes[index]
        assert scope is not None
        scope.cancel()
        self.nodes[index] = None

    def live(self) -> list[Any]:
        return [n for n in self.nodes if n is not None]

    def role(self, index: int, topic: str) -> str | None:
        node = self.nodes[index]
        if node is None or topic not in node.topics:
            return None
        t = node.topics[topic]
        assert isinstance(t, ReplicatedTopic)
        return t.replica.role

    def primary(self, topic: str) -> int | None:
        """The primary of the highest epoch. Two primaries in different epochs may overlap
        for a moment when the lease assumption fails (here: the one event loop of all three
        members stalled longer than the 0.3 s lease on a loaded machine), never two in one
        epoch."""
        found = [i for i in range(len(self.nodes)) if self.role(i, topic) == "primary"]
        epochs = [self.nodes[i].topics[topic].replica.epoch for i in found]  # type: ignore[union-attr]
        assert len(set(epochs)) == len(epochs), f"two primaries in one epoch: {found}"
        return max(found, key=lambda i: epochs[found.index(i)]) if found else None

    async def until(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        with trio.fail_after(timeout):
            while not condition():
                await trio.sleep(0.02)

    def stop(self) -> None:
        for scope in self.scopes:
            if scope is not None:
                scope.cancel()


async def publish(nsqd: NSQD, topic: str, bodies: list[bytes]) -> list[bytes]:
    """PUB each body on one connection; returns the bodies answered OK."""
    conn = await Conn.open(nsqd)
    acked = []
    try:
        for body in bodies:
            await conn.send(pub(topic, body))
            frame_type, data = await conn.frame()
            if frame_type != 0 or data != b"OK":
                break
            acked.append(body)
    except EOFError:
        pass
    await conn.aclose()
    return acked


async def consume(nsqd: NSQD, topic: str, count: int, finish: bool = True) -> list[bytes]:
    conn = await Conn.open(nsqd)
    await conn.send(sub(topic, "c"))
    assert await conn.response() == b"OK"
    await conn.send(rdy(count))
    got = []
    for _ in range(count):
        message = await conn.message()
        got.append(bytes(message.body))
        if finish:
            await conn.send(fin(message.id))
    await conn.aclose()
    return got


async def drain(nsqd: NSQD, topic: str, expected: set[bytes], timeout: float = 10) -> set[bytes]:
    """Consume (and FIN) on channel c until every body of `expected` came, or `timeout`;
    returns the bodies received."""
    got: set[bytes] = set()
    conn = await Conn.open(nsqd)
    await conn.send(sub(topic, "c"))
    assert await conn.response() == b"OK"
    await conn.send(rdy(500))
    with trio.move_on_after(timeout):
        while not expected <= got:
            message = await conn.message()
            got.add(bytes(message.body))
            await conn.send(fin(message.id))
    return got


async def settled_primary(cluster: Cluster, topic: str, timeout: float = 10) -> NSQD:
    """The topic's primary once every live member is in its epoch, the others replicas."""

    def settled() -> bool:
        index = cluster.primary(topic)
        if index is None:
            return False
        epoch = cluster.nodes[index].topics[topic].replica.epoch  # type: ignore[union-attr]
        return all(
            cluster.role(i, topic) == ("primary" if i == index else "replica")
            and node.topics[topic].replica.epoch == epoch
            for i, node in enumerate(cluster.nodes)
            if node is not None
        )

    await cluster.until(settled, timeout)
    index = cluster.primary(topic)
    assert index is not None
    leader = cluster.nodes[index]
    assert leader is not None
    return leader


def log_ids(path: str, topic: str) -> int:
    log = ReplicationLog(path, topic)
    try:
        return len(log)
    finally:
        log.close()


async def test_publish_is_acknowledged_once_a_quorum_wrote_it(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        acked = await publish(n1, "rt", [b"m%d" % i for i in range(20)])
        assert len(acked) == 20
        assert cluster.primary("rt") == 0
        # Acknowledged: on the primary and at least one replica (both, once streamed).
        counts = [n.topics["rt"].replica.log.__len__() for n in cluster.live()]
        assert counts[0] == 20 and max(counts[1:]) == 20
        await cluster.until(
            lambda: all(len(n.topics["rt"].replica.log) == 20 for n in cluster.live())
        )
        # A replica forwards PUB to the primary (test_replication_forward.py) and delivers
        # nothing itself.
        n2 = cluster.nodes[1]
        assert n2 is not None
        assert await publish(n2, "rt", [b"x"]) == [b"x"]
        assert len(n1.topics["rt"].replica.log) == 21
        stats = n1.topics["rt"].replica.stats()
        assert stats["role"] == "primary" and stats["epoch"] % 1024 == 1
        cluster.stop()


async def test_unreplicated_topic_is_untouched(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert len(await publish(n1, "plain", [b"a", b"b"])) == 2
        assert not isinstance(n1.topics["plain"], ReplicatedTopic)
        assert "plain" not in cluster.nodes[1].topics  # type: ignore[union-attr]
        assert await consume(n1, "plain", 2) == [b"a", b"b"]
        cluster.stop()
    assert not list((tmp_path / "n1").glob("plain*.replication.*"))


async def test_failover_delivers_every_unfinished_acknowledged_message(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        bodies = [b"m%d" % i for i in range(30)]
        assert await publish(n1, "rt", bodies) == bodies
        finished = await consume(n1, "rt", 10)
        # Let the FIN batch reach the replicas, then kill the primary.
        await trio.sleep(0.3)
        cluster.crash(0)
        await cluster.until(lambda: cluster.primary("rt") is not None)
        new = cluster.primary("rt")
        assert new in (1, 2)
        node = cluster.nodes[new]
        assert node is not None
        rest = await consume(node, "rt", 20)
        assert sorted(rest) == sorted(set(bodies) - set(finished))
        # The old primary comes back as a replica of the new epoch and catches up.
        await cluster.start(0)
        await cluster.until(lambda: cluster.role(0, "rt") == "replica")
        old = cluster.nodes[0]
        assert old is not None
        await cluster.until(
            lambda: old.topics["rt"].replica.epoch == node.topics["rt"].replica.epoch
        )
        assert cluster.primary("rt") == new
        more = await publish(node, "rt", [b"after"])
        assert more == [b"after"]
        await cluster.until(lambda: b"after" in _bodies(old, "rt"))
        cluster.stop()


def _bodies(nsqd: NSQD, topic: str) -> set[bytes]:
    log = nsqd.topics[topic].replica.log  # type: ignore[attr-defined]
    return {frame[34:] for _, frame in log.records()}


async def test_primary_without_quorum_refuses_and_steps_down(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, replication_ack_timeout=0.5)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, "rt", [b"one"]) == [b"one"]
        cluster.crash(1)
        cluster.crash(2)
        # No quorum: PUB is not acknowledged, and the lease runs out.
        assert await publish(n1, "rt", [b"two"]) == []
        await cluster.until(lambda: cluster.role(0, "rt") != "primary")
        cluster.stop()


async def test_nsqd_dat_keeps_the_epoch_only_for_replicated_topics(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        await publish(n1, "rt", [b"a"])
        await publish(n1, "plain", [b"a"])
        epoch = n1.topics["rt"].replica.epoch  # type: ignore[attr-defined]
        await n1.metadata.flush()
        data = json.loads((tmp_path / "n1" / "nsqd.dat").read_bytes())
        entries = {t["name"]: t for t in data["topics"]}
        assert entries["rt"]["replication"] == {"epoch": epoch}
        assert "replication" not in entries["plain"]
        cluster.stop()


@pytest.mark.parametrize("secret", ["wrong"])
async def test_a_peer_with_the_wrong_secret_is_refused(tmp_path: Path, secret: str) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, size=2)
        cluster.options[1] = dataclasses.replace(cluster.options[1], replication_secret=secret)
        await cluster.start(0)
        await cluster.start(1)
        await trio.sleep(0.5)
        for node in cluster.live():
            assert not any(p.connected for p in node.replication.peers)
            assert "secret mismatch" in node.replication.peers[0].error or (
                "IDENTIFY" in node.replication.peers[0].error
            )
        cluster.stop()


# -- network faults between members -----------------------------------------------------------


class Proxy:
    """A TCP proxy in front of one member's port, for one other member's connection to it:
    ``pass``, ``stall`` (bytes are held, connections stay open) or ``drop`` (connections are
    cut and new ones refused) the replication stream."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.mode = "pass"
        self.changed = trio.Event()
        self.scopes: list[trio.CancelScope] = []

    def set(self, mode: str) -> None:
        self.mode = mode
        self.changed.set()
        self.changed = trio.Event()
        if mode == "drop":
            for scope in self.scopes:
                scope.cancel()
            self.scopes.clear()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept, listener, nursery)

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            stream = await listener.accept()
            if self.mode == "drop":
                await stream.aclose()
                continue
            nursery.start_soon(self._serve, stream)

    async def _serve(self, client: trio.SocketStream) -> None:
        scope = trio.CancelScope()
        self.scopes.append(scope)
        with scope:
            try:
                server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
            except OSError:
                await client.aclose()
                return
            async with client, server, trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, nursery.cancel_scope)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            while True:
                data = await source.receive_some(65536)
                if not data:
                    break
                while self.mode == "stall":
                    await self.changed.wait()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


async def publish_loop(
    cluster: Cluster, topic: str, acked: set[bytes], stop: trio.Event, tag: str
) -> None:
    """Publish to whichever member answers OK (a replica forwards to the primary), moving on
    when one fails or stalls."""
    n = 0
    target = 0
    while not stop.is_set():
        node = cluster.nodes[target % len(cluster.nodes)]
        target += 1
        if node is None:
            continue
        conn = await Conn.open(node)
        try:
            while not stop.is_set():
                body = b"%s-%d" % (tag.encode(), n)
                n += 1
                await conn.send(pub(topic, body))
                with trio.move_on_after(5) as waited:
                    frame_type, data = await conn.frame()
                if waited.cancelled_caught or frame_type != 0 or data != b"OK":
                    break
                acked.add(body)
        except EOFError:
            pass
        finally:
            await conn.aclose()
        await trio.sleep(0.02)


async def proxied(nursery: trio.Nursery, cluster: Cluster) -> dict[tuple[int, int], Proxy]:
    """Make member i dial member j through a `Proxy` (returned as proxies[i, j]), so that a
    test can cut or stall any link."""
    proxies: dict[tuple[int, int], Proxy] = {}
    size = len(cluster.options)
    for i in range(size):
        for j in range(size):
            if i != j:
                proxy = Proxy(cluster.ports[j])
                await nursery.start(proxy.run)
                proxies[i, j] = proxy
        cluster.options[i] = dataclasses.replace(
            cluster.options[i],
            replicate_to=[f"127.0.0.1:{proxies[i, j].port}" for j in range(size) if j != i],
        )
    return proxies


@pytest.mark.parametrize("fault", ["stall", "drop"])
async def test_a_partitioned_primary_loses_no_acknowledged_message(
    tmp_path: Path, fault: str
) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        proxies = await proxied(nursery, cluster)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert len(await publish(n1, "rt", [b"first"])) == 1
        acked: set[bytes] = {b"first"}
        stop = trio.Event()
        nursery.start_soon(publish_loop, cluster, "rt", acked, stop, fault)
        await trio.sleep(0.5)
        for (i, j), proxy in proxies.items():
            if 0 in (i, j):
                proxy.set(fault)
        # The majority side elects a primary; the cut-off one steps down when its lease ends.
        await cluster.until(lambda: cluster.role(0, "rt") != "primary", 5)
        await cluster.until(lambda: cluster.primary("rt") in (1, 2), 10)
        before = len(acked)
        await cluster.until(lambda: len(acked) > before + 10, 10)
        for proxy in proxies.values():
            proxy.set("pass")
        # Healed, the set may hold one more election (a member that promised a higher epoch
        # during the partition refuses the first winner): the primary is read once every
        # member is in its epoch.
        leader = await settled_primary(cluster, "rt")
        stop.set()
        await trio.sleep(0.2)
        expected = set(acked)
        got = await drain(leader, "rt", expected)
        assert expected <= got, f"{len(expected - got)} acknowledged messages lost"
        cluster.stop()
        nursery.cancel_scope.cancel()


async def test_stats_and_metrics_show_role_epoch_and_lag(tmp_path: Path) -> None:
    from trionsq.nsqd.prometheus import render_prometheus
    from trionsq.nsqd.stats import snapshot

    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1, n2 = cluster.nodes[0], cluster.nodes[1]
        assert n1 is not None and n2 is not None
        assert await publish(n1, "rt", [b"a", b"b"]) == [b"a", b"b"]
        await publish(n1, "plain", [b"a"])
        topics = {t["topic_name"]: t for t in snapshot(n1)["topics"]}
        info = topics["rt"]["replication"]
        assert info["role"] == "primary" and info["epoch"] == 1024 + 1
        assert info["primary"] == cluster.addresses[0]
        assert [m["connected"] for m in info["members"]] == [True, True]
        assert all(m["lag_messages"] is not None for m in info["members"] if m["member"])
        assert "replication" not in topics["plain"]
        await cluster.until(lambda: "rt" in n2.topics)
        replica = {t["topic_name"]: t for t in snapshot(n2)["topics"]}["rt"]["replication"]
        assert replica["role"] == "replica" and replica["primary"] == cluster.addresses[0]
        text = render_prometheus(snapshot(n1))
        assert 'nsq_topic_replication_role{topic="rt",role="primary"} 1' in text
        assert 'nsq_topic_replication_epoch{topic="rt"} 1025' in text
        assert "nsq_topic_replication_lag_messages{" in text
        assert 'nsq_topic_replication_failovers_total{topic="rt"} 1' in text
        cluster.stop()


async def test_without_replication_flags_stats_and_files_are_unchanged(tmp_path: Path) -> None:
    from trionsq.nsqd.prometheus import render_prometheus
    from trionsq.nsqd.stats import snapshot

    async with trio.open_nursery() as nursery:
        options = dataclasses.replace(
            NSQDOptions(),
            node_id=1,
            tcp_address="127.0.0.1:0",
            http_address="",
            data_path=str(tmp_path),
        )
        nsqd = await nursery.start(new_nsqd(options).run)
        assert nsqd.replication is None and not nsqd.hold_acks
        assert await publish(nsqd, "rt", [b"a"]) == [b"a"]
        assert not isinstance(nsqd.topics["rt"], ReplicatedTopic)
        assert "replication" not in snapshot(nsqd)["topics"][0]
        assert "nsq_topic_replication" not in render_prometheus(snapshot(nsqd))
        await nsqd.metadata.flush()
        assert b"replication" not in (tmp_path / "nsqd.dat").read_bytes()
        nsqd.request_exit()
    assert not list(tmp_path.glob("*.replication.*"))


async def test_unreplicated_publish_does_not_wait_for_a_replicated_topic(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, replication_ack_timeout=2.0)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, "rt", [b"a"]) == [b"a"]
        cluster.crash(1)
        cluster.crash(2)
        # rt has no quorum now; a PUB to another topic is answered at once all the same.
        with trio.fail_after(1.0):
            assert await publish(n1, "plain", [b"b"]) == [b"b"]
        cluster.stop()


async def primary_left_alone(
    nursery: trio.Nursery, tmp_path: Path, ack_timeout: float
) -> tuple[Cluster, NSQD]:
    """Node 1, primary of "rt" (one message published), after both replicas crashed, with a
    lease long enough to outlast the test: its PUBs wait for a quorum."""
    cluster = Cluster(
        nursery,
        tmp_path,
        replication_lease=5.0,
        replication_failover_timeout=6.0,
        replication_ack_timeout=ack_timeout,
    )
    await cluster.start_all()
    n1 = cluster.nodes[0]
    assert n1 is not None
    assert await publish(n1, "rt", [b"first"]) == [b"first"]
    cluster.crash(1)
    cluster.crash(2)
    return cluster, n1


async def test_answers_of_a_held_publish_stay_in_order(tmp_path: Path) -> None:
    """A PUB waits for a quorum while the connection reads on (its answers are held, not its
    task): a command read meanwhile is answered after the PUB's OK, never before."""
    async with trio.open_nursery() as nursery:
        cluster, n1 = await primary_left_alone(nursery, tmp_path, ack_timeout=5.0)
        conn = await Conn.open(n1)
        await conn.send(pub("rt", b"held"))
        await trio.sleep(0.2)  # no quorum: the OK is held
        await conn.send(b"NOPE\n")  # read while the OK is held
        await trio.sleep(0.2)
        await cluster.start(1)  # a member again: the PUB reaches a quorum
        assert await conn.frame() == (0, b"OK")
        frame_type, data = await conn.frame()
        assert frame_type == 1 and data.startswith(b"E_INVALID")
        await conn.aclose()
        cluster.stop()


async def test_pipelined_publishes_are_all_answered(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, "rt", [b"warm"]) == [b"warm"]
        conn = await Conn.open(n1)
        for i in range(40):
            await conn.send(pub("rt", b"p%d" % i) + (b"" if i % 3 else pub("plain", b"x")))
        answers = [await conn.frame() for _ in range(40 + 14)]
        assert answers == [(0, b"OK")] * 54
        await conn.aclose()
        replica_logs = [len(n.topics["rt"].replica.log) for n in cluster.live()[1:]]
        assert max(replica_logs) == 41
        cluster.stop()


async def test_publish_without_a_quorum_in_time_fails_and_closes(tmp_path: Path) -> None:
    """--replication-ack-timeout, checked while the primary still holds its lease."""
    async with trio.open_nursery() as nursery:
        cluster, n1 = await primary_left_alone(nursery, tmp_path, ack_timeout=0.3)
        conn = await Conn.open(n1)
        await conn.send(pub("rt", b"two"))
        with trio.fail_after(2.0):
            frame_type, data = await conn.frame()
            assert frame_type == 1 and data.startswith(b"E_PUB_FAILED")
            with pytest.raises(EOFError):
                await conn.frame()
        assert cluster.role(0, "rt") == "primary"  # the lease, not the timeout, ends a term
        cluster.stop()


async def test_a_half_closed_publisher_gets_its_ok(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, "rt", [b"warm"]) == [b"warm"]
        host, port = cluster.addresses[0].split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(b"  V2" + pub("rt", b"last words"))
        await stream.send_eof()
        received = b""
        with trio.fail_after(5.0):
            while chunk := await stream.receive_some(1024):
                received += chunk
        assert received.startswith(b"\x00\x00\x00\x06\x00\x00\x00\x00OK")
        await stream.aclose()
        cluster.stop()
