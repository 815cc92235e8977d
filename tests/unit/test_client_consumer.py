"""Consumer against fakes: the backoff state machine, RDY distribution (even shares, and RDY 1
rotation when max_in_flight < connections), max_attempts give-up, graceful close."""

from __future__ import annotations

import pytest
import trio

from tests.unit.client_fakes import FakeConn, install
from trionsq.client import Connection, Consumer, Message


def rdys(conns: list[Connection]) -> list[int]:
    return [c.rdy for c in conns]


def make(nursery: trio.Nursery, n: int, **kw: object) -> tuple[Consumer, list[Connection]]:
    consumer = Consumer("t", "c", nsqd_tcp_addresses=["x:1"], **kw)  # type: ignore[arg-type]
    consumer._nursery = nursery
    conns = [Connection(f"h{i}:1") for i in range(n)]
    for conn in conns:
        consumer.connections[conn.address] = conn
    consumer._distribute()
    return consumer, conns


async def test_backoff_state_machine(nursery: trio.Nursery, autojump_clock: object) -> None:
    consumer, conns = make(nursery, 2, max_in_flight=10, backoff_multiplier=1.0)
    assert rdys(conns) == [5, 5]
    consumer.backoff_signal(False)
    assert consumer.backoff_counter == 1 and rdys(conns) == [0, 0]
    consumer.backoff_signal(False)  # ignored while the backoff timer runs
    assert consumer.backoff_counter == 1
    await trio.sleep(1.01)
    assert sorted(rdys(conns)) == [0, 1]  # one test message
    consumer.backoff_signal(False)
    assert consumer.backoff_counter == 2 and rdys(conns) == [0, 0]
    await trio.sleep(1.5)
    assert rdys(conns) == [0, 0]  # 2 s at level 2
    await trio.sleep(0.6)
    assert sorted(rdys(conns)) == [0, 1]
    consumer.backoff_signal(True)
    assert consumer.backoff_counter == 1 and rdys(conns) == [0, 0]
    await trio.sleep(1.01)
    consumer.backoff_signal(True)
    assert consumer.backoff_counter == 0 and rdys(conns) == [5, 5]
    assert next(line for line in conns[0]._out if line.startswith(b"RDY")) == b"RDY 5\n"


async def test_backoff_is_capped(nursery: trio.Nursery, autojump_clock: object) -> None:
    consumer, _conns = make(
        nursery, 1, max_in_flight=4, backoff_multiplier=1.0, max_backoff_duration=4
    )
    for _ in range(10):
        consumer.backoff_signal(False)
        await trio.sleep(5)
    assert consumer.backoff_counter == consumer.max_backoff_count == 3


async def test_rdy_is_shared_and_rotated_when_max_in_flight_is_low(
    nursery: trio.Nursery, autojump_clock: object
) -> None:
    consumer, conns = make(nursery, 3, max_in_flight=10)
    assert rdys(conns) == [3, 3, 3]
    consumer, conns = make(nursery, 4, max_in_flight=2, low_rdy_idle_timeout=10)
    assert sorted(rdys(conns)) == [0, 0, 1, 1]
    first = {c.address for c in conns if c.rdy}
    await trio.sleep(11)
    consumer.redistribute()
    assert sorted(rdys(conns)) == [0, 0, 1, 1]
    assert {c.address for c in conns if c.rdy}.isdisjoint(first)  # idle ones gave theirs up
    busy = next(c for c in conns if c.rdy)
    await trio.sleep(11)
    busy.last_message_time = trio.current_time()
    consumer.redistribute()
    assert busy.rdy == 1 and sum(rdys(conns)) == 2  # a busy connection keeps its RDY


async def test_give_up_after_max_attempts_then_fin(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    fake = install(monkeypatch, nursery)
    sent = False

    async def deliver(conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None) -> None:
        nonlocal sent
        if name == b"RDY" and params[0] != b"0" and not sent:
            sent = True
            await conn.message(b"0" * 16, b"ok", attempts=2)
            await conn.message(b"1" * 16, b"poison", attempts=4)

    fake.on_command = deliver
    handled: list[bytes] = []
    given_up: list[bytes] = []

    async def handler(message: Message) -> None:
        handled.append(message.body)

    async with Consumer(
        "t",
        "c",
        handler,
        nsqd_tcp_addresses=["fake:1"],
        max_in_flight=5,
        max_attempts=3,
        on_give_up=lambda m: given_up.append(m.body),
    ):
        await fake.wait_for(lambda: len(fake.lines(b"FIN")) == 2)
    assert handled == [b"ok"] and given_up == [b"poison"]


async def test_graceful_close_waits_for_handlers(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    fake = install(monkeypatch, nursery)

    async def deliver(conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None) -> None:
        if name == b"RDY" and params[0] != b"0":
            await conn.message(b"a" * 16, b"slow")

    fake.on_command = deliver
    started = trio.Event()

    async def handler(message: Message) -> None:
        started.set()
        await trio.sleep(0.2)

    async with Consumer("t", "c", handler, nsqd_tcp_addresses=["fake:1"], max_in_flight=3):
        with trio.fail_after(5):
            await started.wait()
    assert fake.lines()[1:] == [b"SUB t c", b"RDY 3", b"RDY 0", b"CLS", b"FIN " + b"a" * 16]
    assert fake.closed == [0]


async def test_iterator_close_requeues_undelivered(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    fake = install(monkeypatch, nursery)

    async def deliver(conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None) -> None:
        if name == b"RDY" and params[0] != b"0":
            await conn.message(b"a" * 16, b"1")
            await conn.message(b"b" * 16, b"2")

    fake.on_command = deliver
    async with Consumer("t", "c", nsqd_tcp_addresses=["fake:1"], max_in_flight=2) as consumer:
        async for message in consumer:
            message.finish()
            break
    assert b"FIN " + b"a" * 16 in fake.lines() and b"REQ " + b"b" * 16 + b" 0" in fake.lines()
