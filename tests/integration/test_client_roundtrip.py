"""trionsq.client against an in-process trionsq nsqd over TCP: PUB/MPUB/DPUB round trips,
consuming with a handler and as an iterator, REQ on handler failure with redelivery and
attempts, TOUCH, max_attempts give-up, and NSQ error codes."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.nsqd_harness import start_nsqd
from trionsq.client import Consumer, Message, NSQError, Producer
from trionsq.nsqd.nsqd import NSQD


def address(nsqd: NSQD) -> str:
    assert isinstance(nsqd.tcp_address, tuple)
    return f"{nsqd.tcp_address[0]}:{nsqd.tcp_address[1]}"


@pytest.fixture
async def nsqd(nursery: trio.Nursery, tmp_path: Any) -> NSQD:
    return await start_nsqd(nursery, str(tmp_path))


async def test_pub_mpub_dpub_and_consume_as_iterator(nsqd: NSQD) -> None:
    async with Producer(address(nsqd)) as producer:
        await producer.pub("t", b"one")
        await producer.mpub("t", [b"two", b"three"])
        await producer.dpub("t", 50, b"four")
    got = []
    async with Consumer("t", "c", nsqd_tcp_addresses=[address(nsqd)], max_in_flight=10) as c:
        with trio.fail_after(5):
            async for message in c:
                got.append(message.body)
                message.finish()
                if len(got) == 4:
                    break
    assert got == [b"one", b"two", b"three", b"four"]


async def test_concurrent_pubs_are_coalesced_and_all_delivered(nsqd: NSQD) -> None:
    bodies = [b"m%d" % i for i in range(500)]
    async with Producer(address(nsqd), max_pipeline=1) as producer, trio.open_nursery() as n:
        for body in bodies:
            n.start_soon(producer.pub, "co", body)
    received: list[bytes] = []
    done = trio.Event()

    async def handler(message: Message) -> None:
        received.append(message.body)
        if len(received) == len(bodies):
            done.set()

    async with Consumer("co", "c", handler, nsqd_tcp_addresses=[address(nsqd)], max_in_flight=100):
        with trio.fail_after(10):
            await done.wait()
    assert sorted(received) == sorted(bodies)
    topic = nsqd.topics["co"]
    assert topic.message_count == len(bodies)


async def test_error_codes(nsqd: NSQD) -> None:
    async with Producer(address(nsqd)) as producer:
        with pytest.raises(NSQError) as info:
            await producer.pub("bad topic!", b"x")
        assert info.value.code == "E_BAD_TOPIC"
        with pytest.raises(NSQError) as info:
            await producer.dpub("t", 10**10, b"x")  # beyond --max-req-timeout: nsqd refuses
        assert info.value.code == "E_INVALID"
        await producer.pub("t", b"after reconnect")  # the fatal error closed the connection


async def test_requeue_on_exception_redelivers_with_attempts(nsqd: NSQD) -> None:
    async with Producer(address(nsqd)) as producer:
        await producer.pub("rq", b"x")
    attempts: list[int] = []
    done = trio.Event()

    async def handler(message: Message) -> None:
        attempts.append(message.attempts)
        if message.attempts < 3:
            raise RuntimeError("try again")
        done.set()

    async with Consumer(
        "rq",
        "c",
        handler,
        nsqd_tcp_addresses=[address(nsqd)],
        requeue_delay=0.01,
        backoff_multiplier=0.01,
    ):
        with trio.fail_after(10):
            await done.wait()
    assert attempts == [1, 2, 3]


async def test_give_up_after_max_attempts(nsqd: NSQD) -> None:
    async with Producer(address(nsqd)) as producer:
        await producer.pub("gu", b"poison")
    given_up: list[Message] = []
    done = trio.Event()

    async def handler(message: Message) -> None:
        raise RuntimeError("always")

    def on_give_up(message: Message) -> None:
        given_up.append(message)
        done.set()

    async with Consumer(
        "gu",
        "c",
        handler,
        nsqd_tcp_addresses=[address(nsqd)],
        max_attempts=2,
        on_give_up=on_give_up,
        requeue_delay=0,
        backoff_multiplier=0.01,
    ) as consumer:
        with trio.fail_after(10):
            await done.wait()
    assert given_up[0].attempts == 3 and given_up[0].body == b"poison"
    assert consumer.stats["given_up"] == 1
    channel = nsqd.topics["gu"].channels["c"]
    assert channel.depth() == 0 if callable(getattr(channel, "depth", None)) else True


async def test_touch_keeps_a_slow_message(nsqd: NSQD) -> None:
    async with Producer(address(nsqd)) as producer:
        await producer.pub("to", b"slow")
    seen: list[int] = []

    async def handler(message: Message) -> None:
        seen.append(message.attempts)
        for _ in range(4):
            await trio.sleep(0.5)
            message.touch()

    async with Consumer("to", "c", handler, nsqd_tcp_addresses=[address(nsqd)], msg_timeout=1.0):
        await trio.sleep(2.6)
    assert seen == [1]  # never timed out and redelivered
