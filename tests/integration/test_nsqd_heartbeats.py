"""`Heartbeats` (on socket pairs): the heartbeat task of clients without a message pump. Its
schedule keeps each interval's clients in the order of their next heartbeat; a heartbeat that
cannot be written at once (the client does not read) is left to a pump started for that
client, and one that meets a send under way goes after it."""

from __future__ import annotations

import dataclasses
import errno
import os
import socket

import trio
import trio.testing

from trionsq.nsqd.client_v2 import ClientV2
from trionsq.nsqd.heartbeats import PumpStarter
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.options import NSQDOptions
from trionsq.nsqd.socket_stream import DirectSocketStream
from trionsq.protocol.frames import HEARTBEAT_FRAME


def _nsqd(nursery: trio.Nursery) -> NSQD:
    nsqd = NSQD(dataclasses.replace(NSQDOptions(), data_path="/nonexistent"))
    nsqd._clients_nursery = nursery  # as when it runs: pumps start there
    return nsqd


def _socket_client(nsqd: NSQD) -> tuple[ClientV2, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stream = DirectSocketStream(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
    return nsqd.new_client(stream, "127.0.0.1:1"), theirs


def _fill(client: ClientV2) -> int:
    """Write until the socket's buffers are full; the bytes written."""
    assert isinstance(client.stream, DirectSocketStream)
    fd = client.stream.socket.fileno()
    total = 0
    while True:
        try:
            total += os.write(fd, b"x" * 4096)
        except BlockingIOError:
            return total
        except OSError as err:  # pragma: no cover
            assert err.errno == errno.EAGAIN
            return total


async def test_a_heartbeat_is_one_write_when_the_socket_takes_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        nsqd = _nsqd(nursery)
        nursery.start_soon(nsqd.heartbeats.run)
        client, theirs = _socket_client(nsqd)
        nsqd.heartbeats.add(client)
        await trio.sleep(nsqd.options.client_timeout / 2 + 0.001)
        theirs.setblocking(False)
        assert theirs.recv(100) == HEARTBEAT_FRAME
        assert isinstance(client.wake, PumpStarter)
        assert client.out == b""
        nsqd.heartbeats.remove(client)
        theirs.close()
        nursery.cancel_scope.cancel()


async def test_a_heartbeat_the_socket_cannot_take_goes_to_a_pump(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        nsqd = _nsqd(nursery)
        nursery.start_soon(nsqd.heartbeats.run)
        client, theirs = _socket_client(nsqd)
        nsqd.heartbeats.add(client)
        filled = _fill(client)
        await trio.sleep(nsqd.options.client_timeout / 2 + 0.001)
        assert client.pump_scope is not None  # a pump runs now, and heartbeats are its
        assert len(nsqd.heartbeats) == 0
        # The client reads at last: the filler, then the heartbeat, whole.
        theirs.setblocking(False)
        received = b""
        while len(received) < filled + len(HEARTBEAT_FRAME):
            try:
                received += theirs.recv(65536)
            except BlockingIOError:
                await trio.sleep(0.01)
        assert received == b"x" * filled + HEARTBEAT_FRAME
        client.pump_scope.cancel()
        theirs.close()
        nursery.cancel_scope.cancel()


async def test_a_heartbeat_during_a_send_goes_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        nsqd = _nsqd(nursery)
        client, theirs = _socket_client(nsqd)
        client.sending = True
        client.next_heartbeat = trio.current_time()
        nsqd.heartbeats.add(client)
        await nsqd.heartbeats._send_due()
        assert client.out == HEARTBEAT_FRAME
        assert client.pump_scope is None
        theirs.close()
        nursery.cancel_scope.cancel()


async def test_clients_are_beaten_in_order_of_their_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        nsqd = _nsqd(nursery)
        nursery.start_soon(nsqd.heartbeats.run)
        pairs = [_socket_client(nsqd) for _ in range(3)]
        for (client, _), interval in zip(pairs, (3.0, 5.0, 7.0), strict=True):
            client.heartbeat_interval = interval
            client.next_heartbeat = trio.current_time() + interval
            nsqd.heartbeats.add(client)
        await trio.sleep(35.001)
        counts = []
        for _, theirs in pairs:
            theirs.setblocking(False)
            counts.append(len(theirs.recv(4096)) // len(HEARTBEAT_FRAME))
            theirs.close()
        assert counts == [11, 7, 5]
        nursery.cancel_scope.cancel()
