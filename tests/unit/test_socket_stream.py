"""`DirectSocketStream` over a real socket pair: it reads and writes like `trio.SocketStream`
(partial sends finished, errors translated), never touches its file descriptor after
`aclose` (the number may belong to another socket by then), and yields to other tasks at
least every `FAIR_TURNS` receives even when the socket is always ready."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from trionsq.nsqd.socket_stream import FAIR_TURNS, DirectSocketStream


def _pair() -> tuple[DirectSocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return DirectSocketStream(trio.SocketStream(a)), trio.SocketStream(b)


async def test_round_trip_and_end_of_stream() -> None:
    direct, peer = _pair()
    await direct.send_all(b"hello")
    assert await peer.receive_some(100) == b"hello"
    await peer.send_all(b"world")
    assert await direct.receive_some(100) == b"world"
    await peer.aclose()
    assert await direct.receive_some(100) == b""
    await direct.aclose()


async def test_a_send_larger_than_the_socket_buffer_completes(nursery: trio.Nursery) -> None:
    direct, peer = _pair()
    payload = bytes(range(256)) * 40_000  # 10 MB: far beyond the kernel's buffers
    received = bytearray()

    async def drain() -> None:
        while len(received) < len(payload):
            received.extend(await peer.receive_some(1 << 16))

    nursery.start_soon(drain)
    await direct.send_all(payload)
    with trio.fail_after(10):
        while len(received) < len(payload):
            await trio.sleep(0.01)
    assert bytes(received) == payload
    await direct.aclose()
    await peer.aclose()


async def test_after_aclose_the_descriptor_is_never_used() -> None:
    direct, peer = _pair()
    await direct.aclose()
    # Another socket may now have the same number: it must not be read or written.
    other_a, other_b = socket.socketpair()
    try:
        other_b.send(b"not yours")
        with pytest.raises(trio.ClosedResourceError):
            await direct.receive_some(100)
        with pytest.raises(trio.ClosedResourceError):
            await direct.send_all(b"x")
        other_b.setblocking(False)
        with pytest.raises(BlockingIOError):
            other_b.recv(100)  # nothing was written to the other socket
        assert other_a.recv(100) == b"not yours"  # and nothing was read from it
    finally:
        other_a.close()
        other_b.close()
        await peer.aclose()


async def test_a_reset_peer_is_a_broken_resource() -> None:
    a, b = trio.socket.socketpair()
    direct = DirectSocketStream(trio.SocketStream(a))
    b.close()
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(100):  # the first send may still be buffered
            await direct.send_all(b"x" * 65536)
    await direct.aclose()


async def test_an_always_ready_socket_still_lets_other_tasks_run(nursery: trio.Nursery) -> None:
    direct, peer = _pair()
    await peer.send_all(b"x" * 200_000)
    other_turns = 0

    async def other_task() -> None:
        nonlocal other_turns
        while True:
            other_turns += 1
            await trio.lowlevel.checkpoint()

    nursery.start_soon(other_task)
    await trio.sleep(0)  # let it start
    before = other_turns
    reads = 10 * FAIR_TURNS
    for _ in range(reads):
        assert await direct.receive_some(100)  # data is always there: never blocks
    # FAIR_TURNS direct reads, then one through Trio, which yields
    assert other_turns - before >= reads // (FAIR_TURNS + 1) - 1
    nursery.cancel_scope.cancel()
    await direct.aclose()
    await peer.aclose()


class _CountingWaits(DirectSocketStream):
    """Counts the receives that waited through Trio (epoll)."""

    __slots__ = ("waits",)

    def __init__(self, socket_stream: trio.SocketStream, busy_poll: float) -> None:
        super().__init__(socket_stream, busy_poll)
        self.waits = 0

    async def _wait_and_read(self, max_bytes: int | None, since: float | None = None) -> bytes:
        self.waits += 1
        return await super()._wait_and_read(max_bytes, since)


def _polling_pair(busy_poll: float) -> tuple[_CountingWaits, _CountingWaits, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    direct = _CountingWaits(trio.SocketStream(a), busy_poll)
    return direct, direct, trio.SocketStream(b)


class _StepsOf(trio.abc.Instrument):
    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.count += 1


async def _answer_after(peer: trio.SocketStream, delay: float, data: bytes) -> None:
    await trio.sleep(delay)
    await peer.send_all(data)


async def test_busy_poll_reads_what_comes_soon_without_a_wait(nursery: trio.Nursery) -> None:
    # A generous poll time: what arrives during it is read by polling, whatever the load.
    direct, beneath, peer = _polling_pair(busy_poll=5.0)
    nursery.start_soon(_answer_after, peer, 0.01, b"first")
    assert await direct.receive_some(100) == b"first"
    assert beneath.waits == 1  # no wait measured yet: the first goes through Trio
    for n in range(3):
        nursery.start_soon(_answer_after, peer, 0.01, b"next %d" % n)
        assert await direct.receive_some(100) == b"next %d" % n
    assert beneath.waits == 1  # each came while polling
    await direct.aclose()
    await peer.aclose()


async def test_busy_poll_skips_a_connection_whose_last_wait_was_long(
    nursery: trio.Nursery,
) -> None:
    direct, beneath, peer = _polling_pair(busy_poll=0.03)
    steps = _StepsOf(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    for n in range(3):
        nursery.start_soon(_answer_after, peer, 0.1, b"slow %d" % n)
        assert await direct.receive_some(100) == b"slow %d" % n
    trio.lowlevel.remove_instrument(steps)
    assert beneath.waits == 3  # 100 ms waits: each went through Trio...
    assert steps.count < 20  # ...at once, without polling first (which takes a step a poll)
    await direct.aclose()
    await peer.aclose()


async def test_busy_poll_zero_never_polls(nursery: trio.Nursery) -> None:
    direct, beneath, peer = _polling_pair(busy_poll=0.0)
    for n in range(3):
        nursery.start_soon(_answer_after, peer, 0.001, b"%d" % n)
        assert await direct.receive_some(100) == b"%d" % n
    assert beneath.waits == 3
    await direct.aclose()
    await peer.aclose()


async def test_a_polling_receive_lets_other_tasks_run_and_can_be_cancelled(
    nursery: trio.Nursery,
) -> None:
    direct, _waits, peer = _polling_pair(busy_poll=5.0)
    nursery.start_soon(_answer_after, peer, 0.001, b"warm")
    assert await direct.receive_some(100) == b"warm"
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    nursery.start_soon(other)
    with trio.move_on_after(0.05) as scope:
        await direct.receive_some(100)  # nothing comes: polls until cancelled
    assert scope.cancelled_caught
    assert ticks > 10
    await direct.aclose()
    await peer.aclose()


async def test_closing_the_stream_ends_a_receive_waiting_on_it(nursery: trio.Nursery) -> None:
    direct, peer = _pair()
    outcome: list[BaseException] = []

    async def receive() -> None:
        try:
            await direct.receive_some(100)
        except trio.ClosedResourceError as err:
            outcome.append(err)

    nursery.start_soon(receive)
    await trio.testing.wait_all_tasks_blocked()
    await direct.aclose()
    with trio.fail_after(5):
        while not outcome:
            await trio.sleep(0.001)
    await peer.aclose()


async def test_a_wait_that_outlasted_the_poll_counts_from_when_polling_began(
    nursery: trio.Nursery,
) -> None:
    direct, waits, peer = _polling_pair(busy_poll=0.02)
    nursery.start_soon(_answer_after, peer, 0.005, b"soon")
    assert await direct.receive_some(100) == b"soon"  # a short wait: the next one polls
    nursery.start_soon(_answer_after, peer, 0.035, b"late")
    assert await direct.receive_some(100) == b"late"  # polled 20 ms, then waited ~15 ms more
    assert waits.waits == 2
    # ~35 ms since polling began, longer than the poll: the next receive does not poll.
    steps = _StepsOf(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    nursery.start_soon(_answer_after, peer, 0.05, b"later")
    assert await direct.receive_some(100) == b"later"
    trio.lowlevel.remove_instrument(steps)
    assert steps.count < 20
    await direct.aclose()
    await peer.aclose()
