"""Producer against a fake nsqd: responses matched in order, pipelining, MPUB coalescing with
per-caller outcomes, error codes, reconnect after a lost connection."""

from __future__ import annotations

import pytest
import trio

from tests.unit.client_fakes import FakeConn, install
from trionsq.client import Connection, ConnectionClosedError, NSQError, Producer
from trionsq.client.options import ConnectionOptions


async def test_responses_match_commands_in_order_and_heartbeats_get_nop(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    fake = install(monkeypatch, nursery)

    async def echo(conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None) -> None:
        await conn.respond(b"_heartbeat_")
        await conn.respond(body or b"")

    fake.behaviour = echo
    conn = Connection("fake:1")
    await nursery.start(conn.run)
    results: dict[int, bytes] = {}

    async def ask(i: int) -> None:
        results[i] = await conn.request(b"PUB t\n" + len(b"%d" % i).to_bytes(4, "big") + b"%d" % i)

    async with trio.open_nursery() as n:
        for i in range(20):
            n.start_soon(ask, i)
    assert results == {i: b"%d" % i for i in range(20)}
    await fake.wait_for(lambda: len(fake.lines(b"NOP")) == 20)
    await conn.aclose()


async def test_concurrent_pubs_coalesce_into_one_mpub(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    fake = install(monkeypatch, nursery)
    release = trio.Event()

    async def slow_first(
        conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None
    ) -> None:
        if len(fake.lines(b"PUB", b"MPUB")) == 1:
            await release.wait()
        await conn.respond(b"OK")

    fake.behaviour = slow_first
    async with Producer("fake:1", max_pipeline=1) as producer, trio.open_nursery() as n:
        n.start_soon(producer.pub, "t", b"first")
        await fake.wait_for(lambda: len(fake.lines(b"PUB")) == 1)
        for i in range(9):
            n.start_soon(producer.pub, "t", b"m%d" % i)
        await trio.sleep(0.01)
        release.set()
    assert fake.lines(b"PUB", b"MPUB") == [b"PUB t", b"MPUB t"]
    body = fake.bodies[-1]
    assert body[:4] == (9).to_bytes(4, "big")
    assert sorted(body[4 + i * 6 + 4 : 4 + i * 6 + 6] for i in range(9)) == [
        b"m%d" % i for i in range(9)
    ]


async def test_a_failed_mpub_fails_each_coalesced_caller_with_the_code(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    fake = install(monkeypatch, nursery)
    release = trio.Event()

    async def behaviour(
        conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None
    ) -> None:
        if name == b"PUB":
            await release.wait()
            await conn.respond(b"OK")
        else:
            await conn.error(b"E_MPUB_FAILED MPUB failed exiting")

    fake.behaviour = behaviour
    outcomes: list[str] = []

    async def pub(i: int) -> None:
        try:
            await producer.pub("t", b"x%d" % i)
            outcomes.append("ok")
        except NSQError as exc:
            outcomes.append(exc.code)

    async with Producer("fake:1", max_pipeline=1) as producer, trio.open_nursery() as n:
        n.start_soon(pub, 0)
        await fake.wait_for(lambda: len(fake.lines(b"PUB")) == 1)
        for i in range(1, 5):
            n.start_soon(pub, i)
        await trio.sleep(0.01)
        release.set()
    assert sorted(outcomes) == ["E_MPUB_FAILED"] * 4 + ["ok"]


async def test_pipeline_is_bounded(monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery) -> None:
    fake = install(monkeypatch, nursery)
    release = trio.Event()

    async def held(conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None) -> None:
        await release.wait()
        await conn.respond(b"OK")

    fake.behaviour = held
    async with Producer("fake:1", max_pipeline=3) as producer, trio.open_nursery() as n:
        for _i in range(6):
            n.start_soon(producer.mpub, "t", [b"x"])
        await trio.sleep(0.05)
        assert producer.connection is not None
        assert producer.connection.outstanding == 3
        release.set()
    assert len(fake.lines(b"MPUB")) == 6


async def test_reconnect_after_the_connection_is_lost(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    fake = install(monkeypatch, nursery)

    async def drop_first(
        conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None
    ) -> None:
        if conn.index == 0:
            await conn.stream.aclose()
        else:
            await conn.respond(b"OK")

    fake.behaviour = drop_first
    async with Producer("fake:1") as producer:
        with pytest.raises(ConnectionClosedError):
            await producer.pub("t", b"lost")
        await producer.pub("t", b"delivered")
    assert len(fake.conns) == 2


async def test_local_checks_carry_nsq_codes(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    install(monkeypatch, nursery)
    async with Producer("fake:1") as producer:
        with pytest.raises(NSQError) as info:
            await producer.pub("t", b"")
        assert info.value.code == "E_BAD_MESSAGE"
        with pytest.raises(NSQError) as info:
            await producer.mpub("no good", [b"x"])
        assert info.value.code == "E_BAD_TOPIC"


async def test_a_silent_nsqd_is_dropped_after_two_missed_heartbeats(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    fake = install(monkeypatch, nursery)

    async def silent(conn: FakeConn, name: bytes, params: list[bytes], body: bytes | None) -> None:
        if name == b"IDENTIFY":
            await conn.respond(b"OK")
        # anything else: never answered, and no heartbeats either

    fake.behaviour = silent
    conn = Connection("fake:1", ConnectionOptions(heartbeat_interval=5.0))
    await nursery.start(conn.run)
    start = trio.current_time()
    with pytest.raises(ConnectionClosedError):
        await conn.request(b"NOP\n" + b"PUB t\n" + (1).to_bytes(4, "big") + b"x")
    assert 10.0 <= trio.current_time() - start < 11.0
    assert "missed heartbeats" in str(conn.close_reason)
