"""What an idle nsqd does, in process on a virtual clock: with many topics and channels and
nothing happening, no task runs at all (no disk syncer tick, no scan, no heartbeat task);
an idle or publishing connection has no message pump task, yet gets its heartbeats (from the
daemon's heartbeat task, over real TCP) at NSQ's intervals, IDENTIFY's included; the first
delivery starts the pump, which takes the heartbeats over; a closed connection is forgotten
at once; concurrent topic creations over HTTP share nsqd.dat writes, each answered after a
write that holds it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.client_v2 import ClientV2
from trionsq.nsqd.heartbeats import PumpStarter
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.options import NSQDOptions
from trionsq.protocol import FrameDecoder, dpub, fin, identify, pub, rdy, sub
from trionsq.protocol.commands import MAGIC_V2

HEARTBEAT_FRAME = (0, b"_heartbeat_")


class _Steps(trio.abc.Instrument):
    """Steps of every task but the test's own."""

    def __init__(self, ignore: trio.lowlevel.Task) -> None:
        self.ignore = ignore
        self.steps: list[str] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is not self.ignore:
            self.steps.append(task.name)


def _tasks_named(fragment: str) -> list[trio.lowlevel.Task]:
    found = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None:
            continue
        if fragment in task.name:
            found.append(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


async def tcp_conn(nsqd: NSQD, **identify_fields: Any) -> Conn:
    """A `Conn` over a real TCP connection (the daemon's socket path)."""
    assert isinstance(nsqd.tcp_address, tuple)
    host, port = nsqd.tcp_address
    conn = Conn.__new__(Conn)
    conn.stream = await trio.open_tcp_stream(host, port)
    conn.decoder = FrameDecoder()
    conn.heartbeats = 0
    conn.answer_heartbeats = False
    await conn.send(MAGIC_V2)
    if identify_fields:
        await conn.send(identify(identify_fields))
        assert await conn.response() == b"OK"
    return conn


async def _client(nsqd: NSQD, count: int = 1) -> ClientV2:
    while len(nsqd.clients) < count:
        await trio.sleep(0.001)
    return list(nsqd.clients.values())[-1]


async def test_an_idle_daemon_with_many_topics_runs_no_task(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    for i in range(200):
        topic = nsqd.get_topic(f"t{i}")
        topic.get_channel("a")
        topic.get_channel("b")
    assert await nsqd.metadata.flush()
    producer = await tcp_conn(nsqd)
    await producer.send(pub("t7", b"one") + pub("t8", b"two"))
    assert [await producer.response(), await producer.response()] == [b"OK", b"OK"]
    await producer.aclose()
    await trio.sleep(10)  # the activity's sync, the closed connection's trim
    steps = _Steps(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    try:
        await trio.sleep(600)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert steps.steps == []
    assert not nsqd.disk_syncer.tick_armed


async def test_an_idle_connection_has_no_pump_and_gets_heartbeats(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    conn = await tcp_conn(nsqd)
    client = await _client(nsqd)
    start = trio.current_time()
    for n in range(1, 4):
        assert await conn.frame(skip_heartbeats=False) == HEARTBEAT_FRAME
        # client_timeout / 2, each from the last
        assert abs(trio.current_time() - start - 30 * n) < 0.01
        # nsqd closes it only after two missed: it answers
        await conn.send(b"NOP\n")
    assert isinstance(client.wake, PumpStarter)
    assert client.pump_scope is None
    assert _tasks_named("_run_pump") == []
    assert nsqd.heartbeats.sent == 3
    await conn.aclose()


async def test_a_publisher_has_no_pump_and_heartbeats_follow_identify(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    conn = await tcp_conn(nsqd, heartbeat_interval=2000)
    client = await _client(nsqd)
    start = trio.current_time()
    await conn.send(pub("t", b"a"))
    assert await conn.response() == b"OK"
    assert await conn.frame(skip_heartbeats=False) == HEARTBEAT_FRAME
    assert abs(trio.current_time() - start - 2) < 0.01
    assert await conn.frame(skip_heartbeats=False) == HEARTBEAT_FRAME
    assert abs(trio.current_time() - start - 4) < 0.01
    assert client.pump_scope is None and _tasks_named("_run_pump") == []
    await conn.aclose()


async def test_heartbeats_disabled_by_identify_send_none(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    conn = await tcp_conn(nsqd, heartbeat_interval=-1)
    await conn.no_frame_for(300)
    assert len(nsqd.heartbeats) == 0
    await conn.aclose()


async def test_the_first_delivery_starts_the_pump_which_takes_heartbeats_over(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await tcp_conn(nsqd, heartbeat_interval=5000)
    client = await _client(nsqd)
    await consumer.send(sub("t", "c"))
    assert await consumer.response() == b"OK"
    await consumer.send(rdy(10))
    await trio.testing.wait_all_tasks_blocked()
    assert client.pump_scope is None  # subscribed and ready, nothing delivered yet
    # Deferred, the message is delivered by the daemon's queue scan (not sent by a
    # publisher's task, test_a_publish_is_sent_to_subscribers_by_the_publishers_task).
    producer = await Conn.open(nsqd)
    await producer.send(dpub("t", 1000, b"hello"))
    assert await producer.response() == b"OK"
    message = await consumer.message()
    assert message.body == b"hello"
    assert client.pump_scope is not None
    assert len(_tasks_named("_run_pump")) == 1
    assert client not in nsqd.heartbeats._groups.get(5.0, {})
    await consumer.send(fin(message.id))
    start = trio.current_time()
    assert await consumer.frame(skip_heartbeats=False) == HEARTBEAT_FRAME
    assert trio.current_time() - start <= 5.01
    await consumer.send(b"NOP\n")
    # Closing the connection stops its pump.
    await consumer.aclose()
    while nsqd.clients.get(client.id) is not None:
        await trio.sleep(0.01)
    await trio.testing.wait_all_tasks_blocked()
    assert _tasks_named("_run_pump") == []
    await producer.aclose()


async def test_a_publish_is_sent_to_subscribers_by_the_publishers_task(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumers = [await tcp_conn(nsqd) for _ in range(2)]
    await _client(nsqd, 2)
    clients = list(nsqd.clients.values())
    for n, consumer in enumerate(consumers):
        await consumer.send(sub("t", f"c{n}"))
        assert await consumer.response() == b"OK"
        await consumer.send(rdy(100))
    producer = await tcp_conn(nsqd)
    for n in range(20):
        await producer.send(pub("t", b"m%d" % n))
        assert await producer.response() == b"OK"
        for consumer in consumers:
            message = await consumer.message()
            assert message.body == b"m%d" % n
            await consumer.send(fin(message.id))
    # Every message went out with the publisher's write: no pump was woken for them.
    assert [c.pump_scope for c in clients] == [None, None]
    assert _tasks_named("_run_pump") == []
    for conn in (*consumers, producer):
        await conn.aclose()


async def test_a_message_that_waited_for_a_fin_is_sent_by_the_consumers_task(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # RDY 1: a message published while one is in flight waits in the channel; the FIN that
    # frees the slot is read by the consumer's task, which sends it the next one itself.
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await tcp_conn(nsqd)
    await _client(nsqd)
    (client,) = nsqd.clients.values()
    await consumer.send(sub("t", "c"))
    assert await consumer.response() == b"OK"
    await consumer.send(rdy(1))
    producer = await tcp_conn(nsqd)
    for n in range(2):
        await producer.send(pub("t", b"m%d" % n))
        assert await producer.response() == b"OK"
    for n in range(2):
        message = await consumer.message()
        assert message.body == b"m%d" % n
        await consumer.send(fin(message.id))
    await trio.sleep(0.1)
    assert client.pump_scope is None  # no pump was woken for the second
    assert _tasks_named("_run_pump") == []
    assert nsqd.topics["t"].channels["c"].depth == 0
    for conn in (consumer, producer):
        await conn.aclose()


async def test_messages_that_waited_for_rdy_are_sent_by_the_consumers_task(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # RDY 0 after SUB: what is published waits in the channel until the consumer's RDY,
    # whose handler sends it the backlog itself, as a publish's delivery is sent.
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await tcp_conn(nsqd)
    client = await _client(nsqd)
    await consumer.send(sub("t", "c"))
    assert await consumer.response() == b"OK"
    producer = await tcp_conn(nsqd)
    for n in range(3):
        await producer.send(pub("t", b"m%d" % n))
        assert await producer.response() == b"OK"
    assert nsqd.topics["t"].channels["c"].depth == 3
    await consumer.send(rdy(2))
    for n in range(2):
        message = await consumer.message()
        assert message.body == b"m%d" % n
    await trio.sleep(0.1)
    assert client.pump_scope is None  # no pump was woken for them
    assert _tasks_named("_run_pump") == []
    assert nsqd.topics["t"].channels["c"].depth == 1
    for conn in (consumer, producer):
        await conn.aclose()


async def test_what_a_subscribers_socket_cannot_take_goes_through_its_pump(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path), max_msg_size=1 << 20)
    consumer = await tcp_conn(nsqd)
    client = await _client(nsqd)
    await consumer.send(sub("t", "c"))
    assert await consumer.response() == b"OK"
    await consumer.send(rdy(2500))
    producer = await tcp_conn(nsqd)
    body = bytes(range(256)) * 1000
    count = 64  # 16 MB: more than the socket buffers take while the consumer does not read
    for n in range(count):
        await producer.send(pub("t", body + b"%d" % n))
        assert await producer.response() == b"OK"
    assert client.pump_scope is not None  # a write fell short: the pump sends the rest
    for n in range(count):
        message = await consumer.message()
        assert message.body == body + b"%d" % n
    for conn in (consumer, producer):
        await conn.aclose()


async def test_a_closed_connection_is_forgotten_by_the_heartbeat_task(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    conns = [await tcp_conn(nsqd) for _ in range(20)]
    await _client(nsqd, 20)
    assert len(nsqd.heartbeats) == 20
    for conn in conns:
        await conn.aclose()
    while nsqd.clients:
        await trio.sleep(0.01)
    assert len(nsqd.heartbeats) == 0


async def test_many_idle_connections_cost_one_task_each(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await trio.testing.wait_all_tasks_blocked()
    before = len(_tasks_named(""))
    conns = [await tcp_conn(nsqd) for _ in range(50)]
    await _client(nsqd, 50)
    await trio.testing.wait_all_tasks_blocked()
    assert len(_tasks_named("")) - before == 50
    for conn in conns:
        await conn.aclose()


async def test_a_pump_that_fails_to_send_ends_its_connection(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The pump runs beside the connection's task: its failure still ends the connection."""
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    client = await _client(nsqd)

    async def broken(data: Any) -> None:
        raise trio.BrokenResourceError("gone")

    client.stream.send_all = broken  # type: ignore[method-assign]
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    assert await producer.response() == b"OK"
    assert await consumer.closed()
    assert client.id not in nsqd.clients
    assert _tasks_named("_run_pump") == []


async def test_concurrent_creations_over_http_share_nsqd_dat_writes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Each answer comes after a write of nsqd.dat that holds its topic (the writes happen in
    a worker thread, so that requests arrive while one is under way)."""
    written: list[set[str]] = []
    nsqd = await _start_with_writes_recorded(nursery, tmp_path, written)
    assert nsqd.http_address is not None
    host, port = nsqd.http_address
    writes_before = nsqd.metadata.writes
    seen: dict[str, int] = {}

    async def create(client: httpx.AsyncClient, name: str) -> None:
        response = await client.post(f"/topic/create?topic={name}")
        assert response.status_code == 200
        seen[name] = len(written)

    limits = httpx.Limits(max_connections=16)
    base = f"http://{host}:{port}"
    async with (
        httpx.AsyncClient(base_url=base, limits=limits) as client,
        trio.open_nursery() as creators,
    ):
        for i in range(64):
            creators.start_soon(create, client, f"t{i}")
    for name, count in seen.items():
        assert any(name in topics for topics in written[:count]), name
    writes = nsqd.metadata.writes - writes_before
    assert 1 <= writes < 64
    on_disk = json.loads((tmp_path / "nsqd.dat").read_text())
    assert {t["name"] for t in on_disk["topics"]} == {f"t{i}" for i in range(64)}


async def _start_with_writes_recorded(
    nursery: trio.Nursery, tmp_path: Path, written: list[set[str]]
) -> NSQD:
    async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        result = await trio.to_thread.run_sync(fn, *args)
        data = getattr(fn, "args", (None, None, None))[2]
        if isinstance(data, bytes) and data.startswith(b'{"topics"'):
            written.append({t["name"] for t in json.loads(data)["topics"] or []})
        return result

    options = dataclasses.replace(
        NSQDOptions(),
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(tmp_path),
        node_id=7,
    )
    nsqd = NSQD(options, run_blocking=in_thread)
    await nursery.start(nsqd.run)
    return nsqd
