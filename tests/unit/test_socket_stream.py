"""`DirectSocketStream` over a real socket pair: it reads and writes like `trio.SocketStream`
(partial sends finished, errors translated), never touches its file descriptor after
`aclose` (the number may belong to another socket by then), and yields to other tasks at
least every `FAIR_TURNS` receives even when the socket is always ready."""

from __future__ import annotations

import socket

import pytest
import trio

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
